"""``topocast health apply`` on Slurm: drains with a ``topocast:`` reason, resumes only its own drains.

The real-controller tests run the command as an operator would, against a throwaway slurmctld: 26.05 in the
sid chroot (``slurm_current``) and Debian 12's 22.05 (``slurm``). Expected drains are written from the test's
own map of the cluster (leaf1 = n[1-4], leaf2 = n[5-8]).
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest
from cli_runner import invoke
from slurm_fixtures import ControllerFactory, requires_slurm

from topocast.model.health_plan import HealthPlan
from topocast.slurm.controller import SlurmController
from topocast.slurm.drain import ScontrolControl, SlurmNode, apply_plan, parse_show_nodes

NODES = [f"n{i}" for i in range(1, 9)]
TREE = "SwitchName=leaf1 Nodes=n[1-4]\nSwitchName=leaf2 Nodes=n[5-8]\nSwitchName=spine Switches=leaf[1-2]\n"
LEAF1 = "topocast: switch leaf1 impaired: every uplink down"

# what 22.05 and 26.05 print (trimmed to the fields read; the reason carries '=' on purpose)
TEXT = (
    "NodeName=n1 CoresPerSocket=1 State=IDLE+DRAIN ThreadsPerCore=1 CfgTRES=cpu=1 "
    "Reason=topocast: switch leaf1 impaired: x=y Reason=z [root@2026-12-04T15:29:11]\n"
    "NodeName=n2 CoresPerSocket=1 State=UNKNOWN+NOT_RESPONDING ThreadsPerCore=1 CfgTRES=cpu=1 AveWatts=0\n"
    "NodeName=n3 State=DOWN* Reason=Not responding [slurm@2026-12-04T15:00:00]\n"
)


def test_the_text_form_is_read_with_the_reason_whole_and_who_set_it_dropped() -> None:
    assert parse_show_nodes(TEXT) == {
        "n1": SlurmNode("n1", ("IDLE", "DRAIN"), "topocast: switch leaf1 impaired: x=y Reason=z"),
        "n2": SlurmNode("n2", ("UNKNOWN", "NOT_RESPONDING"), None),
        "n3": SlurmNode("n3", ("DOWN",), "Not responding"),
    }


def test_the_json_form_is_read() -> None:
    text = json.dumps(
        {
            "nodes": [
                {"name": "n3", "state": ["IDLE", "DRAIN"], "reason": "ops"},
                {"name": "n4", "state": ["IDLE"], "reason": ""},
            ]
        }
    )
    assert parse_show_nodes(text) == {
        "n3": SlurmNode("n3", ("IDLE", "DRAIN"), "ops"),
        "n4": SlurmNode("n4", ("IDLE",), None),
    }


def graph_file(tmp_path: Path, name: str, health: list[dict]) -> Path:
    nodes = [{"name": n, "fabric": [f"leaf{1 if i < 4 else 2}", "spine"]} for i, n in enumerate(NODES)]
    data = {"schema_version": 1, "cluster": "c1", "provider": "test", "nodes": nodes, "health": health}
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def leaf1(state: str) -> list[dict]:
    return [
        {"kind": "switch", "id": "leaf1", "state": state, "source": "ibnetdiscover", "reason": "every uplink down",
         "observed_at": "2026-12-04T15:00:00Z"}
    ]  # fmt: skip


def reasons(ctl: SlurmController) -> dict[str, str | None]:
    code, out, err = ctl.scontrol("show", "node", "-o")
    assert code == 0, err
    return {n.name: n.reason for n in parse_show_nodes(out).values()}


def scontrol_arg(ctl: SlurmController) -> str:
    """``--scontrol`` for this controller: a path, or the chroot prefix as one shell word list."""
    command = ctl.install.scontrol_command
    return command if isinstance(command, str) else shlex.join(command)


def drive(ctl: SlurmController, tmp_path: Path) -> None:
    """The whole story against one controller: guard, drain, another operator, heal, resume."""
    args = ["--scontrol", scontrol_arg(ctl), "--slurm-conf", ctl.install.inside(ctl.conf_path), "--state-file",
            tmp_path / "state.json"]  # fmt: skip
    bad, healed = graph_file(tmp_path, "bad.json", leaf1("impaired")), graph_file(tmp_path, "ok.json", [])
    assert ctl.scontrol("update", "NodeName=n2", "State=DRAIN", "Reason=ops: bad DIMM")[0] == 0

    # the default share guard (10 % of 8 nodes = 1) holds a whole leaf: nothing drained, exit 3
    held = invoke(["health", "apply", bad, *args, "--json"])
    assert held.exit_code == 3, held.output
    assert json.loads(held.stdout)["plan"]["held"] == ["n1", "n3", "n4"]
    assert reasons(ctl) == {**dict.fromkeys(NODES), "n2": "ops: bad DIMM"}

    done = invoke(["health", "apply", bad, *args, "--max-share", "0.5"])
    assert done.exit_code == 0, done.output
    assert "left alone (held by someone else or excluded): n2" in done.stdout
    assert reasons(ctl) == {**dict.fromkeys(NODES), "n1": LEAF1, "n2": "ops: bad DIMM", "n3": LEAF1, "n4": LEAF1}

    # another operator takes over n3's drain: from now on it is theirs
    assert ctl.scontrol("update", "NodeName=n3", "State=DRAIN", "Reason=ops: reseat cable")[0] == 0
    back = invoke(["health", "apply", healed, *args, "--max-share", "0.5", "--json"])
    assert back.exit_code == 0, back.output
    report = json.loads(back.stdout)
    assert (report["resumed"], report["errors"]) == (["n1", "n4"], [])
    assert reasons(ctl) == {**dict.fromkeys(NODES), "n2": "ops: bad DIMM", "n3": "ops: reseat cable"}
    drained = {n.name for n in parse_show_nodes(ctl.scontrol("show", "node", "-o")[1]).values() if "DRAIN" in n.state}
    assert drained == {"n2", "n3"}


@pytest.mark.slurm_current
def test_on_slurm_26_05_drains_resumes_and_leaves_other_drains(
    sid_controller_factory: ControllerFactory, tmp_path: Path
) -> None:
    drive(sid_controller_factory(NODES, TREE), tmp_path)


@pytest.mark.slurm
@requires_slurm
def test_on_slurm_22_05_drains_resumes_and_leaves_other_drains(
    slurm_controller_factory: ControllerFactory, tmp_path: Path
) -> None:
    drive(slurm_controller_factory(NODES, TREE), tmp_path)


@pytest.mark.slurm_current
def test_a_drain_taken_over_between_plan_and_apply_is_not_resumed(
    sid_controller_factory: ControllerFactory,
) -> None:
    ctl = sid_controller_factory(NODES, TREE)
    command, env = ctl.install.scontrol_command, ctl.env()
    assert ctl.scontrol("update", "NodeName=n5", "State=DRAIN", "Reason=ops: mine now")[0] == 0
    outcome = apply_plan(HealthPlan(mark={}, unmark=["n5"], radius={}, foreign=[]), ScontrolControl(command, env))
    assert (outcome.resumed, outcome.left, outcome.errors) == ([], ["n5"], [])
    assert reasons(ctl)["n5"] == "ops: mine now"


def test_bad_state_file_is_one_line_naming_it(tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    state.write_text('{"seq": -1}')
    result = invoke(["health", "apply", graph_file(tmp_path, "g.json", []), "--state-file", state,
                     "--scontrol", "/nonexistent/scontrol"])  # fmt: skip
    assert result.exit_code == 2
    assert result.stderr.startswith(f"topocast: error: --state-file {state}")
    assert len(result.stderr.splitlines()) == 1


# ----- the block-file variant: a degraded NVLink domain leaves topology/block instead of being drained ---------

BLOCK_NODES = [f"n{i}" for i in range(1, 13)]


def block_graph(tmp_path: Path, health: list[dict]) -> Path:
    # three NVLink domains of four nodes: nvl-a = n[1-4], nvl-b = n[5-8], nvl-c = n[9-12]
    nodes = [
        {"name": n, "fabric": ["leaf1", "spine"], "accelerator": "nvl-" + "abc"[i // 4]}
        for i, n in enumerate(BLOCK_NODES)
    ]
    data = {"schema_version": 1, "cluster": "c1", "provider": "test", "nodes": nodes, "health": health}
    path = tmp_path / "g.json"
    path.write_text(json.dumps(data))
    return path


def domain(id_: str, state: str, kind: str = "domain") -> dict:
    return {"kind": kind, "id": id_, "state": state, "source": "nvlink", "reason": "fabric Degraded",
            "observed_at": "2026-12-04T15:00:00Z"}  # fmt: skip


def render_block(tmp_path: Path, health: list[dict], least: str | None) -> tuple[int, str, str]:
    options = tmp_path / "options.json"
    options.write_text(json.dumps({"leave_out_domains_from": least}))
    result = invoke(["render", "--graph", block_graph(tmp_path, health), "-f", "slurm-block", "--options", options,
                     "-o", tmp_path / "out"])  # fmt: skip
    out = tmp_path / "out" / "topology-block.conf"
    return result.exit_code, out.read_text() if out.exists() else "", result.stderr


def block_nodes(text: str) -> list[str]:
    """The blocks' hostlists, sorted (the file's order follows the fabric walk)."""
    return sorted(line.split("Nodes=")[1] for line in text.splitlines() if line.startswith("BlockName="))


def test_a_degraded_domain_leaves_the_block_file_and_says_so(tmp_path: Path) -> None:
    code, text, err = render_block(tmp_path, [domain("nvl-b", "degraded")], "degraded")
    assert code == 0, err
    assert block_nodes(text) == ["n[1-4]", "n[9-12]"]
    assert "domain nvl-b left out of the blocks: domain degraded (fabric Degraded)" in err


def test_without_the_option_or_below_its_threshold_every_domain_stays(tmp_path: Path) -> None:
    assert block_nodes(render_block(tmp_path, [domain("nvl-b", "degraded")], None)[1]) == [
        "n[1-4]",
        "n[5-8]",
        "n[9-12]",
    ]
    kept = render_block(tmp_path, [domain("nvl-b", "degraded")], "impaired")[1]
    assert block_nodes(kept) == ["n[1-4]", "n[5-8]", "n[9-12]"]
    gone = render_block(tmp_path, [domain("nvl-c", "impaired", kind="capacity_block")], "impaired")[1]
    assert block_nodes(gone) == ["n[1-4]", "n[5-8]"]


def test_every_domain_bad_is_refused_not_an_empty_file(tmp_path: Path) -> None:
    code, text, err = render_block(tmp_path, [domain(d, "impaired") for d in ("nvl-a", "nvl-b", "nvl-c")], "degraded")
    assert code == 2 and text == ""
    assert err.startswith("topocast: error: ") and "every accelerator domain of cluster 'c1' is degraded" in err


@pytest.mark.slurm_current
def test_on_slurm_26_05_the_block_file_without_the_degraded_domain_loads(
    sid_controller_factory: ControllerFactory, tmp_path: Path
) -> None:
    code, text, err = render_block(tmp_path, [domain("nvl-b", "degraded")], "degraded")
    assert code == 0, err
    ctl = sid_controller_factory(BLOCK_NODES, text, topology_plugin="topology/block")
    # the controller's own words: the left-out domain's nodes are outside every block
    assert ctl.log_lines() == ["warning: Blocks lack access to 4 nodes: n[5-8]"]
    shown = sorted(sorted(b.nodes) for b in ctl.show_blocks().values() if b.nodes)
    assert shown == [["n1", "n2", "n3", "n4"], ["n10", "n11", "n12", "n9"]]


@pytest.mark.slurm_current
def test_pause_and_exclude_change_nothing_they_cover(sid_controller_factory: ControllerFactory, tmp_path: Path) -> None:
    ctl = sid_controller_factory(NODES, TREE)
    args = ["--scontrol", scontrol_arg(ctl), "--slurm-conf", ctl.install.inside(ctl.conf_path), "--state-file",
            tmp_path / "state.json", "--max-share", "0.5"]  # fmt: skip
    bad = graph_file(tmp_path, "bad.json", leaf1("impaired"))
    pause = tmp_path / "pause"
    pause.touch()
    paused = invoke(["health", "apply", bad, *args, "--pause-file", pause, "--json"])
    assert paused.exit_code == 0, paused.output
    assert json.loads(paused.stdout)["paused"] is True
    assert reasons(ctl) == dict.fromkeys(NODES) and not (tmp_path / "state.json").exists()

    pause.unlink()
    done = invoke(["health", "apply", bad, *args, "--pause-file", pause, "--exclude", "n[3-4]"])
    assert done.exit_code == 0, done.output
    assert reasons(ctl) == {**dict.fromkeys(NODES), "n1": LEAF1, "n2": LEAF1}


# ----- through slurmrestd (26.05, JWT) -------------------------------------------------------------------------


@pytest.mark.slurm_current
def test_through_slurmrestd_drains_resumes_and_leaves_other_drains(rest_cluster_factory: Any, tmp_path: Path) -> None:
    ctl = rest_cluster_factory(NODES, TREE)
    args = ["--via", "slurmrestd", ctl.url, "--token-from", ctl.write_token(tmp_path / "jwt"), "--state-file",
            tmp_path / "state.json", "--max-share", "0.5"]  # fmt: skip
    bad, healed = graph_file(tmp_path, "bad.json", leaf1("impaired")), graph_file(tmp_path, "ok.json", [])
    assert ctl.scontrol("update", "NodeName=n2", "State=DRAIN", "Reason=ops: bad DIMM")[0] == 0
    done = invoke(["health", "apply", bad, *args, "--json"])
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["drained"] == ["n1", "n3", "n4"]
    assert reasons(ctl) == {**dict.fromkeys(NODES), "n1": LEAF1, "n2": "ops: bad DIMM", "n3": LEAF1, "n4": LEAF1}
    back = invoke(["health", "apply", healed, *args, "--json"])
    assert back.exit_code == 0, back.output
    assert json.loads(back.stdout)["resumed"] == ["n1", "n3", "n4"]
    assert reasons(ctl) == {**dict.fromkeys(NODES), "n2": "ops: bad DIMM"}
    assert ctl.token not in done.output + back.output
