"""The Slurm helpers without a real slurmctld: file parsing, structural checks, install edge cases.

A fake ``scontrol`` (a shell script driven by files in a temp dir) lets the
install tests force the failures a real controller rarely shows on demand:
a topology that does not show up after reconfigure, a controller that stops
answering ping.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

import pytest

from topocast.slurm.conffile import parse_conf_text, slurm_conf_nodes
from topocast.slurm.install import install_topology
from topocast.slurm.scontrol import parse_show_topology
from topocast.slurm.topofile import check_structure, parse_topology, topology_from_records
from topocast.slurm.validate import structure_messages, validate_topology_text

OLD = "SwitchName=leaf1 Nodes=n[1-4]\nSwitchName=leaf2 Nodes=n[5-8]\nSwitchName=spine Switches=leaf[1-2]\n"
NEW = "SwitchName=a Nodes=n[1-4]\nSwitchName=b Nodes=n[5-8]\nSwitchName=top Switches=a,b\n"


def check(text: str, defined: list[str] | None = None) -> tuple[list[str], list[str]]:
    topo = parse_topology(text, "t.conf")
    check_structure(topo, defined)
    return topo.errors, topo.warnings


# ----- reading files ----------------------------------------------------------------------
def test_conf_lines_follow_slurm_syntax() -> None:
    lines = parse_conf_text('# header\nSwitchName = s1 \\\n  Nodes=n[1-2] # comment\nswitchname="s 2" nodes=x\\#1\n')
    assert [(line.lineno, line.pairs) for line in lines] == [
        (2, (("SwitchName", "s1"), ("Nodes", "n[1-2]"))),
        (4, (("switchname", "s 2"), ("nodes", "x#1"))),
    ]


def test_slurm_conf_nodes_skip_default_and_expand(tmp_path: Path) -> None:
    conf = tmp_path / "slurm.conf"
    conf.write_text("NodeName=DEFAULT CPUs=4\nnodename=gpu[1-2],cpu7 \\\n Feature=x\nNodeName=gpu2\nPartitionName=p\n")
    assert slurm_conf_nodes(conf) == ["gpu1", "gpu2", "cpu7"]


def test_show_topology_output_is_parsed_and_expanded() -> None:
    out = (
        "SwitchName=leaf1 Level=0 LinkSpeed=1 Nodes=n[1-2]\n"
        "SwitchName=spine Level=1 LinkSpeed=1 Nodes=n[1-2],m3 Switches=leaf[1-2]\n"
    )
    shown = parse_show_topology(out)
    assert shown["leaf1"].level == 0 and shown["leaf1"].nodes == ("n1", "n2") and shown["leaf1"].switches == ()
    assert shown["spine"].nodes == ("n1", "n2", "m3") and shown["spine"].switches == ("leaf1", "leaf2")


# ----- structural checks ------------------------------------------------------------------
def test_good_tree_has_no_findings() -> None:
    assert check(OLD, [f"n{i}" for i in range(1, 9)]) == ([], [])


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("SwitchName=s Nodes=n1\nSwitchName=s Nodes=n2\n", "t.conf:2: switch 's' is defined twice (first on line 1"),
        ("SwitchName=s Switches=x\n", "unknown child switch 'x'"),
        ("SwitchName=s Nodez=n1\n", "t.conf:1: unknown key 'Nodez'"),
        ("Nodes=n1\n", "line starts with unknown key 'Nodes'"),
        ("Include /etc/slurm/other.conf\n", "'Include' is not allowed"),
        ("SwitchName=s Nodes=n1 Nodes=n2\n", "key 'nodes' is given twice"),
        ("SwitchName=s LinkSpeed=fast Nodes=n1\n", "LinkSpeed='fast'"),
        ("SwitchName=a Switches=b\nSwitchName=b Switches=a\nSwitchName=c Nodes=n1\n", "cycle: a -> b -> a"),
        ("SwitchName=l Nodes=n1\nSwitchName=s Switches=l Nodes=n2\n", "has both Switches= and Nodes="),
        ("SwitchName=l\n", "has neither Switches= nor Nodes="),
        ("SwitchName=l Nodes=n[1-\n", "bad Nodes= hostlist"),
        ('SwitchName="l 1" Nodes=n1\n', "contains whitespace"),
        ("SwitchName=" + "x" * 65 + " Nodes=n1\n", "is 65 characters"),
        ("SwitchName=a Nodes=n[1-3]\nSwitchName=b Nodes=n[3-4]\n", "n3 is in more than one leaf switch"),
        ("", "no switches or blocks"),
        ("SwitchName=s Nodes=n1\nBlockName=b Nodes=n2\n", "mixes SwitchName"),
    ],
)
def test_tree_errors(text: str, fragment: str) -> None:
    errors, _ = check(text)
    assert any(fragment in e for e in errors), errors


def test_tree_coverage_against_slurm_conf() -> None:
    errors, warnings = check("SwitchName=s Nodes=n[1-2],ghost\n", ["n1", "n2", "n3"])
    assert errors == []  # a node without fabric (a CPU node) is left out of topocast's own tree
    assert warnings == [
        "t.conf: 1 node(s) of slurm.conf are in no switch: n3",
        "t.conf: 1 node(s) are not defined in slurm.conf: ghost",
    ]


def test_tree_warnings_do_not_fail() -> None:
    errors, warnings = check("SwitchName=l Nodes=n[1-2]\nSwitchName=p1 Switches=l\nSwitchName=p2 Switches=l\n")
    assert errors == []
    assert any("'l' has 2 parents (p1, p2)" in w for w in warnings)
    assert any("2 root switches (p1, p2)" in w for w in warnings)


@pytest.mark.parametrize(
    ("sizes", "ok"),
    [("4", True), ("4,8,32", True), ("4,12", False), ("4,4", False), ("0", False), ("4,x", False)],
)
def test_block_sizes_rule(sizes: str, ok: bool) -> None:
    errors, _ = check(f"BlockName=b1 Nodes=n[1-4]\nBlockSizes={sizes}\n")
    assert (errors == []) is ok, errors


def test_block_structure() -> None:
    errors, warnings = check(
        "BlockName=b1 Nodes=n[1-4]\nBlockName=b2 Nodes=n[4-5]\nBlockName=b3\nBlockName=b1 Nodes=n9\nBlockSizes=4\n",
        [f"n{i}" for i in range(1, 7)],
    )
    assert any("'b1' is defined twice" in e for e in errors)
    assert any("n4 in more than one block: b1, b2" in e for e in errors)
    assert any("'b2' has 2 nodes, fewer than the base block size 4" in w for w in warnings)
    assert any("'b3' has no nodes" in w for w in warnings)
    assert any("in no block: n6" in w for w in warnings), "a block file may leave nodes out: warning only"


def test_records_read_as_the_text_of_the_file_they_say() -> None:
    """A renderer's records give what reading its file gives (the fabric view checks them so);
    where the text could read otherwise there is no answer and the text is read instead."""
    long_name = "s" * 65
    tree = (
        f"SwitchName=top Switches=l1,{long_name}\n# l1=x\nSwitchName=l1 Nodes=n[1-2]\nSwitchName={long_name} Nodes=n3\n"
    )
    records = [(1, "top", f"l1,{long_name}", []), (3, "l1", "", ["n1", "n2"]), (4, long_name, "", ["n3"])]
    read = topology_from_records("t.conf", switches=records)
    assert read is not None and read.kind == "tree"
    assert (
        structure_messages([read])
        == structure_messages([("t.conf", tree)])
        == [
            f"invalid: t.conf:4: switch name {long_name[:40]!r}... is 65 characters; topology.conf(5) allows 64 "
            "(slurmctld 22.05 accepts it, later releases may not)"
        ]
    )
    blocks = [(1, "b1", ["n1", "n2", "n3", "n4"]), (2, "b2", ["n5"])]
    read = topology_from_records("b.conf", blocks=blocks, block_sizes=(3, [4, 12]))
    text = "BlockName=b1 Nodes=n[1-4]\nBlockName=b2 Nodes=n5\nBlockSizes=4,12\n"
    assert read is not None
    assert (
        structure_messages([read])
        == structure_messages([("b.conf", text)])
        == [
            "b.conf:2: block 'b2' has 1 nodes, fewer than the base block size 4 "
            "(Slurm before 25.05 rejects such blocks)",
            "invalid: b.conf:3: BlockSizes=4,12: 12 is not a power-of-two multiple of 4 (each size must be the "
            "previous one times 2, 4, 8...; slurmctld 26.05: fatal 'Invalid BlockSizes value')",
        ]
    )
    assert topology_from_records("x", switches=[(1, "l 1", "", ["n1"])]) is None  # a space ends the value
    assert topology_from_records("x", switches=[(1, "l1", "", ["n1"]), (2, "l2", "", ["n1"])]) is None  # twice
    assert topology_from_records("x", blocks=[(1, "b1", ["n1"])], block_sizes=(2, [0])) is None


def test_structure_only_validation_says_so() -> None:
    result = validate_topology_text(OLD, controller=False)
    assert result.ok and not result.controller_checked
    assert result.summary.startswith("topology/tree: 3 switches, 8 nodes, 1 root")
    bad = validate_topology_text(b"\xff\xfe", controller=False)
    assert not bad.ok and "not UTF-8" in bad.errors[0]


# ----- install with a fake scontrol ---------------------------------------------------------
FAKE = """#!/bin/sh
d="$FAKE_SCONTROL_DIR"
echo "$*" >> "$d/calls"
case "$1" in
  ping) if [ "$(cat "$d/ping")" = UP ]; then echo "Slurmctld(primary) at vm is UP"; else
        echo "Slurmctld(primary) at vm is DOWN"; exit 1; fi ;;
  show) cat "$d/topology" ;;
  reconfigure) exit "$(cat "$d/reconf_rc")" ;;
