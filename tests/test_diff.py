"""``topocast diff``: what moved between two graphs, as a person and as a script read it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_runner import invoke

from topocast.model.diff import diff_graphs
from topocast.model.graph import graph_from_json


def graph(nodes: list[dict]) -> dict:
    return {"schema_version": 1, "cluster": "c1", "provider": "test", "nodes": nodes}


OLD = graph(
    [
        {"name": "gpu-1", "id": "i-1", "fabric": ["leaf-1", "spine-1"], "accelerator": "nvl-a"},
        {"name": "gpu-2", "id": "i-2", "fabric": ["leaf-1", "spine-1"], "accelerator": "nvl-a"},
        {"name": "gpu-3", "id": "i-3", "fabric": ["leaf-2", "spine-1"], "accelerator": "nvl-b"},
        {"name": "gpu-4", "id": "i-4", "fabric": ["leaf-2", "spine-1"], "accelerator": "nvl-b"},
        {"name": "cpu-1", "id": "i-9"},
    ]
)
# gpu-2 moved to leaf-3 under a new spine, gpu-4 changed domain, cpu-1 gone, gpu-5 new
NEW = graph(
    [
        {"name": "gpu-1", "id": "i-1", "fabric": ["leaf-1", "spine-1"], "accelerator": "nvl-a"},
        {"name": "gpu-2", "id": "i-2", "fabric": ["leaf-3", "spine-2"], "accelerator": "nvl-a"},
        {"name": "gpu-3", "id": "i-3", "fabric": ["leaf-2", "spine-1"], "accelerator": "nvl-b"},
        {"name": "gpu-4", "id": "i-4", "fabric": ["leaf-2", "spine-1"], "accelerator": "nvl-c", "subdomain": "r1"},
        {"name": "gpu-5", "id": "i-5", "fabric": ["leaf-3", "spine-2"], "accelerator": "nvl-c"},
    ]
)


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    old, new = tmp_path / "old.json", tmp_path / "new.json"
    old.write_text(json.dumps(OLD))
    new.write_text(json.dumps(NEW))
    return old, new


def test_diff_finds_the_known_changes() -> None:
    d = diff_graphs(graph_from_json(json.dumps(OLD)), graph_from_json(json.dumps(NEW)))
    assert d.added == ["gpu-5"] and d.removed == ["cpu-1"]
    assert [(m.node, m.old, m.new) for m in d.moved] == [("gpu-2", ("leaf-1", "spine-1"), ("leaf-3", "spine-2"))]
    assert [(c.node, c.old, c.new) for c in d.domain_changed] == [("gpu-4", ("nvl-b", None), ("nvl-c", "r1"))]
    assert (d.domains_added, d.domains_removed) == (["nvl-c"], [])
    assert d.changed_nodes() == {"gpu-2", "gpu-4", "gpu-5"}
    assert not d.same


def test_cli_text_names_each_move_and_exits_1(files: tuple[Path, Path]) -> None:
    result = invoke(["diff", *files])
    assert result.exit_code == 1, result.output
    assert "added 1 node(s): gpu-5" in result.stdout
    assert "removed 1 node(s): cpu-1" in result.stdout
    assert "gpu-2: spine-1 > leaf-1 -> spine-2 > leaf-3" in result.stdout
    assert "gpu-4: nvl-b -> nvl-c/r1" in result.stdout
    assert "summary: 1 added, 1 removed, 1 moved, 1 domain changed" in result.stdout


def test_cli_json_is_machine_readable(files: tuple[Path, Path]) -> None:
    result = invoke(["diff", "--json", *files])
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    assert data["same"] is False
    # root-first, the same order as the text report ("spine-1 > leaf-1 -> spine-2 > leaf-3")
    assert data["moved"] == [{"node": "gpu-2", "old": ["spine-1", "leaf-1"], "new": ["spine-2", "leaf-3"]}]
    assert data["domain_changed"][0]["new"] == {"accelerator": "nvl-c", "subdomain": "r1"}


def test_same_graph_exits_0_even_with_nodes_reordered(tmp_path: Path, files: tuple[Path, Path]) -> None:
    shuffled = tmp_path / "shuffled.json"
    shuffled.write_text(json.dumps({**OLD, "nodes": list(reversed(OLD["nodes"]))}))
    result = invoke(["diff", str(files[0]), str(shuffled)])
    assert result.exit_code == 0, result.output
    assert "no differences" in result.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["{old}", "/nonexistent.json"], "cannot read"),
        (["-", "-"], "only one of OLD and NEW"),
        (["{bad}", "{old}"], "not valid JSON"),
    ],
)
def test_bad_input_exits_2_with_one_line(
    args: list[str], message: str, files: tuple[Path, Path], tmp_path: Path
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{nope")
    result = invoke(["diff", *(a.format(old=files[0], bad=bad) for a in args)])
    assert result.exit_code == 2
    errors = [ln for ln in result.stderr.splitlines() if ln.startswith("topocast: error:")]
    assert len(errors) == 1 and message in errors[0], result.stderr


def test_two_stored_generations_diff_by_uri(aws_env: str, files: tuple[Path, Path]) -> None:
    import boto3

    s3 = boto3.client("s3")
    s3.create_bucket(Bucket="topocast-diff")
    keys = []
    for i, path in enumerate(files, start=41):
        key = f"topocast/c1/graphs/{i:012d}.json"
        s3.put_object(Bucket="topocast-diff", Key=key, Body=path.read_bytes(), Metadata={"generation": str(i)})
        keys.append(f"s3://topocast-diff/{key}")
    result = invoke(["diff", "--json", *keys])
    assert result.exit_code == 1, result.output
    assert json.loads(result.stdout)["added"] == ["gpu-5"]
    assert invoke(["diff", keys[0], files[0].as_uri()]).exit_code == 0  # the same graph, from a file:// URI
