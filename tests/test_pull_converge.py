"""The pull agent converges the controller, on a real slurmctld + slurmrestd 26.05 (Debian sid chroot).

* slurmrestd dies in the middle of a live apply: the run says the controller is left inconsistent
  (exit 9, a sample and a count), and after the source goes back to the old file the next run
  finds the nodes still at their new place and moves them back (exit 8): the controller ends equal
  to the file.
* A reconfigure that ``--via slurmrestd`` needs goes over slurmrestd, never ``scontrol``.
* ``State=CLOUD`` nodes through power cycles (slow): a move by the agent survives power-down, and a
  live move that a power-down undid is repaired by the next run.

Where the nodes must be is written out from the files here; ``scontrol show topology`` is the
controller's own reading.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from slurm_fixtures import SID_ROOT
from slurmrest_fixtures import NODES, TREE, TREE_MOVED, RestCluster, RestFactory

from topocast.model.hostlist import expand
from topocast.slurm.controller import SlurmInstall
from topocast.slurm.live import apply_topology
from topocast.slurm.rest import RestUpdater, connect
from topocast.slurm.rest_token import SlurmToken

pytestmark = pytest.mark.slurm_current

TOPOCAST = [sys.executable, "-m", "topocast.cli"]
#: scontrol's wait for an answer: a reconfigure under load (26.05, auth/slurm) can take over the
#: scratch controller's 2 s, and a lost answer would fail the install step, not what these tests check
SLOW_REPLY = 10

AS_IN_TREE = {
    "root": set(expand("n[1-12]")),
    "spine1": set(expand("n[1-8]")),
    "spine2": set(expand("n[9-12]")),
    "leaf1": set(expand("n[1-4]")),
    "leaf2": set(expand("n[5-8]")),
    "leaf3": set(expand("n[9-12]")),
}


def below(ctl: RestCluster) -> dict[str, set[str]]:
    return {sw: set(info.nodes) for sw, info in ctl.show_topology().items()}


def pull(ctl: RestCluster, src: Path, url: str, token: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            *TOPOCAST, "pull", "--source", f"file://{src}", "--dest", str(ctl.topology_path),
            "--slurm-conf", str(ctl.conf_path), "--slurm-root", str(SID_ROOT),
            "--via", "slurmrestd", url, "--token-from", str(token), "--live-max-share", "0.5", *extra,
        ],
        capture_output=True, text=True, timeout=180, check=False, env=ctl.env(),
    )  # fmt: skip


@pytest.mark.slow
def test_slurmrestd_dying_mid_apply_is_inconsistent_and_the_next_run_repairs_it(
    rest_cluster_factory: RestFactory, rest_proxy: Any, tmp_path: Path
) -> None:
    ctl = rest_cluster_factory(NODES, TREE, message_timeout=SLOW_REPLY)
    pid = ctl.pid
    token = ctl.write_token(tmp_path / "jwt")
    src = tmp_path / "topology.conf"
    src.write_text(TREE_MOVED)
    link = rest_proxy(ctl.url, die_after_post=True)
    died = pull(ctl, src, link.url, token, "--json")
    assert died.returncode == 9, died.stdout + died.stderr  # 9: controller left inconsistent
    assert link.posts == 1
    report = json.loads(died.stdout)
    assert report["action"] == "inconsistent" and report["status"] == "inconsistent"
    # both moves' nodes: the first went through, the second call's answer never came
    assert "controller left inconsistent: 2 node(s) may still be at their new place (n1, n9)" in report["detail"]
    assert "rolled_back" not in died.stdout and "Traceback" not in died.stderr
    assert ctl.topology_path.read_text() == TREE  # the previous file is back
    shown = below(ctl)
    assert "n9" in shown["leaf1"] and "n9" not in shown["leaf3"]  # what the dead link could not undo

    src.write_text(TREE)  # the source goes back to the old file: the file on disk is unchanged
    started = time.monotonic()
    healed = pull(ctl, src, ctl.url, token)
    took = time.monotonic() - started
    assert healed.returncode == 8, healed.stdout + healed.stderr  # 8: drift repaired
    line = healed.stdout.strip()
    assert "repaired: the controller drifted from the installed file: 1 node(s) placed elsewhere" in line, line
    assert "n9: default:root:spine1:leaf1 -> default:root:spine2:leaf3" in line and "repaired live" in line
    assert below(ctl) == AS_IN_TREE and ctl.pid == pid
    print(f"inconsistent run: {died.stdout.strip()}\nrepair run ({took:.2f} s): {line}")

    again = pull(ctl, src, ctl.url, token, "--json")
    assert again.returncode == 0, again.stdout + again.stderr
    calm = json.loads(again.stdout)
    assert calm["action"] == "unchanged" and calm["drift"]["misplaced"] == 0 and calm["drift"]["repair"] is None
    assert "the controller shows the file (read by slurmrestd GET nodes" in calm["detail"]


def test_a_reconfigure_via_slurmrestd_never_runs_scontrol(rest_cluster_factory: RestFactory, tmp_path: Path) -> None:
    ctl = rest_cluster_factory(NODES, TREE, message_timeout=SLOW_REPLY)
    pid = ctl.pid
    # leaf2 goes: a switch deleted cannot be done live, so this needs a reconfigure
    new = (
        b"SwitchName=root Switches=spine[1-2]\nSwitchName=spine1 Switches=leaf1\nSwitchName=spine2 Switches=leaf3\n"
        b"SwitchName=leaf1 Nodes=n[1-8]\nSwitchName=leaf3 Nodes=n[9-12]\n"
    )
    # an install whose scontrol does not exist: any scontrol call would fail the run
    install = SlurmInstall(ctl.install.slurmctld, "/nonexistent/scontrol", SID_ROOT)
    token = ctl.token
    updater = RestUpdater(connect(ctl.url, SlurmToken(token, "root")))
    result = apply_topology(
        new, ctl.topology_path, expected_sha256=hashlib.sha256(new).hexdigest(), validate=False,
        install=install, updater=updater,
    )  # fmt: skip
    assert result.ok and result.applied == "reconfigure" and result.reconfigured, result.message
    assert "installed and reconfigured through slurmrestd" in result.message
    assert "switch 'leaf2' would be deleted" in result.message
    shown = below(ctl)
    assert set(shown) == {"root", "spine1", "spine2", "leaf1", "leaf3"}
    assert shown["leaf1"] == set(expand("n[1-8]")) and ctl.pid == pid


# ----- State=CLOUD nodes through power cycles (slow: real slurmd daemons) ------------------------

CLOUD_TREE = TREE.replace("leaf1 Nodes=n[1-4]", "leaf1 Nodes=c[1-2],n[1-4]")
CLOUD_MOVED = CLOUD_TREE.replace("leaf1 Nodes=c[1-2],n[1-4]", "leaf1 Nodes=c2,n[1-4]").replace(
    "leaf3 Nodes=n[9-12]", "leaf3 Nodes=c1,n[9-12]"
)


def _state(ctl: RestCluster, node: str) -> str:
    out = ctl.scontrol("show", "node", node)[1]
    return next(part.split("=", 1)[1] for part in out.split() if part.startswith("State="))


def _wait_state(ctl: RestCluster, node: str, word: str, timeout: float = 60.0) -> None:
    """Until ``word`` is one of the node's state flags, and it is not on its way down: a forced power-down
    shows ``IDLE+CLOUD+POWER_DOWN+POWERED_DOWN`` at once, then ``POWERING_DOWN`` for SuspendTimeout, and
    only the final ``POWERED_DOWN`` is where 26.05 moves the node back."""
    deadline = time.monotonic() + timeout
    while True:
        flags = set((state := _state(ctl, node)).split("+"))
        if word in flags and not flags & {"POWER_DOWN", "POWERING_DOWN"}:
            return
        assert time.monotonic() < deadline, f"{node} never reached {word}: {state}"
        time.sleep(0.3)


def _power_cycle(ctl: RestCluster, node: str, slurmd: Any) -> Any:
    """Down (the SuspendProgram's job, then POWER_DOWN_FORCE), up (ResumeProgram: slurmd registers)."""
    _power_down(ctl, node, slurmd)
    assert ctl.scontrol("update", f"NodeName={node}", "State=POWER_UP")[0] == 0
    slurmd = ctl.start_slurmd(node)
    _wait_state(ctl, node, "IDLE")
    return slurmd


def _power_down(ctl: RestCluster, node: str, slurmd: Any) -> None:
    ctl.stop_slurmd(slurmd)
    assert ctl.scontrol("update", f"NodeName={node}", "State=POWER_DOWN_FORCE")[0] == 0
    _wait_state(ctl, node, "POWERED_DOWN")


def cloud_pull(ctl: RestCluster, src: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            *TOPOCAST, "pull", "--source", f"file://{src}", "--dest", str(ctl.topology_path),
            "--slurm-conf", str(ctl.conf_path), "--slurm-root", str(SID_ROOT), "--live",
            "--live-max-share", "0.5", "--no-validate", *extra,
        ],
        capture_output=True, text=True, timeout=180, check=False, env=ctl.env(),
    )  # fmt: skip


