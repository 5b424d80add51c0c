"""Blast-radius guard: the pure check, holds/reconcile/override, the publish stage, S3 persistence."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import pytest
from memory_stores import MemoryArtifactStore, MemoryGraphStore, MemoryPublishState
from pipeline_helpers import client, graph, make_bucket

from topocast.app.publish import confirm_on_reconcile, publish_manifest
from topocast.app.render import render_generation
from topocast.aws.publish_state import S3PublishState, read_override
from topocast.model.graph import TopologyGraph
from topocast.pipeline import guard
from topocast.pipeline.guard import (
    OVERRIDE_ENV,
    check,
    confirm,
    confirmed_gone,
    override_allows,
    reconcile_confirms,
    rehold,
)
from topocast.ports.records import HoldRecord, PublishedRecord, PublishResult

NODES = {f"n{i:03d}" for i in range(100)}


def minus(k: int) -> set[str]:
    return set(sorted(NODES)[k:])


@pytest.mark.parametrize(
    ("previous", "new", "kwargs", "allow"),
    [
        (None, NODES, {}, True),  # first publish
        (NODES, NODES | {"n999"}, {}, True),  # growth
        (NODES, minus(10), {}, True),  # exactly 10%: not *more* than the limit
        (NODES, minus(11), {}, False),
        (NODES, minus(11), {"max_loss_fraction": 0.2}, True),
        (NODES, minus(60), {"override": True}, True),
        (NODES, minus(60), {"confirmed_gone": set(sorted(NODES)[:60])}, True),
        (NODES, minus(60), {"confirmed_gone": set(sorted(NODES)[:50])}, True),  # 10 of 100 unconfirmed: 10%
        (NODES, minus(60), {"confirmed_gone": set(sorted(NODES)[:49])}, False),  # 11 unconfirmed: 11%
        (NODES, minus(60), {"confirmed_gone": {"n999"}}, False),  # a confirmation of a node not lost counts nothing
        (NODES, set(), {}, False),
        (NODES, set(), {"override": True, "confirmed_gone": NODES}, False),  # empty: never
        (None, set(), {"override": True}, False),
    ],
)
def test_check(previous, new, kwargs, allow) -> None:
    decision = check(previous, new, **kwargs)
    assert decision.allow is allow
    assert decision.lost == sorted((previous or set()) - new)


def test_held_reason_names_the_loss() -> None:
    decision = check(NODES, minus(30))
    assert "30 of 100" in decision.reason and "n000" in decision.reason and "held" in decision.reason
    assert "empty topology is never published" in check(NODES, set(), override=True).reason
    with pytest.raises(ValueError, match="max_loss_fraction"):
        check(NODES, NODES, max_loss_fraction=1.5)


def test_override_and_reconcile_helpers() -> None:
    assert override_allows("42", 42) and override_allows(" 42\n", 42)
    assert not override_allows("41", 42) and not override_allows("yes", 42) and not override_allows(None, 42)
    hold = HoldRecord(7, ["n001", "n002"], 6, "held")
    assert reconcile_confirms(hold, {"n003"}) == ["n001", "n002"]
    assert reconcile_confirms(hold, {"n002", "n003"}) == ["n001"]  # n002 came back: present again, not confirmed
    assert reconcile_confirms(hold, set()) == []  # an empty read confirms nothing
    assert confirmed_gone(hold, ["n001"]) == set()  # not confirmed yet
    partly = confirm(hold, ["n001", "n009"])  # n009 was never held: not recorded
    assert partly.confirmed_gone == ["n001"] and not partly.confirmed
    assert confirmed_gone(partly, ["n001", "n002"]) == {"n001"}
    assert confirm(partly, ["n002"]).confirmed and confirm(hold).confirmed
    assert HoldRecord.from_json(partly.to_json()) == partly
    # a record written before node-by-node confirmation ("confirmed": true) covered its whole loss
    old = {"generation": 7, "lost": ["n001", "n002"], "previous_generation": 6, "reason": "", "confirmed": True}
    assert HoldRecord.from_json(old).confirmed_gone == ["n001", "n002"]
    # a new hold keeps the confirmations of nodes that are still lost, and only those
    again = rehold(partly, HoldRecord(8, ["n001", "n005"], 6, "held"))
    assert again.confirmed_gone == ["n001"] and again.generation == 8
    assert rehold(partly, HoldRecord(8, ["n005"], 6, "held")).confirmed_gone == []


# ----- the publish stage ------------------------------------------------------------------------------


@dataclass
class RecordingPublisher:
    name: str = "rec"
    ok: bool = True
    calls: list[int] = field(default_factory=list)

    def publish(self, manifest, artifacts: Mapping[str, bytes]) -> PublishResult:
        self.calls.append(manifest.generation)
        return PublishResult(self.ok, "recorded")


def _pipeline():
    return MemoryGraphStore(), MemoryArtifactStore(), MemoryPublishState(), RecordingPublisher()


def _step(graphs, artifacts, state, pub, g: TopologyGraph, override: str | None = None):
    latest = graphs.latest()
    graphs.write_if_changed(g, expected_generation=latest.generation if latest else None)
    rendered = render_generation(graphs, artifacts, None, ["graph"])
    return publish_manifest(rendered.manifest, rendered.files, [pub], graphs=graphs, state=state, override=override)


def test_big_loss_is_held_until_a_reconcile_confirms_it() -> None:
    graphs, artifacts, state, pub = _pipeline()
    assert _step(graphs, artifacts, state, pub, graph("c1", 40)).published
    assert state.published.generation == 1 and len(state.published.nodes) == 40
    held = _step(graphs, artifacts, state, pub, graph("c1", 20))  # half the cluster "vanished"
    assert held.held and not held.published and pub.calls == [1]
    assert state.hold.generation == 2 and len(state.hold.lost) == 20 and state.published.generation == 1
    # a reconcile that sees none of them gone confirms nothing
    assert confirm_on_reconcile(state, graph("c1", 40)) is None
    # one that sees the same loss does; the next publish goes through and clears the hold
    assert confirm_on_reconcile(state, graph("c1", 20)).confirmed
    latest = artifacts.latest_manifest()
    outcome = publish_manifest(latest, {"graph.json": b"x"}, [pub], graphs=graphs, state=state)
    assert outcome.published and pub.calls == [1, 2]
    assert state.hold is None and state.published.generation == 2


def test_a_reconcile_confirms_node_by_node_and_a_held_node_back_is_present_again() -> None:
    graphs, artifacts, state, pub = _pipeline()
    _step(graphs, artifacts, state, pub, graph("c1", 40))  # gpu-0000..gpu-0039 published
    assert _step(graphs, artifacts, state, pub, graph("c1", 20)).held  # gpu-0020..gpu-0039 lost: 50%
    # the reconcile sees gpu-0020..29 back and gpu-0030..39 still gone: those ten are confirmed
    hold = confirm_on_reconcile(state, graph("c1", 30))
    assert hold is not None and hold.confirmed_gone == [f"gpu-{i:04d}" for i in range(30, 40)] and not hold.confirmed
    assert confirm_on_reconcile(state, graph("c1", 30)) is None  # nothing new to confirm
    # the stale held generation still loses ten nodes that are back (25% unconfirmed): still held
    latest = artifacts.latest_manifest()
    assert publish_manifest(latest, {}, [pub], graphs=graphs, state=state).held and pub.calls == [1]
    # the reconcile's own generation loses only the confirmed ten: published
    outcome = _step(graphs, artifacts, state, pub, graph("c1", 30))
    assert outcome.published and pub.calls == [1, 3] and "10 of them confirmed gone" in outcome.detail
    assert state.hold is None and len(state.published.nodes) == 30


def test_a_loss_still_waiting_for_its_publish_is_confirmed_by_the_reconcile_that_finds_it_stored() -> None:
    graphs, artifacts, state, pub = _pipeline()
    _step(graphs, artifacts, state, pub, graph("c1", 40))  # gpu-0000..0039 published
    stored = graph("c1", 34)  # events removed gpu-0034..0039 (15 %); its render waits for the quiet window
    graphs.write_if_changed(stored, expected_generation=1)
    # the reconcile's full read lacks them too: two reads agree, recorded before any publish was held
    assert confirm_on_reconcile(state, graph("c1", 34), stored.node_names(), 3) is None
    assert state.hold.confirmed_gone == [f"gpu-{i:04d}" for i in range(34, 40)] and pub.calls == [1]
    outcome = _step(graphs, artifacts, state, pub, stored)
    assert outcome.published and pub.calls == [1, 2] and state.hold is None


def test_a_full_read_alone_confirms_nothing_and_small_losses_leave_no_record() -> None:
    graphs, artifacts, state, pub = _pipeline()
    _step(graphs, artifacts, state, pub, graph("c1", 40))
    full = graph("c1", 40).node_names()
    assert confirm_on_reconcile(state, graph("c1", 20), full, 2) is None and state.hold is None  # one read
    assert confirm_on_reconcile(state, graph("c1", 37), graph("c1", 37).node_names(), 2) is None
    assert state.hold is None  # 3 of 40 (7.5 %): its publish goes through anyway
    assert _step(graphs, artifacts, state, pub, graph("c1", 20)).held  # the half cluster stays held


def test_confirmations_outlive_the_publish_of_an_older_manifest_only() -> None:
    graphs, artifacts, state, pub = _pipeline()
    _step(graphs, artifacts, state, pub, graph("c1", 40))
    gone = [f"gpu-{i:04d}" for i in range(30, 40)]
    state.save_hold(HoldRecord(9, gone, 1, "not held yet", confirmed_gone=gone))  # a reconcile's, generation 9
    assert _step(graphs, artifacts, state, pub, graph("c1", 39)).published  # generation 2 still has 30..38
    assert state.hold.confirmed_gone == gone[:-1] and state.hold.generation == 9
    assert _step(graphs, artifacts, state, pub, graph("c1", 30)).published  # 9 of 39 lost, all confirmed
    assert state.hold is None
    # a publish of the hold's own generation or a newer one releases it, whatever it still lists
    state.save_hold(HoldRecord(4, ["gpu-0000"], 3, "held", confirmed_gone=["gpu-0000"]))
    assert _step(graphs, artifacts, state, pub, graph("c1", 31)).published and state.published.generation == 4
    assert state.hold is None


def test_a_sudden_half_cluster_is_still_held_without_a_reconcile() -> None:
    graphs, artifacts, state, pub = _pipeline()
    _step(graphs, artifacts, state, pub, graph("c1", 40))
    assert _step(graphs, artifacts, state, pub, graph("c1", 20)).held
    assert _step(graphs, artifacts, state, pub, graph("c1", 19)).held  # a newer one, still unexplained
    assert pub.calls == [1] and state.hold.generation == 3 and state.hold.confirmed_gone == []


def test_operator_override_names_one_generation() -> None:
    graphs, artifacts, state, pub = _pipeline()
    _step(graphs, artifacts, state, pub, graph("c1", 40))
    assert _step(graphs, artifacts, state, pub, graph("c1", 10), override="7").held  # wrong generation
    assert _step(graphs, artifacts, state, pub, graph("c1", 11), override="3").published
    assert state.published.generation == 3 and pub.calls == [1, 3]


def test_small_changes_flow_and_failed_publish_is_not_recorded() -> None:
    graphs, artifacts, state, pub = _pipeline()
    _step(graphs, artifacts, state, pub, graph("c1", 40))
    assert _step(graphs, artifacts, state, pub, graph("c1", 37)).published  # 7.5% loss
    pub.ok = False
    outcome = _step(graphs, artifacts, state, pub, graph("c1", 39))
    assert not outcome.published and not outcome.held and state.published.generation == 2


def test_empty_graph_is_never_published() -> None:
    graphs, artifacts, state, pub = _pipeline()
    _step(graphs, artifacts, state, pub, graph("c1", 40))
    empty = TopologyGraph.model_validate({"cluster": "c1", "provider": "test", "nodes": []})
    outcome = _step(graphs, artifacts, state, pub, empty, override="2")
    assert outcome.held and pub.calls == [1]


# ----- S3 persistence -----------------------------------------------------------------------------------


def test_s3_publish_state_round_trip(moto_server) -> None:
    s3 = client(moto_server, "s3")
    bucket = make_bucket(moto_server)
    st = S3PublishState(bucket, "tc", "c1", s3)
    assert st.load_published() is None and st.load_hold() is None
    st.save_published(PublishedRecord(3, "a" * 64, ["n1", "n2"], publishers=["ssm"]))
    st.save_hold(HoldRecord(4, ["n2"], 3, "held: ..."))
    again = S3PublishState(bucket, "tc", "c1", s3)
    assert again.load_published().nodes == ["n1", "n2"] and again.load_hold().lost == ["n2"]
    keys = {o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]}
    assert keys == {"tc/c1/state/published.json", "tc/c1/state/guard-hold.json"}
    again.clear_hold()
    assert st.load_hold() is None
    s3.put_object(Bucket=bucket, Key="tc/c1/state/published.json", Body=b'{"generation": 1}')
    with pytest.raises(Exception, match=r"published\.json: malformed published record"):
        st.load_published()


def test_read_override(moto_server, monkeypatch: pytest.MonkeyPatch) -> None:
    ssm = client(moto_server, "ssm")
    monkeypatch.delenv(OVERRIDE_ENV, raising=False)
    assert read_override("ovr", ssm) is None
    ssm.put_parameter(Name="/topocast/ovr/guard/allow-generation", Value="12", Type="String")
    assert read_override("ovr", ssm) == "12"
    monkeypatch.setenv(OVERRIDE_ENV, "13")
    assert read_override("ovr", ssm) == "13"


def test_the_override_in_the_environment_wins_over_the_store_and_an_empty_one_does_not() -> None:
    def unreachable() -> str | None:
        raise AssertionError("the store is not read when the environment names a generation")

    assert guard.read_override(unreachable, {OVERRIDE_ENV: "13"}) == "13"
    assert guard.read_override(lambda: "12", {OVERRIDE_ENV: ""}) == "12"
    assert guard.read_override(lambda: "12", {}) == "12"
    assert guard.read_override(lambda: None, {"OTHER": "5"}) is None


def test_a_removal_event_in_the_reconciles_batch_is_the_earlier_read() -> None:
    from topocast.app.discover import _seen_gone
    from topocast.model.changes import InstanceChange

    stored = graph("c1", 4)  # ids i-000...0 .. i-000...3
    stopped = InstanceChange(stored.nodes[1].id or "", "remove", "aws.ec2/state#stopped")
    started = InstanceChange(stored.nodes[2].id or "", "upsert", "aws.ec2/state#running")
    deleted = InstanceChange("p1/us-central1-a/gpu-0003", "remove", "v1.compute.instances.delete")
    assert _seen_gone(stored, [stopped, started, deleted]) == ["gpu-0000", "gpu-0002"]
    assert _seen_gone(None, [stopped]) is None
