"""The drift check and its repair, without a controller: ``scontrol show topology`` text as 26.05.5
prints it, and a fake controller that refuses what the real one refuses.

The real controller runs in tests/test_pull_converge.py; here every expected place is written out
by hand from the topology text.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from topocast.agents.pull import EXIT_CODES, PRIORITIES
from topocast.errors import TopocastError
from topocast.slurm.converge import ControllerView, converge, find_drift, shown_specs
from topocast.slurm.live import Costs, LivePlan, apply_moves, cheaper_plan, not_undone, placements

# as 26.05.5 prints it (tests/test_slurm_current.py): every node below a switch, leaves at Level=0
SHOWN_TREE = (
    "SwitchName=root Level=2 LinkSpeed=1 Nodes=c[1-2],n[1-12] Switches=spine[1-2]\n"
    "SwitchName=spine1 Level=1 LinkSpeed=1 Nodes=c1,n[2-8] Switches=leaf[1-2]\n"
    "SwitchName=spine2 Level=1 LinkSpeed=1 Nodes=c2,n[1,9-12] Switches=leaf3\n"
    "SwitchName=leaf1 Level=0 LinkSpeed=1 Nodes=c1,n[2-4]\n"
    "SwitchName=leaf2 Level=0 LinkSpeed=1 Nodes=n[5-8]\n"
    "SwitchName=leaf3 Level=0 LinkSpeed=1 Nodes=c2,n[1,9-12]\n"
)
FILE_TREE = (
    "SwitchName=root Switches=spine[1-2]\nSwitchName=spine1 Switches=leaf[1-2]\nSwitchName=spine2 Switches=leaf3\n"
    "SwitchName=leaf1 Nodes=c1,n[1-4]\nSwitchName=leaf2 Nodes=n[5-8]\nSwitchName=leaf3 Nodes=c2,n[9-12]\n"
)
TOPOLOGIES = [("default", "tree")]


def test_shown_tree_gives_each_node_its_leaf_and_the_path_above() -> None:
    specs = shown_specs("default", "tree", SHOWN_TREE)
    assert specs["n1"] == "default:root:spine2:leaf3"
    assert specs["n2"] == "default:root:spine1:leaf1"
    assert specs["n5"] == "default:root:spine1:leaf2"
    assert specs["c2"] == "default:root:spine2:leaf3"
    assert len(specs) == 14


def test_shown_blocks_give_each_node_its_block() -> None:
    shown = (
        "BlockName=b1 BlockIndex=0 Nodes=n[1-3,5] BlockSize=4\nBlockName=b2 BlockIndex=1 Nodes=n[4,6-8] BlockSize=4\n"
    )
    specs = shown_specs("nvl", "block", shown)
    assert specs == {
        **dict.fromkeys(["n1", "n2", "n3", "n5"], "nvl:b1"),
        **dict.fromkeys(["n4", "n6", "n7", "n8"], "nvl:b2"),
    }


def test_drift_names_each_misplaced_node_with_both_places() -> None:
    file_specs = placements(FILE_TREE).specs
    view = ControllerView(shown_specs("default", "tree", SHOWN_TREE), True, "scontrol show topology")
    drift = find_drift(file_specs, view)
    assert drift.misplaced == {"n1": ("default:root:spine2:leaf3", "default:root:spine1:leaf1")}
    assert "1 node(s) placed elsewhere than the file (n1: default:root:spine2:leaf3 -> default:root:spine1:leaf1)" in (
        drift.summary()
    )


def test_a_partial_view_judges_only_nodes_with_a_live_place() -> None:
    file_specs = {"n1": "default:root:spine1:leaf1", "n2": "default:root:spine1:leaf1", "n3": "t:a,u:b"}
    # slurmrestd: n2 has no live Topology= (the controller's file places it): not judged
    view = ControllerView({"n1": "default:root:spine2:leaf3", "n3": "u:b,t:a"}, False, "slurmrestd GET nodes")
    assert find_drift(file_specs, view).misplaced == {"n1": ("default:root:spine2:leaf3", "default:root:spine1:leaf1")}


def test_a_complete_view_sees_a_defined_node_the_controller_places_nowhere() -> None:
    view = ControllerView({"n1": "default:root:s1:l1", "n9": "default:root:s1:l1"}, True, "scontrol show topology")
    file_specs = {"n1": "default:root:s1:l1", "n2": "default:root:s1:l1", "x7": "default:root:s1:l1"}
    drift = find_drift(file_specs, view, ["n1", "n2", "n9"])
    # n9: not in the file (its own NodeName Topology= may place it); x7: slurm.conf does not define it
    assert drift.misplaced == {"n2": ("", "default:root:s1:l1")}
    # without the defined nodes, a node shown nowhere is not judged (it may not be the controller's)
    assert not find_drift(file_specs, view)


@dataclass
class FakeController:
    """Places per node; refuses what 26.05.5 refuses: a move whose first switch it does not know
    ("Don't know where to add switch", docs/slurm-pull.md) and any call once ``dead``."""

    specs: dict[str, str]
    file_specs: dict[str, str]
    power_saved: set[str] = field(default_factory=set)
    dead_after: int | None = None
    calls: list[str] = field(default_factory=list)
    call_name: str = "fake update"
    check_step: str = "read-back"
    uses_scontrol: bool = False

    def _call(self, what: str) -> None:
        if self.dead_after is not None and len(self.calls) >= self.dead_after:
            raise TopocastError(f"{what}: cannot connect (Connection refused)")
        self.calls.append(what)

    def version(self) -> tuple[int, int]:
        return (26, 5)

    def defined(self) -> list[str]:
        return sorted(self.specs)

    def move(self, hosts: str, spec: str) -> None:
        from topocast.model.hostlist import expand

        self._call(f"move {hosts}")
        roots = {s.split(":")[1] for s in self.file_specs.values()}
        if spec and spec.split(":")[1] not in roots:
            raise TopocastError(f"move {hosts}: Don't know where to add switch")
        for node in expand(hosts):
            self.specs[node] = spec or self.file_specs.get(node, "")

    def check(self, plan: LivePlan, text: str, known: list[str]) -> list[str]:
        self._call("check")
        return []

    def reconfigure(self) -> None:
        self._call("reconfigure")
        self.specs = dict(self.file_specs)

    def view(self, topologies: list[tuple[str, str]]) -> ControllerView:
        self._call("view")
        return ControllerView(dict(self.specs), True, "fake show topology")

    def power_saving(self, nodes: list[str]) -> list[str]:
        return sorted(set(nodes) & self.power_saved)


FILE = {"n1": "default:root:s1:l1", "n2": "default:root:s1:l1", "n3": "default:root:s2:l2"}


def test_drift_is_repaired_live_and_read_again() -> None:
    ctl = FakeController({**FILE, "n1": "default:root:s2:l2"}, dict(FILE))
    done = converge(FILE, TOPOLOGIES, ctl, allow_live=True, allow_reconfigure=False)
    assert done.ok and done.repair == "live" and ctl.specs == FILE
    assert ctl.calls == ["view", "move n1", "view"]  # read, one move per destination, read again
    assert "repaired live" in done.line() and "n1: default:root:s2:l2 -> default:root:s1:l1" in done.line()


def test_a_power_saving_node_is_repaired_by_reconfigure() -> None:
    ctl = FakeController({**FILE, "n1": "default:root:s2:l2"}, dict(FILE), power_saved={"n1"})
    done = converge(FILE, TOPOLOGIES, ctl, allow_live=True, allow_reconfigure=True)
    assert done.ok and done.repair == "reconfigure" and "move n1" not in ctl.calls
    assert "power-saving" in done.line() and "State=CLOUD" in done.line()


def test_without_reconfigure_and_live_failing_it_holds_and_says_what_is_left() -> None:
    ctl = FakeController({**FILE, "n1": "default:root:s2:l2"}, dict(FILE), dead_after=1)
    done = converge(FILE, TOPOLOGIES, ctl, allow_live=True, allow_reconfigure=False)
    assert not done.ok and done.repair == "held"
    line = done.line()
    assert "controller left inconsistent with the file: 1 node(s) still placed elsewhere (n1: " in line
    assert "ALARM" in line and "reconfigure is forbidden" in line and "Connection refused" in line


def test_a_controller_in_line_with_the_file_costs_one_read() -> None:
    ctl = FakeController(dict(FILE), dict(FILE))
    done = converge(FILE, TOPOLOGIES, ctl, allow_live=True, allow_reconfigure=True)
    assert done.ok and not done.drift and ctl.calls == ["view"]


def test_an_undo_over_a_dead_link_is_inconsistent_with_a_sample_and_a_count() -> None:
    before = {f"n{i}": "default:root:s1:l1" for i in range(1, 41)}
    after = {n: "default:root:s2:l2" for n in before}
    ctl = FakeController(dict(before), dict(before))
    ctl.dead_after = 1  # the first bulk move goes through, then every call fails
    plan = LivePlan(True, "test", [("n[1-20]", "default:root:s2:l2"), ("n[21-40]", "default:root:s2:l9")], before)
    moved = apply_moves(plan, ctl, "", sorted(after))
    assert not moved.ok and moved.step == "update"
    assert len(moved.not_back) == 40 and ctl.specs["n1"] == "default:root:s2:l2"  # still at the new place
    said = not_undone(moved)
    assert said.startswith(
        "controller left inconsistent: 40 node(s) may still be at their new place (n1, n10, n11, ...)"
    )
    assert len(said) < 600, said  # a sample and a count, never the 40 names or every error


@pytest.mark.parametrize(("status", "code", "priority"), [("repaired", 8, 4), ("inconsistent", 9, 3)])
def test_repair_outcomes_have_their_own_exit_code_and_priority(status: str, code: int, priority: int) -> None:
    assert EXIT_CODES[status] == code and PRIORITIES[status] == priority
    assert len(set(EXIT_CODES.values()) - {0}) == len([k for k, v in EXIT_CODES.items() if v]), "codes are distinct"


# ----- live or reconfigure by measured cost ------------------------------------------------------

PLAN = LivePlan(True, "only moves", [(f"n{i}", f"default:root:s1:l{i}") for i in range(1, 51)], {}, ["n1"] * 50)


def test_live_stays_while_no_reconfigure_was_measured() -> None:
    assert cheaper_plan(PLAN, None) is PLAN
    assert cheaper_plan(PLAN, Costs(move_call=0.05, check=0.04)) is PLAN


def test_many_live_calls_give_way_to_a_cheaper_reconfigure() -> None:
    # 50 calls at 50 ms and a 40 ms check: about 2.54 s, more than a 2.5 s reconfigure
    plan = cheaper_plan(PLAN, Costs(reconfigure=2.5, move_call=0.05, check=0.04))
    assert not plan.live
    assert plan.reason == (
        "50 node(s) in 50 live call(s) would take about 2.5 s, a reconfigure 2.5 s (both measured on earlier runs)"
    )
    # one call fewer is cheaper than the reconfigure: live
    fewer = LivePlan(True, "only moves", PLAN.moves[:49], {}, PLAN.changed[:49])
    assert cheaper_plan(fewer, Costs(reconfigure=2.5, move_call=0.05, check=0.04)) is fewer


def test_costs_round_trip_the_state_file_and_learn_the_newest() -> None:
    costs = Costs.from_dict({"reconfigure": 2.5, "move_call": "fast", "check": -1})
    assert costs == Costs(reconfigure=2.5)  # what is not a plausible number of seconds is not taken
    learned = costs.learn({"move_call": 0.02, "check": 0.03, "other": 9.0})
    assert learned.as_dict() == {"reconfigure": 2.5, "move_call": 0.02, "check": 0.03}


def test_a_controller_that_cannot_be_read_after_the_repair_is_not_called_repaired() -> None:
    ctl = FakeController({**FILE, "n1": "default:root:s2:l2"}, dict(FILE), dead_after=2)  # read, move, then gone
    done = converge(FILE, TOPOLOGIES, ctl, allow_live=True, allow_reconfigure=False)
    assert not done.ok and ctl.calls == ["view", "move n1"]
    assert "controller left inconsistent" in done.line() and "view: cannot connect" in done.line()