@pytest.mark.slow
def test_a_cloud_node_moved_by_the_agent_keeps_its_place_through_power_cycles(
    rest_cluster_factory: RestFactory, tmp_path: Path
) -> None:
    ctl = rest_cluster_factory(
        [*NODES, "c1", "c2"], CLOUD_TREE, rest=False, cloud=["c1", "c2"], message_timeout=SLOW_REPLY
    )
    assert ctl.scontrol("update", "NodeName=c1", "State=POWER_UP")[0] == 0
    slurmd = ctl.start_slurmd("c1")
    _wait_state(ctl, "c1", "IDLE")
    src = tmp_path / "topology.conf"
    src.write_text(CLOUD_MOVED)
    moved = cloud_pull(ctl, src)
    assert moved.returncode == 0, moved.stdout + moved.stderr
    # a live move would be undone at power-down: the agent reconfigures instead, and says why
    assert "installed and reconfigured" in moved.stdout and "power-saving (State=CLOUD" in moved.stdout, moved.stdout
    assert "c1" in below(ctl)["leaf3"]
    _power_down(ctl, "c1", slurmd)
    assert "c1" in below(ctl)["leaf3"] and "c1" not in below(ctl)["leaf1"]
    assert ctl.scontrol("update", "NodeName=c1", "State=POWER_UP")[0] == 0
    slurmd = ctl.start_slurmd("c1")
    _wait_state(ctl, "c1", "IDLE")
    assert "c1" in below(ctl)["leaf3"]
    _power_down(ctl, "c1", slurmd)
    assert "c1" in below(ctl)["leaf3"] and "c1" not in below(ctl)["leaf1"]
    unchanged = cloud_pull(ctl, src, "--json")
    assert unchanged.returncode == 0, unchanged.stdout + unchanged.stderr


