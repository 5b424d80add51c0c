"""Root writes through nobody's links: every ``--out`` and the pull agent's files (tests/cli_runner.py, the real CLI).

A directory owned by another user (not root), or writable by group/others without the sticky bit,
is refused with one line and nothing written; a link planted where a file goes is replaced, never
followed; every directory above ``pull --dest`` is checked, links included.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from cli_runner import invoke

from topocast.model.graph import Node, TopologyGraph
from topocast.safeio.files import write_file

NOBODY = 65534
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
SECRET = b"root:secret\n"


def graph_file(tmp_path: Path) -> Path:
    nodes = [Node(name=f"n{i}", id=f"i-{i}", fabric=["leaf1" if i < 3 else "leaf2", "spine"]) for i in range(6)]
    path = tmp_path / "g.json"
    path.write_text(TopologyGraph(cluster="c", provider="test", nodes=nodes).model_dump_json())
    return path


def victim(tmp_path: Path) -> Path:
    path = tmp_path / "shadow"
    path.write_bytes(SECRET)
    path.chmod(0o600)
    return path


def their_dir(path: Path, mode: int = 0o755) -> Path:
    path.mkdir(mode=mode)
    path.chmod(mode)
    os.chown(path, NOBODY, NOBODY)
    return path


@needs_root
def test_render_out_in_another_users_directory_is_refused(tmp_path: Path) -> None:
    out = their_dir(tmp_path / "theirs")
    result = invoke(["render", "--graph", graph_file(tmp_path), "-f", "slurm-tree", "--out", out])
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.splitlines() == [
        f"topocast: error: --out {out}: directory {out} is owned by uid {NOBODY}, neither root nor uid 0 that runs "
        "topocast; another user could plant a link there; nothing written"
    ]
    assert os.listdir(out) == []


@needs_root
def test_render_out_below_another_users_directory_is_refused(tmp_path: Path) -> None:
    theirs = their_dir(tmp_path / "theirs")
    out = theirs / "sub" / "out"
    result = invoke(["render", "--graph", graph_file(tmp_path), "-f", "slurm-tree", "--out", out])
    assert result.exit_code == 2 and f"directory {theirs} is owned by uid {NOBODY}" in result.stderr
    assert os.listdir(theirs) == [], "nothing created below it"


@pytest.mark.parametrize(("mode", "refused"), [(0o777, True), (0o775, True), (0o1777, False)])
def test_render_out_writable_by_others_is_refused_unless_sticky(tmp_path: Path, mode: int, refused: bool) -> None:
    out = tmp_path / "shared"
    out.mkdir()
    out.chmod(mode)
    result = invoke(["render", "--graph", graph_file(tmp_path), "-f", "slurm-tree", "--out", out])
    if refused:
        assert result.exit_code == 2
        assert f"directory {out} is writable by group or others (mode {mode:o}) without the sticky bit" in result.stderr
        assert os.listdir(out) == []
    else:
        assert result.exit_code == 0, result.output
        assert sorted(os.listdir(out)) == ["manifest.json", "topology-tree.conf"]


def test_a_planted_link_in_out_is_replaced_not_followed(tmp_path: Path) -> None:
    target = victim(tmp_path)
    out = tmp_path / "out"
    out.mkdir(mode=0o755)
    (out / "topology-tree.conf").symlink_to(target)
    (out / "manifest.json").symlink_to(tmp_path / "created-elsewhere")
    result = invoke(["render", "--graph", graph_file(tmp_path), "-f", "slurm-tree", "--out", out])
    assert result.exit_code == 0, result.output
    assert target.read_bytes() == SECRET and not (tmp_path / "created-elsewhere").exists()
    assert not (out / "topology-tree.conf").is_symlink() and "SwitchName=" in (out / "topology-tree.conf").read_text()
    assert sorted(os.listdir(out)) == ["manifest.json", "topology-tree.conf"], "no temp file left"


def test_schema_out_replaces_a_planted_link(tmp_path: Path) -> None:
    target = victim(tmp_path)
    out = tmp_path / "out"
    out.mkdir(mode=0o755)
    (out / "schema.json").symlink_to(target)
    assert invoke(["schema", "--out", out / "schema.json"]).exit_code == 0
    assert target.read_bytes() == SECRET and '"properties"' in (out / "schema.json").read_text()


@needs_root
def test_schema_and_discover_out_in_another_users_directory_are_refused(tmp_path: Path, conformance_dir: Path) -> None:
    out = their_dir(tmp_path / "theirs")
    schema = invoke(["schema", "--out", out / "schema.json"])
    assert (
        schema.exit_code == 2 and f"--out {out}/schema.json: directory {out} is owned by uid {NOBODY}" in schema.stderr
    )
    example = conformance_dir / "inputs" / "ibnetdiscover" / "example.out"
    args = ["discover", "--provider", "ibnetdiscover", "--input", example, "--cluster", "dgx"]
    discover = invoke([*args, "--out", out / "g.json"])
    assert discover.exit_code == 2 and f"directory {out} is owned by uid {NOBODY}" in discover.stderr
    assert os.listdir(out) == []


def test_write_file_leaves_no_temp_file_when_the_rename_fails(tmp_path: Path) -> None:
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "x").write_text("keep")
    with pytest.raises(OSError):
        write_file(tmp_path / "busy", b"data")
    assert sorted(os.listdir(tmp_path)) == ["busy"]


# ----- pull: every directory above --dest, and its own state file -----------------------------------
def pull(src: Path, dest: Path, *extra: object):
    return invoke(["pull", "--source", f"file://{src}", "--dest", dest, "--no-validate", *extra])


@needs_root
def test_pull_refuses_a_dest_below_another_users_directory(tmp_path: Path) -> None:
    theirs = their_dir(tmp_path / "theirs")
    slurm = theirs / "slurm"
    slurm.mkdir(mode=0o755)
    os.chown(slurm, 0, 0)  # the directory itself is root's; the one holding it is not: it can be swapped
    src = tmp_path / "t.conf"
    src.write_text("SwitchName=s1 Nodes=n[1-4]\n")
    result = pull(src, slurm / "topology.conf")
    assert result.exit_code == 3 and result.stdout == ""
    assert result.stderr.startswith(f"<3>{slurm}/topology.conf: refused: directory {theirs} is owned by uid {NOBODY}")
    assert os.listdir(slurm) == []


@needs_root
def test_pull_refuses_a_symlinked_dest_directory_in_another_users_tree(tmp_path: Path) -> None:
    theirs = their_dir(tmp_path / "theirs")
    real = theirs / "slurm"
    real.mkdir(mode=0o755)
    os.chown(real, 0, 0)
    etc = tmp_path / "etc"
    etc.mkdir(mode=0o755)
    (etc / "slurm").symlink_to(real)  # the link is root's, where it points is not safe
    src = tmp_path / "t.conf"
    src.write_text("SwitchName=s1 Nodes=n[1-4]\n")
    result = pull(src, etc / "slurm" / "topology.conf")
    assert result.exit_code == 3 and f"directory {theirs} is owned by uid {NOBODY}" in result.stderr
    assert os.listdir(real) == []


@needs_root
def test_pull_refuses_a_state_file_in_another_users_directory_before_installing(tmp_path: Path) -> None:
    theirs = their_dir(tmp_path / "theirs")
    etc = tmp_path / "etc"
    etc.mkdir(mode=0o755)
    src = tmp_path / "t.conf"
    src.write_text("SwitchName=s1 Nodes=n[1-4]\n")
    result = pull(src, etc / "topology.conf", "--state-file", theirs / "pull-state.json")
    assert result.exit_code == 3 and f"directory {theirs} is owned by uid {NOBODY}" in result.stderr
    assert os.listdir(etc) == [] and os.listdir(theirs) == []


def test_pull_replaces_a_planted_state_file_link(tmp_path: Path) -> None:
    target = victim(tmp_path)
    etc, state = tmp_path / "etc", tmp_path / "state"
    etc.mkdir(mode=0o755)
    state.mkdir(mode=0o755)
    (state / "pull-state.json").symlink_to(target)
    src = tmp_path / "t.conf"
    src.write_text("SwitchName=s1 Nodes=n[1-4]\n")
    result = pull(src, etc / "topology.conf", "--state-file", state / "pull-state.json")
    assert result.exit_code == 0, result.output
    assert target.read_bytes() == SECRET and not (state / "pull-state.json").is_symlink()
    assert os.listdir(state) == ["pull-state.json"]


def test_synth_out_replaces_a_planted_link_instead_of_following_it(tmp_path: Path) -> None:
    from topocast.cli import run

    victim = tmp_path / "victim"
    victim.write_text("root-only\n")
    (tmp_path / "g.json").symlink_to(victim)
    assert run(["synth", "--nodes", "20", "-o", str(tmp_path / "g.json")]) in (0, None)
    assert victim.read_text() == "root-only\n"
    assert not (tmp_path / "g.json").is_symlink() and '"nodes"' in (tmp_path / "g.json").read_text()
