"""The health action planner: damping, the blast radius, the share guard, and only ever undoing its own marks.

The model-based test drives random failures and recoveries of switches, links, domains and capacity blocks,
with duplicated and late observations and another operator draining and resuming nodes, through a fake
Slurm that refuses to let topocast resume a drain it did not make. At every idle point the nodes drained by
topocast equal the blast radius of what is bad now (worked out by the test from its own map of the
cluster), less the nodes another operator holds.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from topocast.model.health import HealthRecord, NodeHealth, ObjectRef, node_health
from topocast.model.health_plan import (
    DampingState,
    HealthPlan,
    HealthPolicy,
    Holding,
    is_ours,
    observe,
    plan,
    slurm_reason,
)

T0 = datetime(2026, 12, 4, 15, 0, tzinfo=UTC)

# 16 nodes: node i sits on leaf i//4 under spine (i//4)//2, in NVLink domain i//2, capacity block i//8
NODES = [f"gpu-{i:02d}" for i in range(16)]
ROWS = [
    (n, [f"leaf-{i // 4}", f"spine-{i // 8}"], f"nvl-{i // 2}", {"capacity-block": f"cb-{i // 8}"})
    for i, n in enumerate(NODES)
]
# each object and the node indexes that depend on it, written out independently of topocast
OBJECTS: dict[ObjectRef, set[int]] = {
    **{ObjectRef("switch", f"leaf-{k}"): set(range(4 * k, 4 * k + 4)) for k in range(4)},
    **{ObjectRef("switch", f"spine-{k}"): set(range(8 * k, 8 * k + 8)) for k in range(2)},
    **{ObjectRef("link", f"leaf-{k}", f"spine-{k // 2}"): set(range(4 * k, 4 * k + 4)) for k in range(4)},
    **{ObjectRef("link", f"gpu-{i:02d}", f"leaf-{i // 4}"): {i} for i in (0, 5, 10, 15)},
    **{ObjectRef("domain", f"nvl-{k}"): {2 * k, 2 * k + 1} for k in range(8)},
    **{ObjectRef("capacity_block", f"cb-{k}"): set(range(8 * k, 8 * k + 8)) for k in range(2)},
}
REFS = sorted(OBJECTS)
ALL = HealthPolicy(max_share=1.0)


def record(ref: ObjectRef, state: str, reason: str = "") -> HealthRecord:
    return HealthRecord(
        kind=ref.kind, id=ref.id, peer=ref.peer, state=state, source="test", reason=reason, observed_at=T0
    )  # type: ignore[arg-type]


class FakeSlurm:
    """Node -> drain reason (None = not drained). Resuming a drain that is not topocast's is a violation."""

    def __init__(self) -> None:
        self.reasons: dict[str, str | None] = dict.fromkeys(NODES)
        self.violations: list[str] = []

    def holding(self) -> Holding:
        ours = {n: r for n, r in self.reasons.items() if r is not None and is_ours(r)}
        foreign = frozenset(n for n, r in self.reasons.items() if r is not None and not is_ours(r))
        return Holding(ours, foreign)

    def apply(self, mark: dict[str, str], unmark: list[str]) -> None:
        for node in unmark:
            if not is_ours(self.reasons[node]):
                self.violations.append(f"resumed {node} drained as {self.reasons[node]!r}")
            self.reasons[node] = None
        for node, reason in mark.items():
            if self.reasons[node] is not None and not is_ours(self.reasons[node]):
                self.violations.append(f"overwrote {node}'s drain {self.reasons[node]!r}")
            self.reasons[node] = reason


class Applier:
    """What `topocast health apply` does per run: observe, derive the radius, plan against Slurm, apply."""

    def __init__(self, slurm: FakeSlurm, policy: HealthPolicy) -> None:
        self.slurm, self.policy, self.damping = slurm, policy, DampingState()

    def run(self, records: list[HealthRecord], seq: int) -> None:
        self.damping = observe(self.damping, records, seq, self.policy)
        radius = node_health(ROWS, self.damping.confirmed())
        p = plan(len(NODES), radius, self.slurm.holding(), self.policy, slurm_reason)
        self.slurm.apply(p.mark, p.unmark)


step = st.one_of(
    st.tuples(st.just("set"), st.sampled_from(REFS), st.sampled_from(["ok", "unknown", "degraded", "impaired"])),
    st.tuples(st.just("observe"), st.sampled_from(["new", "duplicate", "late"]), st.integers(0, 5)),
    st.tuples(st.just("operator-drain"), st.sampled_from(NODES), st.just("")),
    st.tuples(st.just("operator-resume"), st.sampled_from(NODES), st.just("")),
    st.tuples(st.just("idle"), st.just(""), st.just("")),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(step, max_size=40), st.integers(1, 3), st.integers(1, 3))
