"""The follow policy of the discover use case, decided once for both clouds: a followed instance that is
not steady keeps its place and is re-checked later through the Rechecks port, bounded; and the re-check
bodies both clouds send parse back (``topocast events explain`` included) to the event table's row."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest
from memory_stores import MemoryArtifactStore, MemoryGraphStore, MemoryPublishState

from topocast.app import discover
from topocast.app import event_table as table
from topocast.app.metrics import MetricCounts
from topocast.aws.events import parse_event
from topocast.aws.root import SqsRechecks
from topocast.model.changes import InstanceChange, Recheck
from topocast.model.graph import Node, TopologyGraph
from topocast.ports.debounce import Decision
from topocast.ports.protocols import DiscoverPorts
from topocast.providers.base import DiscoveryResult

IID = "i-0123456789abcdef0"


class ScriptedProvider:
    """Each instance's state as a test sets it: ``running`` (placed on ``leaf``), ``moving``, ``out``."""

    name = "scripted"
    incremental = True

    def __init__(self) -> None:
        self.state: dict[str, tuple[str, str]] = {}
        self.reads: list[list[InstanceChange]] = []

    def discover_full(self, previous: TopologyGraph | None) -> DiscoveryResult:
        nodes = [Node(name=i, id=i, fabric=[leaf, "spine"]) for i, (s, leaf) in self.state.items() if s == "running"]
        return DiscoveryResult(TopologyGraph(cluster="c1", provider="aws", nodes=nodes))

    def discover_changes(self, previous: TopologyGraph, changes: Sequence[InstanceChange]) -> DiscoveryResult:
        self.reads.append(list(changes))
        nodes = {n.id: n for n in previous.nodes}
        waiting = []
        for c in changes:
            state, leaf = self.state[c.instance]
            if state == "running":
                nodes[c.instance] = Node(name=c.instance, id=c.instance, fabric=[leaf, "spine"])
            elif state == "moving" and c.follow:
                waiting.append(c.instance)  # kept as it was
            else:
                nodes.pop(c.instance, None)
        graph = TopologyGraph(cluster="c1", provider="aws", nodes=sorted(nodes.values(), key=lambda n: n.name))
        return DiscoveryResult(graph, unsettled=waiting)

    def scope(self, change: InstanceChange) -> str | None:
        return None


class Debouncer:
    def note_change(self, cluster: str, generation: int) -> Decision:
        return Decision("idle", reason="test")


class Rechecks:
    def __init__(self) -> None:
        self.sent: list[tuple[list[tuple[str, str]], int, float, str]] = []

    def schedule(self, instances: Sequence[tuple[str, str]], attempt: int, delay: float, dedup: str) -> str:
        self.sent.append((list(instances), attempt, delay, dedup))
        return "created"


def ports(provider: ScriptedProvider, rechecks: Rechecks | None, bound: int = 2) -> DiscoverPorts:
    return DiscoverPorts(
        cluster="c1", graphs=MemoryGraphStore(), provider=lambda: provider, debouncer=Debouncer(),
        publish_state=MemoryPublishState(), artifacts=MemoryArtifactStore(), handoff=None,  # type: ignore[arg-type]
        metrics=MetricCounts(), full_scan_threshold=100, rechecks=rechecks, follow_rechecks=bound, follow_interval=45.0,
        set_aside_limit=0.10,
    )  # fmt: skip


def host_event(instance: str = "a", event_id: str = "e1") -> InstanceChange:
    return InstanceChange(instance, "upsert", "compute.instances.hostError", event_id=event_id, follow=True)


def fabric(p: DiscoverPorts, instance: str) -> list[str] | None:
    stored = p.graphs.latest()
    assert stored is not None
    return next((n.fabric for n in stored.graph.nodes if n.id == instance), None)


@pytest.fixture
def placed() -> tuple[ScriptedProvider, Rechecks, DiscoverPorts]:
    provider, rechecks = ScriptedProvider(), Rechecks()
    provider.state = {"a": ("running", "leaf-1"), "b": ("running", "leaf-1")}
    p = ports(provider, rechecks)
    assert discover(p, [table.outcome_of(table.lookup("aws", "topocast/Reconcile"))]).status == "done"  # type: ignore[arg-type]
    return provider, rechecks, p


def test_not_steady_keeps_its_place_and_is_rechecked_until_it_runs_again(placed: Any) -> None:
    provider, rechecks, p = placed
    provider.state["a"] = ("moving", "")
    out = discover(p, [host_event()])
    assert out.status == "done" and fabric(p, "a") == ["leaf-1", "spine"]
    assert rechecks.sent == [([("a", "compute.instances.hostError")], 1, 45.0, rechecks.sent[0][3])]
    assert out.detail["follow"]["waiting"] == ["a"]

    provider.state["a"] = ("running", "leaf-9")
    discover(p, [Recheck("topocast/Recheck", (("a", "compute.instances.hostError"),), 1, "c1", "r1")])
    assert fabric(p, "a") == ["leaf-9", "spine"] and len(rechecks.sent) == 1  # steady: no further re-check


