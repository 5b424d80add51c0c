"""The current-Slurm tier: a real slurmctld 26.05 (Debian sid chroot) reads what we render and install.

Every test here starts throwaway 26.05 controllers in the chroot (``sid_controller_factory``)
or validates through one; the expected switches and blocks are written from the input graph
in the test, never taken from our renderer. Skipped, with the reason, when the chroot is
missing (see tests/slurm_fixtures.py).
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from slurm_fixtures import SID_ROOT, ControllerFactory, mixed_padding_names, slurm_hostnames

from topocast.agents.pull import pull
from topocast.model.graph import Node, TopologyGraph
from topocast.model.hostlist import compact_str, expand
from topocast.renderers import render
from topocast.renderers.base import RenderOptions
from topocast.slurm.controller import SlurmController, SlurmControllerError, SlurmInstall
from topocast.slurm.live import apply_topology, node_spec
from topocast.slurm.validate import validate_topology_text

pytestmark = pytest.mark.slurm_current

TOPOCAST = [sys.executable, "-m", "topocast.cli"]

NODES = [f"n{i}" for i in range(1, 13)]
TREE = (
    "SwitchName=root Switches=spine[1-2]\n"
    "SwitchName=spine1 Switches=leaf[1-2]\n"
    "SwitchName=spine2 Switches=leaf3\n"
    "SwitchName=leaf1 Nodes=n[1-4]\n"
    "SwitchName=leaf2 Nodes=n[5-8]\n"
    "SwitchName=leaf3 Nodes=n[9-12]\n"
)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def below(ctl: SlurmController, name: str | None = None) -> dict[str, set[str]]:
    """switch -> nodes the running controller places below it."""
    return {sw: set(info.nodes) for sw, info in ctl.show_topology(name).items()}


def live(ctl: SlurmController, text: str, **kw: object):  # type: ignore[no-untyped-def]
    data = text.encode()
    return apply_topology(
        data,
        ctl.topology_path,
        expected_sha256=sha(data),
        slurm_conf=ctl.conf_path,
        install=ctl.install,
        **kw,  # type: ignore[arg-type]
    )


# ----- validation on 26.05 ----------------------------------------------------------------------------


def test_all_three_formats_are_checked_by_26_05(sid_slurm: SlurmInstall) -> None:
    block = "BlockName=b1 Nodes=n[1-4]\nBlockName=b2 Nodes=n[5-8]\nBlockSizes=4,8\n"
    yml = (
        "- topology: t1\n  cluster_default: true\n  tree:\n    switches:\n"
        "      - switch: r\n        children: s[1-2]\n      - switch: s1\n        nodes: n[1-4]\n"
        "      - switch: s2\n        nodes: n[5-8]\n"
        "- topology: b\n  cluster_default: false\n  block:\n    block_sizes: [4]\n    blocks:\n"
        "      - block: x1\n        nodes: n[1-4]\n"
        "- topology: f\n  flat: true\n"
    )
    for text, source in ((TREE, "topology.conf"), (block, "topology.conf"), (yml, "topology.yaml")):
        result = validate_topology_text(text, source=source, install=sid_slurm, controller=True)
        assert result.ok and result.controller_checked and result.version == "26.05", (source, result.errors)


def test_25_11_and_26_05_fatal_rules_are_caught_statically_and_by_the_controller(
    sid_slurm: SlurmInstall, sid_controller_factory: ControllerFactory
) -> None:
    cases = [
        ("BlockSizes=4\n", "topology/block", "No blocks configured", ">= 25.11"),
        ("# nothing\n", "topology/tree", "No switches configured", ">= 25.11"),
        (
            "BlockName=b1 Nodes=n[1-4]\nBlockName=b2 Nodes=n[5-8]\nBlockSizes=4,12\n",
            "topology/block",
            "Invalid BlockSizes value: 12",
            "12 is not a power-of-two multiple of 4",
        ),
    ]
    for text, plugin, fatal, ours in cases:
        with pytest.raises(SlurmControllerError) as info:
            sid_controller_factory(NODES, text, topology_plugin=plugin)
        assert any(fatal in line for line in info.value.log), info.value.log
        static = validate_topology_text(text, controller=False)
        assert not static.ok and any(ours in e for e in static.errors), static.errors
        assert any("fatal" in e or "refuses" in e for e in static.errors), static.errors


def test_record_separator_is_refused_and_slurm_really_reads_it_as_one_line(
    sid_controller_factory: ControllerFactory,
) -> None:
    text = "SwitchName=s1 Nodes=n[1-4]\x1eSwitchName=s2 Nodes=n[5-8]\nSwitchName=top Switches=s1\n"
    ctl = sid_controller_factory(NODES[:8], text)
    # Slurm keeps one record: s1 gets the *last* Nodes= and s2 does not exist
    assert below(ctl)["s1"] == set(expand("n[5-8]")) and "s2" not in below(ctl)
    result = validate_topology_text(text, controller=False)
    assert not result.ok and "U+001E (record separator)" in result.errors[0]


def test_an_error_line_of_the_controller_fails_validation(sid_slurm: SlurmInstall, tmp_path: Path) -> None:
    conf = tmp_path / "slurm.conf"
    conf.write_text("NodeName=n[1-4] CPUs=1\n")
    result = validate_topology_text("SwitchName=s1 Nodes=n[1-5]\n", conf, install=sid_slurm)
    assert not result.ok
    assert any("error:" in e and "n5" in e for e in result.errors), result.errors


def test_validate_slurm_cli_with_a_chroot_root_and_with_a_too_old_controller(
    sid_slurm: SlurmInstall, tmp_path: Path
) -> None:
    yml = tmp_path / "topology.yaml"
    yml.write_text(
        "- topology: t\n  cluster_default: true\n  block:\n    block_sizes: [2]\n    blocks:\n"
        "      - block: b1\n        nodes: n[1-2]\n"
    )
    root = str(sid_slurm.root)
    new = subprocess.run(
        [*TOPOCAST, "validate-slurm", "--topology", str(yml), "--slurm-root", root],
        capture_output=True,
        text=True,
        check=False,
    )
    assert new.returncode == 0 and "slurmctld 26.05 started with it" in new.stdout, new.stderr
    old = subprocess.run(
        [*TOPOCAST, "validate-slurm", "--topology", str(yml), "--slurmctld", "/usr/sbin/slurmctld"],
        capture_output=True,
        text=True,
        check=False,
    )
    if old.returncode == 2 and "cannot run" in old.stderr:
        pytest.skip("no Debian 12 slurmctld on this host")
    lines = [line for line in old.stderr.splitlines() if line.strip()]
    assert old.returncode == 1 and len(lines) == 1, old.stderr
    assert "22.05" in lines[0] and "topology.yaml needs Slurm >= 25.05" in lines[0]


# ----- rendered block and topology.yaml loaded into 26.05 ---------------------------------------------


def cluster() -> tuple[TopologyGraph, dict[str, list[str]], dict[str, list[str]]]:
    """3 NVLink domains (4, 4 and 3 nodes) under two leaves of one spine; expected maps from the input."""
    domains = {
        "nvl-a": ["g01", "g02", "g03", "g04"],
        "nvl-b": ["g05", "g06", "g07", "g08"],
        "nvl-c": ["g09", "g10", "g11"],
    }
    leaves = {"leaf-x": ["g01", "g02", "g03", "g04", "g05", "g06"], "leaf-y": ["g07", "g08", "g09", "g10", "g11"]}
    leaf_of = {n: leaf for leaf, nodes in leaves.items() for n in nodes}
    domain_of = {n: d for d, nodes in domains.items() for n in nodes}
    nodes = [
        Node(name=n, id=f"i-{n}", fabric=[leaf_of[n], "spine-1"], accelerator=domain_of[n]) for n in sorted(leaf_of)
    ]
    return TopologyGraph(cluster="c1", provider="model", nodes=nodes), domains, leaves


def test_rendered_block_file_loads_with_every_block_one_domain(sid_controller_factory: ControllerFactory) -> None:
    graph, domains, _ = cluster()
    art = render(graph, "slurm-block", RenderOptions(slurm_version="26.05"))  # keeps nvl-c (3 nodes < 4)
    ctl = sid_controller_factory([n.name for n in graph.nodes], art.content, topology_plugin="topology/block")
    assert ctl.log_lines() == []
    blocks = ctl.show_blocks()
    shown = sorted(sorted(b.nodes) for b in blocks.values() if b.nodes)
    assert shown == sorted(domains.values())
    # the prevailing domain size (4), not the partial domain's 3
    assert {b.size for b in blocks.values()} == {4}


def test_rendered_topology_yaml_loads_with_nodes_under_the_right_switches_and_blocks(
    sid_controller_factory: ControllerFactory,
) -> None:
    graph, domains, leaves = cluster()
    art = render(graph, "slurm-yaml", RenderOptions(cluster_default="tree", slurm_version="26.05"))
    ctl = sid_controller_factory([n.name for n in graph.nodes], art.content, topology_file="topology.yaml")
    assert [line for line in ctl.log_lines() if "error" in line.lower()] == []
    tree = below(ctl, "tree")
    assert tree == {"spine-1": {n for ns in leaves.values() for n in ns}, **{k: set(v) for k, v in leaves.items()}}
    assert below(ctl) == tree  # tree is the cluster default
    blocks = ctl.show_blocks("block")
    assert sorted(sorted(b.nodes) for b in blocks.values() if b.nodes) == sorted(domains.values())


# ----- live updates on a running 26.05 --------------------------------------------------------------------


def test_live_update_of_one_node_without_reconfigure(sid_controller_factory: ControllerFactory) -> None:
    ctl = sid_controller_factory(NODES, TREE)
    pid = ctl.pid
    new = TREE.replace("leaf1 Nodes=n[1-4]", "leaf1 Nodes=n[1-3]").replace(
        "leaf3 Nodes=n[9-12]", "leaf3 Nodes=n[4,9-12]"
    )
    result = live(ctl, new)
    assert result.ok and result.applied == "live", result.message
    assert "1 node(s) with 1 scontrol update call" in result.message
    assert below(ctl)["leaf3"] == {"n4", "n9", "n10", "n11", "n12"} and "n4" not in below(ctl)["spine1"]
    assert ctl.topology_path.read_text() == new  # a restart reads what runs
    assert ctl.is_running() and ctl.pid == pid
    assert "Topology=default:root:spine2:leaf3" in ctl.scontrol("show", "node", "n4")[1]


def test_live_update_of_a_hostlist_one_call_per_destination(sid_controller_factory: ControllerFactory) -> None:
    ctl = sid_controller_factory(NODES, TREE)
    new = (
        TREE.replace("leaf1 Nodes=n[1-4]", "leaf1 Nodes=n1")
        .replace("leaf2 Nodes=n[5-8]", "leaf2 Nodes=n[2-3,5-8]")
        .replace("leaf3 Nodes=n[9-12]", "leaf3 Nodes=n[4,9-12]")
    )
    result = live(ctl, new, max_share=0.5)
    assert result.ok and result.applied == "live", result.message
    assert "3 node(s) with 2 scontrol update calls" in result.message
    shown = below(ctl)
    assert shown["leaf2"] == set(expand("n[2-3,5-8]")) and shown["leaf1"] == {"n1"}


def test_live_move_that_needs_a_new_spine_and_leaf(sid_controller_factory: ControllerFactory) -> None:
    ctl = sid_controller_factory(NODES, TREE)
    new = (
        "SwitchName=root Switches=spine[1-2,9]\nSwitchName=spine1 Switches=leaf[1-2]\n"
        "SwitchName=spine2 Switches=leaf3\n"
        "SwitchName=spine9 Switches=leaf9\nSwitchName=leaf1 Nodes=n[1-4]\nSwitchName=leaf2 Nodes=n[5-6]\n"
        "SwitchName=leaf3 Nodes=n[9-12]\nSwitchName=leaf9 Nodes=n[7-8]\n"
    )
    result = live(ctl, new, max_share=0.5)
    assert result.ok and result.applied == "live", result.message
    shown = ctl.show_topology()
    assert set(shown["spine9"].nodes) == {"n7", "n8"} and shown["spine9"].switches == ("leaf9",)
    assert "spine9" in shown["root"].switches


def test_a_removal_forces_reconfigure_and_says_why(sid_controller_factory: ControllerFactory) -> None:
    old = "BlockName=b1 Nodes=n[1-4]\nBlockName=b2 Nodes=n[5-8]\nBlockSizes=4,8\n"
    ctl = sid_controller_factory(NODES[:8], old, topology_plugin="topology/block")
    result = live(ctl, old.replace("n[5-8]", "n[5-7]"))
    assert result.ok and result.applied == "reconfigure" and result.reconfigured, result.message
    assert "1 node(s) leave the topology: n8" in result.why
    assert ctl.show_blocks()["b2"].nodes == ("n5", "n6", "n7")


def test_a_deleted_switch_with_reconfigure_forbidden_holds_and_alarms(
    sid_controller_factory: ControllerFactory,
) -> None:
    ctl = sid_controller_factory(NODES, TREE)
    broken = live(ctl, "SwitchName=root Switches=spine1\n", allow_reconfigure=False)
    assert broken.action == "refused" and "unknown child switch" in broken.message  # refused, not held
    new = (
        "SwitchName=root Switches=spine1\nSwitchName=spine1 Switches=leaf[1-2]\n"
        "SwitchName=leaf1 Nodes=n[1-6]\nSwitchName=leaf2 Nodes=n[7-12]\n"
    )
    result = live(ctl, new, allow_reconfigure=False)
    assert not result.ok and result.action == "held" and "ALARM" in result.message
    assert "would be deleted" in result.why
    assert ctl.topology_path.read_text() == TREE and "spine2" in below(ctl)


def test_a_failed_update_is_rolled_back(sid_controller_factory: ControllerFactory) -> None:
    ctl = sid_controller_factory(NODES, TREE)
    # the real 26.05 scontrol, except that the move of n4 fails (as a lost controller connection would)
    wrapper = ctl.dir / "scontrol-failing"
    wrapper.write_text(
        '#!/bin/sh\ncase "$*" in *NodeName=n4*Topology=*) echo "injected: Socket timed out" >&2; exit 1;; esac\n'
        'exec /usr/bin/scontrol "$@"\n'
    )
    wrapper.chmod(0o755)
    install = SlurmInstall(ctl.install.slurmctld, ctl.install.inside(wrapper), ctl.install.root)
    # n5 -> leaf1 (applied first, then undone), n4 -> leaf3 (fails)
    new = TREE.replace("leaf1 Nodes=n[1-4]", "leaf1 Nodes=n[1-3,5]").replace("leaf2 Nodes=n[5-8]", "leaf2 Nodes=n[6-8]")
    new = new.replace("leaf3 Nodes=n[9-12]", "leaf3 Nodes=n[4,9-12]")
    data = new.encode()
    before = below(ctl)
    result = apply_topology(
        data, ctl.topology_path, expected_sha256=sha(data), slurm_conf=ctl.conf_path, install=install, max_share=0.5
    )
    assert not result.ok and result.action == "rolled_back" and result.failed_step == "update", result.message
    assert "injected" in result.message and "restored the previous file" in result.message
    assert "controller reconfigured with the previous file" in result.message
    assert ctl.topology_path.read_text() == TREE
    assert below(ctl) == before  # n5 was really moved, and really moved back


def test_live_block_move_and_a_new_block_needs_reconfigure(sid_controller_factory: ControllerFactory) -> None:
    old = "BlockName=b1 Nodes=n[1-4]\nBlockName=b2 Nodes=n[5-7]\nBlockSizes=4,8\n"
    ctl = sid_controller_factory(NODES[:8], old, topology_plugin="topology/block")
    moved = "BlockName=b1 Nodes=n[1-3]\nBlockName=b2 Nodes=n[4-8]\nBlockSizes=4,8\n"
    result = live(ctl, moved, max_share=0.5)
    assert result.ok and result.applied == "live", result.message
    assert set(ctl.show_blocks()["b2"].nodes) == set(expand("n[4-8]"))
    three = "BlockName=b1 Nodes=n[1-3]\nBlockName=b2 Nodes=n[4-7]\nBlockName=b3 Nodes=n8\nBlockSizes=4,8\n"
    result = live(ctl, three, max_share=0.5)
    assert result.applied == "reconfigure" and "block 'b3' is new" in result.why, result.message
    assert result.ok and ctl.show_blocks()["b3"].nodes == ("n8",)


def test_live_update_in_a_topology_yaml_keeps_every_topology_of_the_node(
    sid_controller_factory: ControllerFactory,
) -> None:
    def yml(leaf_a: str, leaf_b: str, b1: str, b2: str) -> str:
        return (
            "- topology: blk\n  cluster_default: false\n  block:\n    block_sizes: [4]\n    blocks:\n"
            f"      - block: b1\n        nodes: {b1}\n      - block: b2\n        nodes: {b2}\n"
            "- topology: tr\n  cluster_default: true\n  tree:\n    switches:\n"
            f"      - switch: r\n        children: s[1-2]\n      - switch: s1\n        nodes: {leaf_a}\n"
            f"      - switch: s2\n        nodes: {leaf_b}\n"
        )

    old = yml("n[1-4]", "n[5-8]", "n[1-4]", "n[5-8]")
    ctl = sid_controller_factory(NODES[:8], old, topology_file="topology.yaml")
    new = yml("n[1-3]", "n[4-8]", "n[1-4]", "n[5-8]")  # n4 changes leaf but stays in block b1
    result = live(ctl, new, max_share=0.5)
    assert result.ok and result.applied == "live", result.message
    assert set(ctl.show_topology("tr")["s2"].nodes) == set(expand("n[4-8]"))
    assert "n4" in ctl.show_blocks("blk")["b1"].nodes  # Topology= replaces all: both parts were sent
    assert "Topology=blk:b1,tr:r:s2" in ctl.scontrol("show", "node", "n4")[1]


# ----- the pull agent and a node's own place -------------------------------------------------------------


def test_pull_installs_a_topology_yaml_and_refuses_a_bad_one(
    sid_slurm: SlurmInstall, sid_controller_factory: ControllerFactory, tmp_path: Path
) -> None:
    start = "- topology: t\n  cluster_default: true\n  block:\n    block_sizes: [4]\n    blocks:\n"
    old = start + "      - block: b1\n        nodes: n[1-4]\n"
    ctl = sid_controller_factory(NODES[:8], old, topology_file="topology.yaml")
    new = start + "      - block: b1\n        nodes: n[1-4]\n      - block: b2\n        nodes: n[5-8]\n"
    src = tmp_path / "topology.yaml"
    src.write_text(new)
    out = pull(
        f"file://{src}", ctl.topology_path, reconfigure=True, validate=True, slurm_conf=ctl.conf_path, slurm=sid_slurm
    )
    assert out.ok and out.action == "installed", out.detail
    assert set(ctl.show_blocks("t")["b2"].nodes) == set(expand("n[5-8]"))
    src.write_text(new.replace("[4]", "[4, 12]"))
    bad = pull(
        f"file://{src}", ctl.topology_path, reconfigure=True, validate=True, slurm_conf=ctl.conf_path, slurm=sid_slurm
    )
    assert not bad.ok and bad.action == "refused" and "Invalid BlockSizes" in bad.detail
    assert ctl.topology_path.read_text() == new and ctl.is_running()


def test_node_topology_value_places_a_power_saving_node_defined_in_slurm_conf(
    sid_controller_factory: ControllerFactory, tmp_path: Path
) -> None:
    published = TREE.replace("leaf3 Nodes=n[9-12]", "leaf3 Nodes=n[9-13]")
    src = tmp_path / "topology-tree.conf"
    src.write_text(published)
    cp = subprocess.run(
        [*TOPOCAST, "node-topology", "--source", f"file://{src}", "--hostname", "n13"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert cp.returncode == 0 and cp.stdout.strip() == "default:root:spine2:leaf3", cp.stderr
    # the controller's own file does not list n13 yet; its NodeName line carries the Topology= value
    ctl = sid_controller_factory([*NODES, "n13"], TREE, node_topology={"n13": cp.stdout.strip()})
    assert "n13" in below(ctl)["leaf3"] and "n13" in below(ctl)["spine2"] and "n13" in below(ctl)["root"]
    block = "BlockName=b1 Nodes=n[1-4]\nBlockName=b2 Nodes=n[5-8]\nBlockSizes=4\n"
    spec = node_spec(block.replace("n[5-8]", "n[5-9]"), "n9")
    assert spec == "default:b2"
    ctl2 = sid_controller_factory(NODES[:9], block, topology_plugin="topology/block", node_topology={"n9": spec})
    assert "n9" in ctl2.show_blocks()["b2"].nodes


def test_pull_cli_live_then_held_on_26_05(
    sid_slurm: SlurmInstall, sid_controller_factory: ControllerFactory, tmp_path: Path
) -> None:
    ctl = sid_controller_factory(NODES, TREE)
    src = tmp_path / "topology-tree.conf"
    src.write_text(
        TREE.replace("leaf1 Nodes=n[1-4]", "leaf1 Nodes=n[1-3]").replace("leaf3 Nodes=n[9-12]", "leaf3 Nodes=n[4,9-12]")
    )
    base = [*TOPOCAST, "pull", "--source", f"file://{src}", "--dest", str(ctl.topology_path)]
    base += ["--slurm-conf", str(ctl.conf_path), "--slurm-root", str(sid_slurm.root), "--live"]
    moved = subprocess.run([*base, "--live-max-share", "0.2"], capture_output=True, text=True, check=False)
    assert moved.returncode == 0, moved.stderr
    assert "applied live: 1 node(s) with 1 scontrol update call, no reconfigure" in moved.stdout
    assert "; validated by slurmctld 26.05" in moved.stdout
    assert moved.stdout.rstrip().endswith(
        "; nodes: 0 added, 0 removed, 1 moved (n4: root:spine1:leaf1 -> root:spine2:leaf3)"
    )
    assert "n4" in below(ctl)["leaf3"]
    src.write_text(
        TREE.replace("SwitchName=spine2 Switches=leaf3\n", "")
        .replace("spine[1-2]", "spine1")
        .replace("leaf[1-2]", "leaf[1-3]")
    )
    held = subprocess.run([*base, "--forbid-reconfigure"], capture_output=True, text=True, check=False)
    # a hold is a journal warning on stderr with its own exit status (docs/slurm-pull.md)
    assert held.returncode == 4 and held.stdout == "", held.stdout + held.stderr
    assert held.stderr.startswith(f"<4>{ctl.topology_path}: held: ALARM: "), held.stderr
    assert "switch 'spine2' would be deleted" in held.stderr
    assert "spine2" in below(ctl) and "spine2" in ctl.topology_path.read_text()


def test_pull_of_a_block_file_rolls_back_when_reconfigure_fails(
    sid_controller_factory: ControllerFactory, tmp_path: Path
) -> None:
    old = "BlockName=b1 Nodes=n[1-4]\nBlockName=b2 Nodes=n[5-8]\nBlockSizes=4\n"
    ctl = sid_controller_factory(NODES[:8], old, topology_plugin="topology/block")
    wrapper = ctl.dir / "scontrol-noreconf"
    wrapper.write_text(
        '#!/bin/sh\n[ "$1" = reconfigure ] && { echo "injected: reconfigure refused" >&2; exit 1; }\n'
        'exec /usr/bin/scontrol "$@"\n'
    )
    wrapper.chmod(0o755)
    install = SlurmInstall(ctl.install.slurmctld, ctl.install.inside(wrapper), ctl.install.root)
    src = tmp_path / "topology-block.conf"
    src.write_text("BlockName=b1 Nodes=n[1-2]\nBlockName=b2 Nodes=n[3-8]\nBlockName=b3\nBlockName=b4\nBlockSizes=4,8\n")
    out = pull(
        f"file://{src}", ctl.topology_path, reconfigure=True, validate=True, slurm_conf=ctl.conf_path, slurm=install
    )
    assert not out.ok and out.action == "rolled_back" and "injected" in out.detail, out.detail
    assert ctl.topology_path.read_text() == old and set(ctl.show_blocks()) == {"b1", "b2"}


# ----- generated clusters: every block one domain, every node under the right switches -------------------


def generated(seed: int) -> TopologyGraph:
    """A cluster shaped like the hard cases: mixed fabric depth, partial NVLink domains, racks, unplaced nodes."""
    import random

    rnd = random.Random(seed)
    nodes: list[Node] = []
    serial = 0
    for domain in range(rnd.randint(5, 9)):
        size = 18 if rnd.random() < 0.8 else rnd.randint(9, 17)  # a few partial domains
        racks = seed % 3 == 2 and domain % 2 == 0  # some graphs have sub-domains
        spine = f"sp{domain % 3}"
        for i in range(size):
            serial += 1
            leaf = f"lf{domain}-{i // 6}"
            # one spine of 4-level fabrics, the others 3-level: switches of mixed depth under the core
            fabric = [leaf, f"agg{domain % 2}", spine, "core"] if spine == "sp0" else [leaf, spine, "core"]
            if spine == "sp1" and i >= 15:
                fabric = [spine, "core"]  # attached to the spine itself: sp1 has nodes and child switches
            nodes.append(
                Node(
                    name=f"gpu{serial:04d}",
                    id=f"i-{serial:05x}",
                    fabric=fabric,
                    accelerator=f"nvl-{domain:02d}",
                    subdomain=f"rack{i // 9}" if racks else None,
                )
            )
    for j in range(rnd.randint(1, 3)):  # CPU nodes: no fabric, no domain
        nodes.append(Node(name=f"cpu{j:02d}", id=f"i-c{j}"))
    return TopologyGraph(cluster=f"gen{seed}", provider="model", nodes=nodes)


def expected_below(graph: TopologyGraph) -> dict[str, set[str]]:
    """switch ID -> nodes whose fabric path goes through it (from the input, not the renderer)."""
    out: dict[str, set[str]] = {}
    for node in graph.nodes:
        for sw in node.fabric:
            out.setdefault(sw, set()).add(node.name)
    return out


def expected_domains(graph: TopologyGraph) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for node in graph.nodes:
        if node.accelerator:
            out.setdefault(node.accelerator, set()).add(node.name)
    return out


def check_blocks(blocks: dict, domains: dict[str, set[str]]) -> None:  # type: ignore[type-arg]
    covered: dict[str, set[str]] = {d: set() for d in domains}
    for name, block in blocks.items():
        if not block.nodes:
            continue
        owners = {d for d, members in domains.items() if set(block.nodes) & members}
        assert len(owners) == 1 and set(block.nodes) <= domains[next(iter(owners))], (name, block.nodes)
        covered[next(iter(owners))] |= set(block.nodes)
    assert covered == domains


def check_tree(shown: dict[str, set[str]], graph: TopologyGraph, pseudo: bool = True) -> None:
    """``pseudo``: the nodes without fabric are under the switch no-topology (slurm-yaml), else in no switch."""
    want = expected_below(graph)
    for sw, nodes in want.items():
        assert shown.get(sw) == nodes, (sw, sorted(shown.get(sw, ())), sorted(nodes))
    unplaced = {n.name for n in graph.nodes if not n.fabric}
    assert shown.get("no-topology") == (unplaced if pseudo else None)
    extra = set(shown) - set(want) - {"no-topology"}
    assert all(x.endswith(".nodes") for x in extra), extra  # only synthetic leaves of mixed switches


@pytest.mark.parametrize("seed", [1, 2, 5])
def test_generated_clusters_load_into_26_05_as_the_graph_says(
    seed: int, sid_controller_factory: ControllerFactory
) -> None:
    graph = generated(seed)
    names = [n.name for n in graph.nodes]
    domains = expected_domains(graph)

    for_26 = RenderOptions(slurm_version="26.05")  # the partial domains stay blocks of their own
    block = render(graph, "slurm-block", for_26).content
    ctl = sid_controller_factory(names, block, topology_plugin="topology/block")
    assert [x for x in ctl.log_lines() if "error" in x.lower() or "fatal" in x.lower()] == []
    check_blocks(ctl.show_blocks(), domains)
    ctl.stop()

    tree = render(graph, "slurm-tree", for_26).content
    ctl = sid_controller_factory(names, tree)
    assert [x for x in ctl.log_lines() if "error" in x.lower()] == []
    check_tree(below(ctl), graph, pseudo=False)
    ctl.stop()

    yml = render(graph, "slurm-yaml", for_26).content
    ctl = sid_controller_factory(names, yml, topology_file="topology.yaml")
    assert [x for x in ctl.log_lines() if "error" in x.lower()] == []
    check_tree(below(ctl, "tree"), graph)
    check_blocks(ctl.show_blocks("block"), domains)
    for text, source in ((block, "topology.conf"), (yml, "topology.yaml")):
        result = validate_topology_text(text, source=source, install=ctl.install, controller=True)
        assert result.ok and result.controller_checked, result.errors


@pytest.fixture
def sid_scratch(sid_slurm: SlurmInstall) -> Iterator[Path]:
    """A directory inside the chroot (scontrol there reads its slurm.conf by a path inside it), removed after."""
    parent = SID_ROOT / "srv" / "topocast-tests"
    parent.mkdir(parents=True, exist_ok=True)
    where = Path(tempfile.mkdtemp(prefix="hostnames-", dir=parent))
    yield where
    shutil.rmtree(where, ignore_errors=True)


# ----- Slurm's own hostlist reader gives back what compact wrote ------------------------------------
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_slurm_reads_back_every_compacted_name_26_05(sid_slurm: SlurmInstall, sid_scratch: Path, seed: int) -> None:
    names = mixed_padding_names(seed)
    text = compact_str(names)
    got = slurm_hostnames(sid_slurm, text, sid_scratch)
    assert len(got) == len(set(got)) == len(names), text  # no name twice, none lost
    assert set(got) == set(names)


def test_slurm_reads_the_padding_cases_as_written_26_05(sid_slurm: SlurmInstall, sid_scratch: Path) -> None:
    # the two lists that used to lose gpu099 and n010 (gpu[98-100], n[9-010])
    assert compact_str(["gpu98", "gpu099", "gpu100", "n9", "n010"]) == "gpu[98,099-100],n[9,010]"
    assert slurm_hostnames(sid_slurm, "gpu[98,099-100],n[9,010]", sid_scratch) == [
        "gpu98",
        "gpu099",
        "gpu100",
        "n9",
        "n010",
    ]
    assert slurm_hostnames(sid_slurm, "gpu[98-100],n[9-010]", sid_scratch) == ["gpu98", "gpu99", "gpu100", "n9", "n10"]
