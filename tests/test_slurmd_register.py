"""Nodes that register with their place: a real ``slurmd`` 26.05 (Debian sid chroot) started with
``topocast node-topology``'s value, and a cloud node that keeps its place through power save.

``slurmd -Z --conf "CPUs=1 RealMemory=500 Topology=<value>"`` is how a cloud node's boot script
joins a cluster as a dynamic node; the value comes from the published topology file, read by the
CLI exactly as a boot script calls it. ``scontrol show topology`` (the controller's own reading)
must then show the node where the published file puts it. The controller runs with auth/slurm
(tests/slurmrest_fixtures.py): slurmd needs real credentials, and ``CgroupPlugin=disabled``
(the chroot has no /sys/fs/cgroup: ``error: cgroup filesystem not mounted in /sys/fs/cgroup/``).
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from slurmrest_fixtures import RestCluster, RestFactory

from topocast.model.hostlist import expand

pytestmark = pytest.mark.slurm_current

NODES = [f"n{i}" for i in range(1, 9)]
TREE = (
    "SwitchName=root Switches=spine[1-2]\n"
    "SwitchName=spine1 Switches=leaf1\nSwitchName=spine2 Switches=leaf2\n"
    "SwitchName=leaf1 Nodes=n[1-4]\nSwitchName=leaf2 Nodes=n[5-8]\n"
)
BLOCK = "BlockName=b1 Nodes=n[1-4]\nBlockName=b2 Nodes=n[5-8]\nBlockSizes=4\n"
YAML = (
    "- topology: fabric\n  cluster_default: true\n  tree:\n    switches:\n"
    "      - switch: root\n        children: spine[1-2]\n"
    "      - switch: spine1\n        children: leaf1\n      - switch: spine2\n        children: leaf2\n"
    "      - switch: leaf1\n        nodes: n[1-4]\n      - switch: leaf2\n        nodes: n[5-8]\n"
    "- topology: nvl\n  cluster_default: false\n  block:\n    block_sizes: [4]\n    blocks:\n"
    "      - block: nvl1\n        nodes: n[1-4]\n      - block: nvl2\n        nodes: n[5-8]\n"
)


def node_topology(published: Path, node: str) -> str:
    """What a boot script gets: ``topocast node-topology --source file://... --hostname NODE``."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "topocast.cli.commands",
            "node-topology",
            "--source",
            f"file://{published}",
            "--hostname",
            node,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def publish(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def below(ctl: RestCluster, name: str | None = None) -> dict[str, set[str]]:
    return {sw: set(info.nodes) for sw, info in ctl.show_topology(name).items()}


def test_slurmd_z_lands_under_the_published_switch(rest_cluster_factory: RestFactory, tmp_path: Path) -> None:
    ctl = rest_cluster_factory(NODES, TREE, rest=False)
    # the published file already places the new node d1 in leaf2 (the controller's file does not)
    published = publish(tmp_path, "topology.conf", TREE.replace("leaf2 Nodes=n[5-8]", "leaf2 Nodes=d1,n[5-8]"))
    spec = node_topology(published, "d1")
    assert spec == "default:root:spine2:leaf2"
    ctl.start_slurmd("d1", f"CPUs=1 RealMemory=500 Topology={spec}")
    shown = below(ctl)
    assert shown["leaf2"] == {"d1", *expand("n[5-8]")} and "d1" in shown["spine2"] and "d1" in shown["root"]
    assert "d1" not in shown["leaf1"] | shown["spine1"]
    assert f"Topology={spec}" in ctl.scontrol("show", "node", "d1")[1]


def test_slurmd_z_lands_in_the_published_block(rest_cluster_factory: RestFactory, tmp_path: Path) -> None:
    ctl = rest_cluster_factory(NODES, BLOCK, rest=False, topology_plugin="topology/block")
    published = publish(tmp_path, "topology.conf", BLOCK.replace("b1 Nodes=n[1-4]", "b1 Nodes=d1,n[1-4]"))
    spec = node_topology(published, "d1")
    assert spec == "default:b1"
    ctl.start_slurmd("d1", f"CPUs=1 RealMemory=500 Topology={spec}")
    blocks = ctl.show_blocks()
    assert set(blocks["b1"].nodes) == {"d1", *expand("n[1-4]")} and "d1" not in blocks["b2"].nodes


def test_slurmd_z_lands_in_every_topology_of_a_topology_yaml(rest_cluster_factory: RestFactory, tmp_path: Path) -> None:
    ctl = rest_cluster_factory(NODES, YAML, rest=False, topology_file="topology.yaml")
    text = YAML.replace("leaf2\n        nodes: n[5-8]", "leaf2\n        nodes: d1,n[5-8]").replace(
        "nvl1\n        nodes: n[1-4]", "nvl1\n        nodes: d1,n[1-4]"
    )
    spec = node_topology(publish(tmp_path, "topology.yaml", text), "d1")
    assert set(spec.split(",")) == {"fabric:root:spine2:leaf2", "nvl:nvl1"}
    ctl.start_slurmd("d1", f"CPUs=1 RealMemory=500 Topology={spec}")
    tree = below(ctl, "fabric")
    assert "d1" in tree["leaf2"] and "d1" in tree["spine2"] and "d1" not in tree["leaf1"]
    blocks = ctl.show_blocks("nvl")
    assert "d1" in blocks["nvl1"].nodes and "d1" not in blocks["nvl2"].nodes


def _state(ctl: RestCluster, node: str) -> str:
    out = ctl.scontrol("show", "node", node)[1]
    return next(part.split("=", 1)[1] for part in out.split() if part.startswith("State="))


def _wait_state(ctl: RestCluster, node: str, word: str, timeout: float = 60.0) -> str:
    # a forced power-down shows IDLE+CLOUD+POWER_DOWN+POWERED_DOWN at once, then POWERING_DOWN for
    # SuspendTimeout: only the final POWERED_DOWN is where 26.05 moves the node back
    deadline = time.monotonic() + timeout
    while True:
        state = _state(ctl, node)
        flags = set(state.split("+"))
        if word in flags and not flags & {"POWER_DOWN", "POWERING_DOWN"}:
            return state
        assert time.monotonic() < deadline, f"{node} never reached {word}: {state}"
        time.sleep(0.3)


@pytest.mark.slow
def test_a_cloud_node_keeps_its_place_through_power_down_and_up(
    rest_cluster_factory: RestFactory, tmp_path: Path
) -> None:
    # c1: a cloud (power-saving) node placed by its NodeName line with node-topology's value;
    # c2: a cloud node placed by topology.conf only
    tree = TREE.replace("leaf1 Nodes=n[1-4]", "leaf1 Nodes=c2,n[1-4]")
    published = publish(tmp_path, "topology.conf", tree.replace("leaf1 Nodes=c2,", "leaf1 Nodes=c[1-2],"))
    spec = node_topology(published, "c1")
    ctl = rest_cluster_factory([*NODES, "c1", "c2"], tree, rest=False, node_topology={"c1": spec}, cloud=["c1", "c2"])
    for node in ("c1", "c2"):
        assert "POWERED_DOWN" in _state(ctl, node) and node in below(ctl)["leaf1"]  # placed before it ever ran
    assert ctl.scontrol("update", "NodeName=c[1-2]", "State=POWER_UP")[0] == 0
    slurmds = [ctl.start_slurmd(n) for n in ("c1", "c2")]  # the ResumeProgram's job: boot, slurmd -N registers
    for node in ("c1", "c2"):
        _wait_state(ctl, node, "IDLE")
        assert node in below(ctl)["leaf1"]
    # powered down and up again: each keeps its place
    for proc in slurmds:
        ctl.stop_slurmd(proc)  # the SuspendProgram's job: the instance is gone
    assert ctl.scontrol("update", "NodeName=c[1-2]", "State=POWER_DOWN_FORCE")[0] == 0
    for node in ("c1", "c2"):
        _wait_state(ctl, node, "POWERED_DOWN")
        assert node in below(ctl)["leaf1"], node
    assert ctl.scontrol("update", "NodeName=c[1-2]", "State=POWER_UP")[0] == 0
    slurmds = [ctl.start_slurmd(n) for n in ("c1", "c2")]
    for node in ("c1", "c2"):
        _wait_state(ctl, node, "IDLE")
        assert node in below(ctl)["leaf1"] and node not in below(ctl)["leaf2"], node


@pytest.mark.slow
def test_26_05_puts_a_powered_down_cloud_node_back_where_its_configuration_says(
    rest_cluster_factory: RestFactory, tmp_path: Path
) -> None:
    """Found here (26.05.5): a live move (``scontrol update Topology=``) of a cloud node is undone when
    it powers down: it goes back to its ``NodeName ... Topology=`` or to the topology.conf read at the
    last start/reconfigure. So for cloud nodes the live path is not enough: the installed file
    must be the controller's file (a reconfigure) or slurm.conf's ``Topology=`` must be updated."""
    tree = TREE.replace("leaf1 Nodes=n[1-4]", "leaf1 Nodes=c2,n[1-4]")
    ctl = rest_cluster_factory(
        [*NODES, "c1", "c2"], tree, rest=False, node_topology={"c1": "default:root:spine1:leaf1"}, cloud=["c1", "c2"]
    )
    assert ctl.scontrol("update", "NodeName=c[1-2]", "State=POWER_UP")[0] == 0
    slurmds = [ctl.start_slurmd(n) for n in ("c1", "c2")]
    for node in ("c1", "c2"):
        _wait_state(ctl, node, "IDLE")
    assert ctl.scontrol("update", "NodeName=c[1-2]", "Topology=default:root:spine2:leaf2")[0] == 0
    assert {"c1", "c2"} <= below(ctl)["leaf2"]
    for proc in slurmds:
        ctl.stop_slurmd(proc)
    assert ctl.scontrol("update", "NodeName=c[1-2]", "State=POWER_DOWN_FORCE")[0] == 0
    for node in ("c1", "c2"):
        _wait_state(ctl, node, "POWERED_DOWN")
    shown = below(ctl)
    assert {"c1", "c2"} <= shown["leaf1"] and not {"c1", "c2"} & shown["leaf2"]
