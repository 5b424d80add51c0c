"""``topocast synth``: test data that the consumers read as the fat tree asked for."""

from __future__ import annotations

import json
from pathlib import Path

from cli_runner import invoke


def test_a_graph_and_a_model_of_one_shape_render_the_same_slurm_tree(tmp_path: Path) -> None:
    for name in ("g.json", "m.yaml"):
        args = ["synth", "--nodes", "40", "--tiers", "2", "--nodes-per-leaf", "10", "--fanout", "2"]
        result = invoke([*args, "--domain-size", "20", "--name-pattern", "n{i:03d}", "-o", tmp_path / name])
        assert result.exit_code == 0, result.output
    tree = invoke(["render", "--graph", tmp_path / "g.json", "-f", "slurm-tree"])
    from_model = invoke(["render", "--model", tmp_path / "m.yaml", "-f", "slurm-tree"])
    # 40 nodes, 10 per leaf: 4 leaves, 2 per tier-1 switch
    assert (
        tree.stdout
        == from_model.stdout
        == (
            "SwitchName=t1-00000 Switches=leaf-[00000-00001]\n"
            "SwitchName=t1-00001 Switches=leaf-[00002-00003]\n"
            "SwitchName=leaf-00000 Nodes=n[000-009]\n"
            "SwitchName=leaf-00001 Nodes=n[010-019]\n"
            "SwitchName=leaf-00002 Nodes=n[020-029]\n"
            "SwitchName=leaf-00003 Nodes=n[030-039]\n"
        )
    )
    graph = json.loads((tmp_path / "g.json").read_text())
    assert {n["accelerator"] for n in graph["nodes"]} == {"nvl-00000", "nvl-00001"}


def test_missing_nodes_and_no_domains(tmp_path: Path) -> None:
    out = tmp_path / "g.json"
    result = invoke(["synth", "--nodes", "200", "--missing", "0.5", "--domain-size", "0", "-o", out])
    assert result.exit_code == 0 and "without topology" in result.stderr
    nodes = json.loads(out.read_text())["nodes"]
    bare = sum(1 for n in nodes if not n["fabric"])
    assert 50 < bare < 150 and all(n["accelerator"] is None for n in nodes)


def test_a_name_pattern_that_names_two_nodes_alike_is_one_line() -> None:
    result = invoke(["synth", "--nodes", "3", "--name-pattern", "gpu"])
    assert (result.exit_code, result.stderr) == (
        2,
        "topocast: error: --name-pattern 'gpu' names two nodes 'gpu': use {i} in it\n",
    )