@pytest.mark.slow
def test_a_cloud_node_a_power_down_put_back_is_repaired_by_the_next_run(
    rest_cluster_factory: RestFactory, tmp_path: Path
) -> None:
    ctl = rest_cluster_factory(
        [*NODES, "c1", "c2"], CLOUD_TREE, rest=False, cloud=["c1", "c2"], message_timeout=SLOW_REPLY
    )
    assert ctl.scontrol("update", "NodeName=c1", "State=POWER_UP")[0] == 0
    slurmd = ctl.start_slurmd("c1")
    _wait_state(ctl, "c1", "IDLE")
    # what an agent without the power-saving rule did: the file installed, c1 moved live
    ctl.write_topology(CLOUD_MOVED)
    assert ctl.scontrol("update", "NodeName=c1", "Topology=default:root:spine2:leaf3")[0] == 0
    assert "c1" in below(ctl)["leaf3"]
    _power_down(ctl, "c1", slurmd)
    assert "c1" in below(ctl)["leaf1"]  # 26.05.5: back at the place of the file read at start
    src = tmp_path / "topology.conf"
    src.write_text(CLOUD_MOVED)
    started = time.monotonic()
    healed = cloud_pull(ctl, src)
    took = time.monotonic() - started
    assert healed.returncode == 8, healed.stdout + healed.stderr
    line = healed.stdout.strip()
    assert "c1: default:root:spine1:leaf1 -> default:root:spine2:leaf3" in line, line
    assert "repaired by reconfigure because 1 of the nodes are power-saving" in line, line
    print(f"repair run: {took:.2f} s")
    assert "c1" in below(ctl)["leaf3"] and "c1" not in below(ctl)["leaf1"]
    assert ctl.scontrol("update", "NodeName=c1", "State=POWER_UP")[0] == 0
    slurmd = ctl.start_slurmd("c1")
    _wait_state(ctl, "c1", "IDLE")
    _power_down(ctl, "c1", slurmd)
    assert "c1" in below(ctl)["leaf3"]  # the repair survives the next power-down
    assert cloud_pull(ctl, src).returncode == 0