def test_at_every_idle_point_topocast_holds_the_blast_radius_and_never_resumes_another_drain(
    steps: list[tuple[str, object, object]], act_after: int, undo_after: int
) -> None:
    slurm = FakeSlurm()
    applier = Applier(slurm, HealthPolicy(act_after=act_after, undo_after=undo_after, max_share=1.0))
    truth: dict[ObjectRef, str] = {}
    history: list[list[HealthRecord]] = []  # what each observation saw, by seq - 1

    def observe_now() -> None:
        history.append([record(ref, s, "seen bad") for ref, s in sorted(truth.items()) if s != "ok"])
        applier.run(history[-1], len(history))

    def check_idle() -> None:
        for _ in range(max(act_after, undo_after)):
            observe_now()
        bad = {i for ref, s in truth.items() if s in ("degraded", "impaired") for i in OBJECTS[ref]}
        operators = {n for n, r in slurm.reasons.items() if r is not None and not is_ours(r)}
        ours = {n for n, r in slurm.reasons.items() if is_ours(r)}
        assert ours == {NODES[i] for i in bad} - operators
        for node in ours:  # the reason names an object the node really depends on, and a bad one
            text = slurm.reasons[node]
            assert text is not None and text.startswith("topocast: ")
            assert any(
                text.startswith(f"topocast: {ref} ") for ref in REFS if truth.get(ref) in ("degraded", "impaired")
            )

    for kind, a, b in steps:
        if kind == "set":
            truth[a] = b  # type: ignore[index]
        elif kind == "observe" and (a == "new" or not history):
            observe_now()
        elif kind == "observe":
            back = 0 if a == "duplicate" else min(int(b), len(history) - 1)  # type: ignore[call-overload]
            applier.run(history[-1 - back], len(history) - back)  # an old seq: changes nothing
        elif kind == "operator-drain":
            slurm.reasons[a] = "ops: bad DIMM"  # type: ignore[index]
        elif kind == "operator-resume":
            slurm.reasons[a] = None  # type: ignore[index]
        elif kind == "idle":
            check_idle()
        assert slurm.violations == []
    check_idle()
    assert slurm.violations == []


def run_plan(holding: Holding, bad: list[HealthRecord], policy: HealthPolicy = ALL, nodes: int = 16) -> HealthPlan:
    radius = node_health(ROWS, bad)
    return plan(nodes, radius, holding, policy, slurm_reason)


def test_a_leaf_drains_its_four_nodes_with_a_reason_naming_it() -> None:
    p = run_plan(Holding(), [record(ObjectRef("switch", "leaf-1"), "impaired", "leaf vanished")])
    assert p.mark == {f"gpu-{i:02d}": "topocast: switch leaf-1 impaired: leaf vanished" for i in (4, 5, 6, 7)}
    assert p.unmark == [] and p.held == []


def test_another_operators_drain_is_left_alone_and_only_our_own_is_resumed() -> None:
    holding = Holding(ours={"gpu-00": "topocast: switch leaf-0 impaired"}, foreign=frozenset({"gpu-05", "gpu-01"}))
    p = run_plan(holding, [record(ObjectRef("switch", "leaf-1"), "degraded")])
    assert sorted(p.mark) == ["gpu-04", "gpu-06", "gpu-07"]
    assert p.foreign == ["gpu-05"]
    assert p.unmark == ["gpu-00"]  # leaf-0 healed; gpu-01 (someone else's) is never in unmark


def test_unknown_is_shown_but_not_acted_on_and_impaired_only_policy_ignores_degraded() -> None:
    assert run_plan(Holding(), [record(ObjectRef("domain", "nvl-0"), "unknown")]).mark == {}
    policy = HealthPolicy(act_from="impaired", max_share=1.0)
    assert run_plan(Holding(), [record(ObjectRef("domain", "nvl-0"), "degraded")], policy).mark == {}
    assert sorted(run_plan(Holding(), [record(ObjectRef("domain", "nvl-0"), "impaired")], policy).mark) == [
        "gpu-00",
        "gpu-01",
    ]


def test_the_share_guard_holds_new_marks_but_still_gives_nodes_back() -> None:
    # 10 % of 16 nodes is 1: a leaf (4 nodes) is held, one node's link is not
    policy = HealthPolicy(max_share=0.1)
    p = run_plan(Holding(ours={"gpu-15": "topocast: x"}), [record(ObjectRef("switch", "leaf-1"), "impaired")], policy)
    assert p.mark == {}
    assert p.held == ["gpu-04", "gpu-05", "gpu-06", "gpu-07"]
    assert p.held_reason == "4 node(s) of 16 would be marked, more than max_share 0.1 (1); new marks held"
    assert p.unmark == ["gpu-15"]
    one = run_plan(Holding(), [record(ObjectRef("link", "gpu-05", "leaf-1"), "impaired")], policy)
    assert list(one.mark) == ["gpu-05"] and one.held == []


def test_a_flapping_object_is_damped() -> None:
    policy = HealthPolicy(act_after=2, undo_after=3)
    bad = [record(ObjectRef("switch", "leaf-0"), "impaired")]
    seen = [bad, [], bad, bad, [], [], bad, [], [], []]
    confirmed = []
    state = DampingState()
    for seq, records in enumerate(seen, start=1):
        state = observe(state, records, seq, policy)
        confirmed.append(bool(state.confirmed()))
    # bad once then good: never acted; bad twice: acted; good twice: still held; bad again resets; good x3: undone
    assert confirmed == [False, False, False, True, True, True, True, True, True, False]


def test_duplicated_and_late_observations_change_nothing() -> None:
    bad = [record(ObjectRef("switch", "leaf-0"), "impaired")]
    state = observe(DampingState(), bad, 5, ALL)
    assert observe(state, [], 5, ALL) == state
    assert observe(state, [], 3, ALL) == state
    assert observe(state, [], 6, ALL).confirmed() == []


def test_the_damping_state_round_trips_as_json() -> None:
    state = observe(DampingState(), [record(ObjectRef("link", "leaf-0", "spine-0"), "degraded", "2 of 4")], 1, ALL)
    assert DampingState.model_validate_json(state.model_dump_json()) == state


@pytest.mark.parametrize("share", [-0.1, 1.5])
def test_a_policy_out_of_range_is_refused(share: float) -> None:
    with pytest.raises(ValueError, match="max_share"):
        HealthPolicy(max_share=share)


def test_a_long_reason_is_capped_on_one_line() -> None:
    h = NodeHealth("gpu-00", "degraded", ObjectRef("switch", "leaf-0"), "x" * 300)
    text = slurm_reason(h)
    assert len(text) == 128 and text.startswith("topocast: switch leaf-0 degraded: xxx") and text.endswith("...")
