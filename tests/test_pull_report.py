"""``topocast pull`` says what moved: nodes added, removed and moved (old -> new switch path or block)
between the installed file and the new one, on its one line and in the outcome."""

from __future__ import annotations

import json
from pathlib import Path

from cli_runner import invoke

from topocast.agents.pull import pull

TREE = (
    "SwitchName=root Switches=spine[1-2]\n"
    "SwitchName=spine1 Switches=leaf[1-2]\n"
    "SwitchName=spine2 Switches=leaf3\n"
    "SwitchName=leaf1 Nodes=n[1-4]\n"
    "SwitchName=leaf2 Nodes=n[5-8]\n"
    "SwitchName=leaf3 Nodes=n[9-12]\n"
)
#: n4 leaf1 -> leaf3, n8 leaf2 -> leaf1, n12 gone, n13 new under leaf3
MOVED = (
    TREE.replace("leaf1 Nodes=n[1-4]", "leaf1 Nodes=n[1-3,8]")
    .replace("leaf2 Nodes=n[5-8]", "leaf2 Nodes=n[5-7]")
    .replace("leaf3 Nodes=n[9-12]", "leaf3 Nodes=n[4,9-11,13]")
)


def pull_cli(src: Path, dest: Path) -> str:
    result = invoke(["pull", "--source", f"file://{src}", "--dest", str(dest), "--no-validate"])
    assert result.exit_code == 0, result.output
    (line,) = result.stdout.splitlines()
    return line


def test_the_pull_line_names_nodes_added_removed_and_moved(tmp_path: Path) -> None:
    src, dest = tmp_path / "topology-tree.conf", tmp_path / "etc" / "topology.conf"
    dest.parent.mkdir(mode=0o755)
    src.write_text(TREE)
    first = pull_cli(src, dest)
    assert first.endswith("; nodes: 12 added (n[1-12]), 0 removed, 0 moved"), first

    src.write_text(MOVED)
    second = pull_cli(src, dest)
    assert second.endswith(
        "; nodes: 1 added (n13), 1 removed (n12), 2 moved "
        "(n4: root:spine1:leaf1 -> root:spine2:leaf3, n8: root:spine1:leaf2 -> root:spine1:leaf1)"
    ), second
    assert dest.read_text() == MOVED

    again = invoke(["pull", "--source", f"file://{src}", "--dest", str(dest), "--no-validate"])
    assert "nodes:" not in again.stdout  # nothing installed, nothing to report


def test_the_outcome_carries_the_changes_of_a_block_file(tmp_path: Path) -> None:
    src, dest = tmp_path / "topology-block.conf", tmp_path / "topology.conf"
    dest.write_text("BlockName=b1 Nodes=n[1-4]\nBlockName=b2 Nodes=n[5-8]\nBlockSizes=4\n")
    src.write_text("BlockName=b1 Nodes=n[1-3]\nBlockName=b2 Nodes=n[4-8]\nBlockSizes=4\n")
    out = pull(f"file://{src}", dest, reconfigure=False, validate=False, slurm_conf=None)
    assert out.ok and out.action == "installed"
    assert out.changes is not None
    assert json.loads(json.dumps(out.changes.as_dict())) == {"added": [], "removed": [], "moved": {"n4": ["b1", "b2"]}}
    many = out.changes.summary(sample=0)
    assert many == "0 added, 0 removed, 1 moved"