# ----- scontrol: the complete view, topology.conf and topology.yaml ------------------------------


def local_pull(ctl: RestCluster, src: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            *TOPOCAST, "pull", "--source", f"file://{src}", "--dest", str(ctl.topology_path),
            "--slurm-conf", str(ctl.conf_path), "--slurm-root", str(SID_ROOT), "--no-validate", *extra,
        ],
        capture_output=True, text=True, timeout=180, check=False, env=ctl.env(),
    )  # fmt: skip


def test_reconfigure_mode_repairs_a_hand_made_move_by_reconfigure(
    rest_cluster_factory: RestFactory, tmp_path: Path
) -> None:
    ctl = rest_cluster_factory(NODES, TREE, rest=False, message_timeout=SLOW_REPLY)
    src = tmp_path / "topology.conf"
    src.write_text(TREE)  # what is installed already
    assert ctl.scontrol("update", "NodeName=n5", "Topology=default:root:spine2:leaf3")[0] == 0  # an operator
    healed = local_pull(ctl, src, "--reconfigure")
    assert healed.returncode == 8, healed.stdout + healed.stderr
    line = healed.stdout.strip()
    assert "n5: default:root:spine2:leaf3 -> default:root:spine1:leaf2" in line, line
    assert "read by scontrol show topology; repaired by reconfigure because live moves are off" in line, line
    assert below(ctl) == AS_IN_TREE
    calm = local_pull(ctl, src, "--reconfigure", "--verbose")
    assert calm.returncode == 0 and "unchanged" in calm.stdout, calm.stdout + calm.stderr
    assert "the controller shows the file (read by scontrol show topology in " in calm.stdout


YAML = (
    "- topology: fabric\n  cluster_default: true\n  tree:\n    switches:\n"
    "      - switch: root\n        children: spine[1-2]\n"
    "      - switch: spine1\n        children: leaf1\n      - switch: spine2\n        children: leaf2\n"
    "      - switch: leaf1\n        nodes: n[1-4]\n      - switch: leaf2\n        nodes: n[5-8]\n"
    "- topology: nvl\n  cluster_default: false\n  block:\n    block_sizes: [4]\n    blocks:\n"
    "      - block: nvl1\n        nodes: n[1-4]\n      - block: nvl2\n        nodes: n[5-8]\n"
)


