"""Caps that hold: hostile inputs end in one clear error, fast, never a MemoryError or RecursionError."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from topocast.errors import HostlistError, InvalidGraphError, RenderError, TopocastError
from topocast.model.graph import graph_from_json
from topocast.model.hostlist import count, expand, name_budget
from topocast.providers.model import model_to_graph
from topocast.renderers import RenderOptions
from topocast.safeio.validation import load_json, validate
from topocast.safeio.yaml_input import load_yaml, load_yaml_all
from topocast.slurm.topofile import parse_topology

#: the 1.8 KB hostlist of the issue: one range of 500,000 repeated 200 times (10^8 names)
BOMB = "n[" + ",".join(["0-499999"] * 200) + "]"
#: 474 bytes of YAML aliases that expand to 9^9 strings
ALIAS_BOMB = "\n".join(
    [
        "a: &a [x, x, x, x, x, x, x, x, x]",
        *(f"{c}: &{c} [{', '.join([f'*{p}'] * 9)}]" for p, c in zip("abcdefgh", "bcdefghi", strict=True)),
    ]
)


def test_the_hostlist_bomb_is_counted_not_expanded() -> None:
    assert len(BOMB) > 1800 and count(BOMB) == 100_000_000
    with pytest.raises(HostlistError, match="exceeds 500000 entries"):
        expand(BOMB)
    assert count("rack[1-2]-n[01-03],x") == 7 and expand("rack[1-2]-n[01-03],x")[-2:] == ["rack2-n03", "x"]


def test_one_budget_across_many_hostlists() -> None:
    with name_budget(1000, "the file"):
        assert len(expand("a[1-600]")) == 600
        with pytest.raises(HostlistError, match="the hostlists in the file expand to more than 1000 node names"):
            expand(["b[1-300]", "c[1-200]"])
    assert len(expand("a[1-600]", limit=1000)) == 600, "outside the block, only the per-call limit"


def test_topology_file_with_200_lines_of_500k_is_refused_by_the_file_budget() -> None:
    text = "".join(f"SwitchName=s{i} Nodes=m{i}x[0-499999]\n" for i in range(200))
    topo = parse_topology(text, "big.conf")
    assert len(topo.node_names()) == 500_000
    assert any("the hostlists in big.conf expand to more than 500000 node names in total" in e for e in topo.errors)


def test_model_with_40_blocks_of_500k_is_refused() -> None:
    model = {"switches": {"S1": {}}, "blocks": [{"switch": "S1", "nodes": [f"b{i}x[0-499999]"]} for i in range(40)]}
    with pytest.raises(InvalidGraphError, match=r"blocks\[1\]: the hostlists in m\.yaml expand to more than 500000"):
        model_to_graph(model, "m.yaml")


def test_options_with_many_topologies_are_capped_in_total() -> None:
    topologies = {f"t{i}": {"plugin": "tree", "nodes": [f"u{i}x[0-499999]"]} for i in range(3)}
    with pytest.raises(RenderError, match="expand to more than 500000 names in total"):
        validate(RenderOptions, {"topologies": topologies}, "opts", RenderError)


def test_yaml_alias_bomb_is_refused_by_its_expanded_size() -> None:
    assert len(ALIAS_BOMB) < 500
    with pytest.raises(TopocastError, match="expands to more than 2000000 YAML values"):
        load_yaml(ALIAS_BOMB, "model.yaml", TopocastError)
    with pytest.raises(TopocastError, match="alias refers to a collection containing itself"):
        load_yaml("&a [*a]", "x", TopocastError)
    assert load_yaml("a: &v [1, 2]\nb: *v\n", "x", TopocastError) == {"a": [1, 2], "b": [1, 2]}
    assert load_yaml_all("---\na: 1\n---\nb: 2\n", "x", TopocastError) == [{"a": 1}, {"b": 2}]


@pytest.mark.parametrize("text", ["[" * 100_000, '{"a":' * 100_000, "[" * 65 + "]" * 65])
def test_deep_json_is_refused_before_json_recurses(text: str) -> None:
    with pytest.raises(TopocastError, match="nested deeper than 64 levels"):
        load_json(text, "body", TopocastError)
    with pytest.raises(InvalidGraphError, match="nested deeper than 64 levels"):
        graph_from_json(text, "g.json")


def test_brackets_inside_strings_do_not_count_as_nesting() -> None:
    text = json.dumps({"s": "[" * 1000, "t": [[1]]})
    assert load_json(text, "body", TopocastError) == {"s": "[" * 1000, "t": [[1]]}


def test_a_graph_over_the_size_cap_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import topocast.model.graph

    monkeypatch.setattr(topocast.model.graph, "MAX_GRAPH_BYTES", 1000)
    path = tmp_path / "g.json"
    path.write_text(json.dumps({"cluster": "c", "provider": "x", "nodes": [{"name": f"n{i}"} for i in range(100)]}))
    with pytest.raises(InvalidGraphError, match=f"{path}: larger than the 1000 byte limit"):
        topocast.model.graph.load_graph(path)


CLI = [sys.executable, "-c", "from topocast.cli.commands import main; main()"]


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["validate-slurm", "model", "options"])
def test_bombs_through_the_cli_under_a_3_gb_address_space_limit(tmp_path: Path, kind: str) -> None:
    """What an operator sees: one line, exit 2 (or an invalid verdict), no MemoryError, in seconds."""
    (tmp_path / "bomb.conf").write_text(f"SwitchName=s1 Nodes={BOMB}\n")
    (tmp_path / "model.yaml").write_text(f"switches: {{S1: {{}}}}\nblocks:\n- switch: S1\n  nodes: ['{BOMB}']\n")
    (tmp_path / "opts.yaml").write_text(f"topologies:\n  t: {{plugin: tree, nodes: ['{BOMB}']}}\n")
    (tmp_path / "slurm.conf").write_text("ClusterName=c\nSlurmctldHost=localhost\nNodeName=n[1-4]\n")
    (tmp_path / "g.json").write_text('{"cluster": "c", "provider": "x", "nodes": [{"name": "n1"}]}')
    args = {
        "validate-slurm": ["validate-slurm", "--topology", "bomb.conf", "--slurm-conf", "slurm.conf"],
        "model": ["render", "--model", "model.yaml"],
        "options": ["render", "--graph", "g.json", "--options", "opts.yaml"],
    }[kind]
    limit = ["prlimit", "--as=3000000000", "--"]
    proc = subprocess.run(limit + CLI + args, cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False)
    assert "MemoryError" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode in (1, 2), proc.stderr
    assert "500000" in proc.stdout + proc.stderr


def test_a_stored_object_over_the_graph_cap_is_refused_by_its_length_unread() -> None:
    from topocast.aws.s3_objects import S3Objects

    class Body:
        reads = 0

        def read(self, n: int = -1) -> bytes:
            Body.reads += 1
            return b"{}"

        def close(self) -> None:
            pass

    class S3:
        def get_object(self, Bucket: str, Key: str) -> dict:
            return {"Body": Body(), "ContentLength": 224 * 1024 * 1024, "ETag": '"e"'}

    with pytest.raises(
        InvalidGraphError, match=r"s3://b/graphs/x\.json: 234881024 bytes exceeds the 67108864 byte limit"
    ):
        S3Objects("b", S3()).get("graphs/x.json")
    assert Body.reads == 0


@pytest.mark.parametrize("flag", ["--options", "--k8s-options"])
@pytest.mark.parametrize(
    ("content", "reason"),
    [(b"\xff\xfe\x00\x01binary\x80", "not UTF-8 text (byte 0)"), (b"labels: \x00", "not JSON/YAML: not valid YAML")],
)
def test_publish_with_a_binary_options_file_is_one_line_exit_2(
    tmp_path: Path, flag: str, content: bytes, reason: str
) -> None:
    from cli_runner import invoke

    (tmp_path / "g.json").write_text('{"cluster": "c", "provider": "x", "nodes": [{"name": "n1"}]}')
    (tmp_path / "bin.dat").write_bytes(content)
    res = invoke(["publish", "--graph", tmp_path / "g.json", flag, tmp_path / "bin.dat", "--dry-run"])
    assert res.exit_code == 2
    assert res.output.startswith(f"topocast: error: {flag} {tmp_path / 'bin.dat'}: {reason}")
    assert res.output.count("\n") == 1 and "internal error" not in res.output
