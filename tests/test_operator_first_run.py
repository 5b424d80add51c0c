"""What a new operator meets on a first run (issue 32): each mistake one line with its cause and fix, each
answer the truth (a file no slurmctld judged is not called valid, an unchanged pull was not validated again)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cli_runner import invoke

from topocast.model.synth import synthetic_data, tiers_for_one_root
from topocast.slurm.topofile import parse_topology

GRAPH = {
    "schema_version": 1,
    "cluster": "c1",
    "provider": "test",
    "nodes": [
        {"name": "gpu-1", "id": "i-1", "fabric": ["leaf-1", "spine-1"], "accelerator": "nvl-a"},
        {"name": "gpu-2", "id": "i-2", "fabric": ["leaf-2", "spine-1"], "accelerator": "nvl-a"},
    ],
}


@pytest.fixture
def graph_file(tmp_path: Path) -> Path:
    path = tmp_path / "graph.json"
    path.write_text(json.dumps(GRAPH))
    return path


def one_error_line(result_stderr: str) -> str:
    lines = result_stderr.splitlines()
    assert len(lines) == 1, result_stderr
    assert lines[0].startswith("topocast: error: "), lines[0]
    return lines[0]


def test_a_graph_from_before_schema_1_says_rediscover(tmp_path: Path) -> None:
    old = {"cluster": "c1", "provider": "aws", "nodes": []}
    old["nodes"] = [{"name": f"gpu-{i}", "switches": ["leaf-1", "spine-1"]} for i in range(300)]
    path = tmp_path / "old.json"
    path.write_text(json.dumps(old))
    result = invoke(["render", "--graph", path])
    assert result.exit_code == 2 and result.stdout == ""
    line = one_error_line(result.stderr)
    assert "graph from before schema version 1" in line and "re-run 'topocast discover'" in line


@pytest.mark.parametrize("formats", [["kueue", "kai"], ["all"]])
def test_several_formats_without_out_fail_before_any_warning(graph_file: Path, formats: list[str]) -> None:
    result = invoke(["render", "--graph", graph_file, *(a for f in formats for a in ("-f", f))])
    assert result.exit_code == 2 and result.stdout == ""
    assert "need --out DIR" in one_error_line(result.stderr)


def test_an_out_that_is_a_file_is_named_so(graph_file: Path, tmp_path: Path) -> None:
    taken = tmp_path / "taken"
    taken.write_text("mine\n")
    result = invoke(["render", "--graph", graph_file, "-f", "kueue", "-f", "kai", "--out", taken])
    assert result.exit_code == 2
    assert f"--out {taken}: is a file, not a directory" in one_error_line(result.stderr)
    assert taken.read_text() == "mine\n"


def test_an_out_that_cannot_be_created_fails_before_rendering(graph_file: Path, tmp_path: Path) -> None:
    under_a_file = tmp_path / "taken" / "out"
    (tmp_path / "taken").write_text("mine\n")
    result = invoke(["render", "--graph", graph_file, "-f", "kueue", "-f", "kai", "--out", under_a_file])
    assert result.exit_code == 2
    assert f"--out {under_a_file}: cannot create it: {tmp_path / 'taken'} is a file" in one_error_line(result.stderr)


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write any directory")
def test_an_out_this_user_cannot_write_fails_before_rendering(graph_file: Path, tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o555)
    result = invoke(["render", "--graph", graph_file, "-f", "kueue", "-f", "kai", "--out", locked / "out"])
    assert result.exit_code == 2
    assert f"cannot create it in {locked} (permission denied)" in one_error_line(result.stderr)


def test_list_options_of_one_provider_lists_only_its_options() -> None:
    result = invoke(["discover", "--provider", "ibnetdiscover", "--list-options"])
    assert result.exit_code == 0, result.output
    headers = [line for line in result.stdout.splitlines() if not line.startswith(" ")]
    assert headers == ["ibnetdiscover:"]
    assert "[--host-regex, TOPOCAST_IB_HOST_REGEX]" in result.stdout
    every = invoke(["discover", "--list-options"])
    assert {"aws:", "gcp:", "ibnetdiscover:"} <= {line for line in every.stdout.splitlines() if line.endswith(":")}


def test_list_options_of_an_unknown_provider_is_one_line() -> None:
    result = invoke(["discover", "--provider", "nope", "--list-options"])
    assert result.exit_code == 2
    assert "'nope' is not a provider; choose one of: aws, azure" in one_error_line(result.stderr)


def test_a_synthetic_cluster_of_10000_nodes_has_one_root(tmp_path: Path) -> None:
    # 10,000 nodes, 18 per leaf: 556 leaves; 8-way tiers above: 70, 9, 2, 1 switches: 5 tiers, one root
    result = invoke(["synth", "--nodes", "10000", "-o", tmp_path / "g.json"])
    assert result.exit_code == 0, result.output
    nodes = json.loads((tmp_path / "g.json").read_text())["nodes"]
    per_tier = [len({n["fabric"][tier] for n in nodes}) for tier in range(5)]
    assert per_tier == [556, 70, 9, 2, 1] and {len(n["fabric"]) for n in nodes} == {5}
    tree = invoke(["render", "--graph", tmp_path / "g.json", "-f", "slurm-tree"])
    assert parse_topology(tree.stdout).roots() == ["t4-00000"]  # validate-slurm's "9 root switches" is gone


def test_synth_keeps_the_tiers_asked_for_and_three_for_small_clusters() -> None:
    assert tiers_for_one_root(256, 18, 8) == 3  # 15 leaves, 2, 1: two tiers would do, three is the floor
    assert tiers_for_one_root(10_000, 18, 8) == 5
    assert tiers_for_one_root(10_000, 18, 1) == 3  # a fan-out of 1 joins nothing
    nodes = synthetic_data(40, levels=2, nodes_per_leaf=10, fanout=2)["nodes"]
    assert {n["fabric"][-1] for n in nodes} == {"t1-00000", "t1-00001"}


def test_a_cloudtrail_record_is_named_as_one(tmp_path: Path) -> None:
    delivery = tmp_path / "trail.json"
    record = {"eventVersion": "1.08", "eventSource": "ec2.amazonaws.com", "eventName": "RunInstances"}
    delivery.write_text(json.dumps({"Records": [record]}))
    result = invoke(["events", "explain", delivery])
    assert result.exit_code == 2
    reason = json.loads(result.stdout)["reason"]
    assert reason.startswith("this is a CloudTrail record (ec2.amazonaws.com)") and "S3" not in reason


def test_pull_help_gives_the_held_exit_code_of_forbid_reconfigure() -> None:
    result = invoke(["pull", "--help"])
    text = " ".join(result.stdout.split())
    assert "hold and exit 4 (held)" in text and "4 held" in text


def test_node_topology_help_names_gs_not_gcs() -> None:
    text = invoke(["node-topology", "--help"]).stdout
    assert "gs://" in text and "gcs://" not in text


def test_a_yaml_no_controller_judged_is_not_called_valid(tmp_path: Path) -> None:
    topology = tmp_path / "topology.yaml"
    topology.write_text(
        "- topology: t\n  cluster_default: true\n  block:\n    blocks:\n      - block: b1\n        nodes: n[1-2]\n"
    )
    # this host's slurmctld (22.05, or none) reads no topology.yaml: only our structural checks run
    result = invoke(["validate-slurm", "--topology", topology])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(f"{topology}: structure valid, not judged by slurmctld")
    assert ": valid (" not in result.stdout


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("slurmctld") is None, reason="no slurmctld on PATH: the demo validates nothing")
def test_a_demo_rerun_does_not_claim_a_validation_it_did_not_do(tmp_path: Path) -> None:
    pytest.importorskip("moto")
    # two processes, as an operator runs it twice (the simulated account lives in the process)
    args = [sys.executable, "-m", "topocast.cli", "demo", "--nodes", "8", "--events", "2", "--quiet", "0.2"]
    args += ["--out", str(tmp_path / "demo")]
    first, again = (subprocess.run(args, capture_output=True, text=True, check=False) for _ in range(2))
    assert first.returncode == 0 and again.returncode == 0, again.stderr
    assert "pull: installed (validated by slurmctld)" in first.stdout
    assert "pull: unchanged," in again.stdout and "validated" not in again.stdout