def test_at_the_bound_a_still_moving_instance_is_kept_and_counted(placed: Any) -> None:
    provider, rechecks, p = placed
    provider.state["a"] = ("moving", "")
    discover(p, [host_event()])
    discover(p, [Recheck("topocast/Recheck", (("a", "compute.instances.hostError"),), 1, "c1", "r1")])
    assert [s[1] for s in rechecks.sent] == [1, 2]
    out = discover(p, [Recheck("topocast/Recheck", (("a", "compute.instances.hostError"),), 2, "c1", "r2")])
    assert provider.reads[-1][0].final  # the provider is told it is the last read
    assert len(rechecks.sent) == 2 and fabric(p, "a") == ["leaf-1", "spine"]
    assert out.detail["follow"]["kept_at_bound"] == ["a"]
    assert p.metrics["follow_bound_reached"] == 1 and p.metrics["follow_unsettled_kept"] == 1


def test_a_redelivered_event_asks_for_the_same_recheck_and_a_new_event_for_a_new_one(placed: Any) -> None:
    provider, rechecks, p = placed
    provider.state["a"] = ("moving", "")
    discover(p, [host_event(event_id="e1")])
    discover(p, [host_event(event_id="e1")])  # the platform redelivered it
    discover(p, [host_event(event_id="e2")])  # a later host error of the same VM
    dedups = [s[3] for s in rechecks.sent]
    assert dedups[0] == dedups[1] != dedups[2]


def test_without_a_recheck_port_one_read_decides(placed: Any) -> None:
    provider, _, _ = placed
    p = ports(provider, None)
    provider.state["a"] = ("moving", "")
    discover(p, [table.outcome_of(table.lookup("aws", "topocast/Reconcile"))])  # type: ignore[arg-type]
    discover(p, [host_event()])
    assert provider.reads[-1][0].final and p.metrics["follow_rechecks"] == 0


def test_a_recheck_for_another_cluster_is_ignored(placed: Any) -> None:
    provider, _, p = placed
    out = discover(p, [Recheck("topocast/Recheck", (("a", "k"),), 1, "other", "r1")])
    assert out.reason == "nothing to discover" and provider.reads == []


class CapturingSqs:
    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []

    def send_message(self, **kwargs: Any) -> dict[str, Any]:
        self.messages.append(kwargs)
        return {"MessageId": "m1"}


def test_the_aws_recheck_is_a_delayed_message_on_the_events_queue_that_parses_to_its_row() -> None:
    sqs = CapturingSqs()
    SqsRechecks("c1", "https://sqs.example/events", sqs).schedule([(IID, "x/y")], 3, 1200.0, "d1")
    (msg,) = sqs.messages
    assert msg["QueueUrl"] == "https://sqs.example/events" and msg["DelaySeconds"] == 900  # the SQS maximum
    got = parse_event(msg["MessageBody"])
    assert got == Recheck("topocast/Recheck", ((IID, "x/y"),), 3, "c1", "recheck-d1")
    row = table.lookup("aws", got.kind)
    assert row is not None and (row.action, row.follow, row.route) == ("upsert", True, "recheck")


def test_recheck_bodies_explain_as_upserts(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    from topocast.cli.events import explain

    aws = tmp_path / "aws.json"
    detail = {"cluster": "c1", "attempt": 2, "instances": [{"instance": IID, "kind": "k"}]}
    aws.write_text(json.dumps({"source": "topocast", "detail-type": "Recheck", "detail": detail}))
    gcp = tmp_path / "gcp.json"
    data = {"cluster": "c1", "attempt": 1, "instances": [{"instance": "p/us-central1-a/vm-1", "kind": "k"}]}
    gcp.write_text(json.dumps({"specversion": "1.0", "type": "dev.topocast.recheck.v1", "source": "//t", "id": "1",
                               "data": data}))  # fmt: skip
    assert explain(aws) == 0 and explain(gcp) == 0
    lines = [json.loads(ln) for ln in capsys.readouterr().out.splitlines()]
    assert [(ln["kind"], ln["action"], ln["instances"]) for ln in lines] == [
        ("topocast/Recheck", "upsert", [IID]),
        ("dev.topocast.recheck.v1", "upsert", ["p/us-central1-a/vm-1"]),
    ]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"source": "topocast", "detail-type": "Recheck", "detail": {"attempt": 0}}))
    assert explain(bad) == 2