def test_live_mode_repairs_a_topology_yaml_node_in_every_topology(
    rest_cluster_factory: RestFactory, tmp_path: Path
) -> None:
    ctl = rest_cluster_factory(NODES[:8], YAML, rest=False, topology_file="topology.yaml", message_timeout=SLOW_REPLY)
    pid = ctl.pid
    src = tmp_path / "topology.yaml"
    src.write_text(YAML)
    # n1 moved by hand in both topologies (a yaml Topology= value replaces all of a node's places)
    assert ctl.scontrol("update", "NodeName=n1", "Topology=fabric:root:spine2:leaf2,nvl:nvl2")[0] == 0
    healed = local_pull(ctl, src, "--live", "--forbid-reconfigure", "--json")
    assert healed.returncode == 8, healed.stdout + healed.stderr
    report = json.loads(healed.stdout)
    assert report["drift"]["misplaced"] == 1 and report["drift"]["repair"] == "live", report
    got, want = report["drift"]["sample"]["n1"]
    assert set(got.split(",")) == {"fabric:root:spine2:leaf2", "nvl:nvl2"}
    assert set(want.split(",")) == {"fabric:root:spine1:leaf1", "nvl:nvl1"}
    tree = {sw: set(info.nodes) for sw, info in ctl.show_topology("fabric").items()}
    assert "n1" in tree["leaf1"] and "n1" not in tree["leaf2"]
    blocks = ctl.show_blocks("nvl")
    assert "n1" in blocks["nvl1"].nodes and "n1" not in blocks["nvl2"].nodes
    assert ctl.pid == pid


def test_via_slurmrestd_a_powered_down_cloud_node_moves_by_a_rest_reconfigure(
    rest_cluster_factory: RestFactory, tmp_path: Path
) -> None:
    ctl = rest_cluster_factory(
        [*NODES, "c1", "c2"], CLOUD_TREE, cloud=["c1", "c2"], message_timeout=SLOW_REPLY
    )  # both powered down
    pid = ctl.pid
    src = tmp_path / "topology.conf"
    src.write_text(CLOUD_MOVED)
    moved = pull(ctl, src, ctl.url, ctl.write_token(tmp_path / "jwt"))
    assert moved.returncode == 0, moved.stdout + moved.stderr
    line = moved.stdout.strip()
    assert "installed and reconfigured through slurmrestd" in line, line
    assert "1 of the nodes are power-saving (State=CLOUD or powered down: c1)" in line, line
    shown = below(ctl)
    assert "c1" in shown["leaf3"] and "c1" not in shown["leaf1"] and "c2" in shown["leaf1"]
    assert ctl.pid == pid


@pytest.mark.slow
def test_live_gives_way_to_a_reconfigure_measured_cheaper(rest_cluster_factory: RestFactory, tmp_path: Path) -> None:
    ctl = rest_cluster_factory(NODES, TREE, rest=False, message_timeout=SLOW_REPLY)
    state = tmp_path / "state" / "pull-state.json"
    state.parent.mkdir(mode=0o755)
    src = tmp_path / "topology.conf"
    src.write_text(TREE_MOVED)
    first = local_pull(ctl, src, "--live", "--live-max-share", "0.5", "--state-file", str(state))
    assert first.returncode == 0 and "applied live: 2 node(s) with 2 scontrol update calls" in first.stdout, (
        first.stdout
    )
    entry = next(iter(json.loads(state.read_text())["destinations"].values()))
    assert set(entry["costs"]) == {"move_call", "check"}  # what this run measured; no reconfigure yet
    # an earlier run measured a reconfigure far cheaper than two live calls here
    entry["costs"] = {"reconfigure": 0.001, "move_call": 1.0, "check": 1.0}
    state.write_text(json.dumps({"schema": "topocast.pull-state/v2", "destinations": {str(ctl.topology_path): entry}}))
    src.write_text(TREE)  # n1 and n9 back: live by share, but dearer than the measured reconfigure
    second = local_pull(ctl, src, "--live", "--live-max-share", "0.5", "--state-file", str(state))
    assert second.returncode == 0, second.stdout + second.stderr
    assert "installed and reconfigured" in second.stdout, second.stdout
    assert "2 node(s) in 2 live call(s) would take about 3.0 s, a reconfigure 0.0 s" in second.stdout
    assert below(ctl) == AS_IN_TREE
    entry = next(iter(json.loads(state.read_text())["destinations"].values()))
    assert entry["costs"]["reconfigure"] > 0.001  # this run's reconfigure, measured
