"""``topocast pull --check``: what a run would do, through the CLI, with nothing written."""

from __future__ import annotations

import json
import os
from pathlib import Path

from cli_runner import invoke

OLD = "SwitchName=leaf1 Nodes=gpu-[01-04]\nSwitchName=leaf2 Nodes=gpu-[05-08]\nSwitchName=spine Switches=leaf[1-2]\n"
NEW = (  # gpu-04 moves to leaf2, gpu-09 joins leaf2
    "SwitchName=leaf1 Nodes=gpu-[01-03]\nSwitchName=leaf2 Nodes=gpu-[04-09]\nSwitchName=spine Switches=leaf[1-2]\n"
)


def setup(tmp_path: Path, new: str) -> tuple[Path, Path, Path]:
    etc = tmp_path / "etc"
    etc.mkdir(mode=0o755)
    dest = etc / "topology.conf"
    dest.write_text(OLD)
    src = tmp_path / "new.conf"
    src.write_text(new)
    return etc, dest, src


def listing(etc: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in etc.iterdir()}


def test_check_says_what_would_move_and_join_and_writes_nothing(tmp_path: Path) -> None:
    etc, dest, src = setup(tmp_path, NEW)
    before = listing(etc)
    state = tmp_path / "state" / "pull.json"
    state.parent.mkdir()
    args = ["pull", "--check", "--source", f"file://{src}", "--dest", dest, "--no-validate", "--reconfigure",
            "--state-file", state, "--json"]  # fmt: skip
    result = invoke(args)
    assert result.exit_code == 0, result.stderr
    (report,) = [json.loads(line) for line in result.stdout.splitlines()]
    assert report["action"] == "would_install"
    assert "by writing the file and `scontrol reconfigure`" in report["detail"]
    assert "check: nothing written" in report["detail"]
    assert (report["changes"]["added"], report["changes"]["removed"], report["changes"]["moved"]) == (1, 0, 1)
    assert report["changes"]["sample"]["added"] == ["gpu-09"]
    assert report["changes"]["sample"]["moved"] == {"gpu-04": ["spine:leaf1", "spine:leaf2"]}
    assert listing(etc) == before  # no file, no lock, no backup
    assert not state.exists() and os.listdir(state.parent) == []


def test_check_of_the_installed_file_is_unchanged(tmp_path: Path) -> None:
    _, dest, src = setup(tmp_path, OLD)
    result = invoke(["pull", "--check", "--source", f"file://{src}", "--dest", dest, "--no-validate"])
    assert result.exit_code == 0
    assert "unchanged" in result.stdout + result.stderr


def test_check_of_a_file_that_drops_most_nodes_says_held_with_the_runs_exit_code(tmp_path: Path) -> None:
    etc, dest, src = setup(tmp_path, "SwitchName=leaf1 Nodes=gpu-[01-02]\n")
    before = listing(etc)
    result = invoke(["pull", "--check", "--source", f"file://{src}", "--dest", dest, "--no-validate"])
    assert result.exit_code == 4
    assert "held" in result.stderr and "nothing written" in result.stderr
    assert listing(etc) == before


def test_check_does_not_go_with_watch(tmp_path: Path) -> None:
    result = invoke(["pull", "--check", "--watch", "--source", "file:///x", "--dest", tmp_path / "t.conf"])
    assert result.exit_code == 2 and "--check runs once" in result.stderr