esac
"""


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "fake"
    d.mkdir()
    script = d / "scontrol"
    script.write_text(FAKE)
    script.chmod(0o755)
    (d / "ping").write_text("UP")
    (d / "reconf_rc").write_text("0")
    (d / "calls").write_text("")
    monkeypatch.setenv("FAKE_SCONTROL_DIR", str(d))
    return d


def shown_as(text: str) -> str:
    """What scontrol show topology prints for a tree file: each switch with every node below it."""
    switches = parse_topology(text).switches

    def below(name: str) -> list[str]:
        sw = switches[name]
        return sorted({*sw.nodes, *(n for c in sw.children for n in below(c))})

    return "".join(
        f"SwitchName={name} Level=0 LinkSpeed=1 Nodes={','.join(below(name))}"
        + (f" Switches={','.join(sw.children)}" if sw.children else "")
        + "\n"
        for name, sw in switches.items()
    )


def do_install(fake: Path, dest: Path, text: str, **kwargs: object):  # type: ignore[no-untyped-def]
    return install_topology(
        text.encode(),
        dest,
        expected_sha256=hashlib.sha256(text.encode()).hexdigest(),
        validate=False,
        reconfigure=True,
        scontrol=str(fake / "scontrol"),
        ping_timeout=0.3,
        **kwargs,  # type: ignore[arg-type]
    )


def test_rollback_when_show_topology_misses_the_new_switches(fake: Path, tmp_path: Path) -> None:
    dest = tmp_path / "etc" / "topology.conf"
    dest.parent.mkdir()
    dest.write_text(OLD)
    (fake / "topology").write_text(shown_as(OLD))  # the controller keeps showing the old tree
    result = do_install(fake, dest, NEW)
    assert result.action == "rolled_back" and result.failed_step == "show-topology"
    assert "missing: a, b, top" in result.message and "controller is UP" in result.message
    assert dest.read_text() == OLD
    assert (fake / "calls").read_text().count("reconfigure") == 2


def test_rollback_when_the_controller_stops_answering(fake: Path, tmp_path: Path) -> None:
    dest = tmp_path / "topology.conf"
    dest.write_text(OLD)
    (fake / "ping").write_text("DOWN")
    result = do_install(fake, dest, NEW)
    assert result.action == "rolled_back" and result.failed_step == "ping"
    assert "DOWN" in result.message
    assert dest.read_text() == OLD


def test_success_keeps_mode_and_previous_file_and_leaves_no_temp_files(fake: Path, tmp_path: Path) -> None:
    dest = tmp_path / "topology.conf"
    dest.write_text(OLD)
    dest.chmod(0o640)
    (fake / "topology").write_text(shown_as(NEW))
    result = do_install(fake, dest, NEW)
    assert result.ok and result.action == "installed" and result.reconfigured
    assert dest.read_text() == NEW and Path(f"{dest}.prev").read_text() == OLD
    assert stat.S_IMODE(dest.stat().st_mode) == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fake", "topology.conf", "topology.conf.prev"]


def test_first_install_without_previous_file_is_never_removed(fake: Path, tmp_path: Path) -> None:
    dest = tmp_path / "topology.conf"
    (fake / "reconf_rc").write_text("1")
    result = do_install(fake, dest, NEW)
    assert not result.ok and result.action == "failed" and result.failed_step == "rollback"
    assert "no previous file" in result.message
    assert dest.read_text() == NEW
    assert stat.S_IMODE(dest.stat().st_mode) == 0o644, "slurmctld (SlurmUser) must be able to read it"


def test_tampered_content_writes_nothing(tmp_path: Path) -> None:
    dest = tmp_path / "topology.conf"
    result = install_topology(NEW.encode(), dest, expected_sha256="0" * 64, validate=False)
    assert result.action == "refused" and result.failed_step == "sha256"
    assert f"{dest}: step sha256 failed" in result.message
    assert list(tmp_path.iterdir()) == []


def test_missing_directory_is_refused(tmp_path: Path) -> None:
    dest = tmp_path / "nope" / "topology.conf"
    result = install_topology(
        NEW.encode(), dest, expected_sha256=hashlib.sha256(NEW.encode()).hexdigest(), validate=False
    )
    assert result.action == "refused" and "does not exist" in result.message


def test_install_through_a_symlink_is_refused(tmp_path: Path) -> None:
    # root installs here: a link at dest could point anywhere (passwd, slurm.conf), so none is followed
    target = tmp_path / "shared-topology.conf"
    target.write_text(OLD)
    link = tmp_path / "topology.conf"
    os.symlink(target, link)
    result = install_topology(
        NEW.encode(), link, expected_sha256=hashlib.sha256(NEW.encode()).hexdigest(), validate=False
    )
    assert (result.ok, result.action) == (False, "refused")
    assert "is a symlink" in result.message
    assert link.is_symlink() and target.read_text() == OLD
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shared-topology.conf", "topology.conf"]
