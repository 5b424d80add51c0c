"""``topocast diff`` of two Slurm topology files: tree, block and topology.yaml, read the way slurmctld reads them.

Expected moves are worked out by hand from the files below.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_runner import invoke

TREE_OLD = """\
SwitchName=spine-1 Switches=leaf-[1-2]
SwitchName=leaf-1 Nodes=gpu-[01-04]
SwitchName=leaf-2 Nodes=gpu-[05-08]
"""
# gpu-04 moved to leaf-2, gpu-08 gone, gpu-09 new
TREE_NEW = """\
SwitchName=spine-1 Switches=leaf-[1-2]
SwitchName=leaf-1 Nodes=gpu-[01-03]
SwitchName=leaf-2 Nodes=gpu-[04-07],gpu-09
"""


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_two_tree_files_show_added_removed_and_moved_nodes(tmp_path: Path) -> None:
    old, new = write(tmp_path, "old.conf", TREE_OLD), write(tmp_path, "new.conf", TREE_NEW)
    result = invoke(["diff", old, new])
    assert result.exit_code == 1, result.output
    assert f"--- {old} (8 nodes)" in result.stdout and f"+++ {new} (8 nodes)" in result.stdout
    assert "added 1 node(s): gpu-09" in result.stdout
    assert "removed 1 node(s): gpu-08" in result.stdout
    assert "  gpu-04: spine-1 > leaf-1 -> spine-1 > leaf-2" in result.stdout
    assert result.stderr == ""


def test_the_same_tree_written_differently_is_no_difference(tmp_path: Path) -> None:
    reordered = "SwitchName=leaf-2 Nodes=gpu-05,gpu-06,gpu-07,gpu-08\nSwitchName=leaf-1 Nodes=gpu-[01-04]\n"
    reordered += "# the spine last\nSwitchName=spine-1 Switches=leaf-1,leaf-2\n"
    result = invoke(["diff", write(tmp_path, "a.conf", TREE_OLD), write(tmp_path, "b.conf", reordered)])
    assert result.exit_code == 0, result.output
    assert "no differences" in result.stdout


def test_block_files_as_json(tmp_path: Path) -> None:
    old = write(tmp_path, "old.conf", "BlockName=b1 Nodes=n[1-4]\nBlockName=b2 Nodes=n[5-8]\nBlockSizes=4\n")
    new = write(tmp_path, "new.conf", "BlockName=b1 Nodes=n[1-3],n5\nBlockName=b2 Nodes=n4,n[6-8]\nBlockSizes=4\n")
    result = invoke(["diff", old, new, "--json"])
    assert result.exit_code == 1, result.output
    report = json.loads(result.stdout)
    assert report["same"] is False and report["added"] == [] and report["removed"] == []
    assert report["moved"] == [
        {"node": "n4", "old": ["b1"], "new": ["b2"]},
        {"node": "n5", "old": ["b2"], "new": ["b1"]},
    ]


YAML_OLD = """\
- topology: fab
  cluster_default: true
  tree:
    switches:
      - switch: spine-1
        children: leaf-[1-2]
      - switch: leaf-1
        nodes: gpu-[1-2]
      - switch: leaf-2
        nodes: gpu-[3-4]
- topology: blk
  block:
    blocks:
      - block: b1
        nodes: gpu-[1-4]
- topology: none
  flat: true
"""


def test_topology_yaml_names_the_topology_of_each_switch(tmp_path: Path) -> None:
    new_text = YAML_OLD.replace("nodes: gpu-[1-2]", "nodes: gpu-1").replace("nodes: gpu-[3-4]", "nodes: gpu-[2-4]")
    result = invoke(["diff", write(tmp_path, "old.yaml", YAML_OLD), write(tmp_path, "new.yaml", new_text)])
    assert result.exit_code == 1, result.output
    assert "  gpu-2: fab:spine-1 > fab:leaf-1 > blk:b1 -> fab:spine-1 > fab:leaf-2 > blk:b1" in result.stdout
    assert "summary: 0 added, 0 removed, 1 moved" in result.stdout


def test_a_file_slurmctld_would_refuse_is_one_line_with_the_fix(tmp_path: Path) -> None:
    bad = write(tmp_path, "bad.conf", "SwitchName=x Nodes=a\nSwitchName=x Nodes=b\n")
    result = invoke(["diff", write(tmp_path, "ok.conf", TREE_OLD), bad])
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1
    assert f"{bad}:2: switch 'x' is defined twice" in result.stderr
    assert f"topocast validate-slurm --topology {bad}" in result.stderr


def test_a_graph_against_a_slurm_file_is_refused(tmp_path: Path) -> None:
    graph = {"schema_version": 1, "cluster": "c", "provider": "t", "nodes": [{"name": "gpu-01", "fabric": ["leaf-1"]}]}
    graph_file = tmp_path / "g.json"
    graph_file.write_text(json.dumps(graph))
    result = invoke(["diff", str(graph_file), write(tmp_path, "t.conf", TREE_OLD)])
    assert result.exit_code == 2 and result.stderr.count("\n") == 1
    assert "compare two graphs or two Slurm files" in result.stderr


@pytest.mark.parametrize("what", ["directory", "binary"])
def test_a_side_that_is_no_text_file_is_one_line(tmp_path: Path, what: str) -> None:
    if what == "directory":
        side, expected = str(tmp_path), "is a directory, not a file"
    else:
        side, expected = write(tmp_path, "x.bin", ""), "not UTF-8 text"
        Path(side).write_bytes(b"\xff\xfe\x00junk")
    result = invoke(["diff", write(tmp_path, "t.conf", TREE_OLD), side])
    assert result.exit_code == 2 and result.stderr.count("\n") == 1, result.output
    assert expected in result.stderr
