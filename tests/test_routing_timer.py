"""A debounce timer's delivery is parsed once, where it enters (``app.routing.timer``), into a typed
:class:`~topocast.ports.debounce.Timer`: the debouncer only ever sees that value, whichever cloud delivered it
(the SQS record body is JSON text, the Cloud Tasks event's data a parsed object); a body that is no timer is
dropped with the parser's reason and counted ``malformed``; another cluster's timer is ignored."""

from __future__ import annotations

import json

import pytest
from memory_stores import MemoryArtifactStore, MemoryGraphStore, MemoryPublishState

from topocast.app import routing
from topocast.app.metrics import MetricCounts
from topocast.ports.debounce import Decision, Timer
from topocast.ports.protocols import RenderPorts
from topocast.renderers import RenderOptions

BODY = {"kind": "topocast.debounce.timer", "cluster": "c1", "timer_id": "t1", "armed_at": 100, "due_at": 115.5}


class RecordingDebouncer:
    """A :class:`~topocast.ports.protocols.Debouncer` that keeps the timers it is given and never renders."""

    def __init__(self) -> None:
        self.timers: list[Timer] = []

    def note_change(self, cluster: str, generation: int) -> Decision:
        return Decision("idle")

    def on_timer(self, timer: Timer) -> Decision:
        self.timers.append(timer)
        return Decision("wait", reason="not due yet")

    def mark_rendered(self, cluster: str, decision: Decision, generation: int) -> Decision:
        return Decision("idle")

    def render_failed(self, cluster: str, decision: Decision) -> Decision:
        return Decision("drop")


def _ports(debouncer: RecordingDebouncer, metrics: MetricCounts) -> RenderPorts:
    return RenderPorts(
        cluster="c1", graphs=MemoryGraphStore(), artifacts=MemoryArtifactStore(), publish_state=MemoryPublishState(),
        debouncer=debouncer, handoff=None, metrics=metrics, formats=["slurm-tree"],  # type: ignore[arg-type]
        render_options=RenderOptions(),
    )  # fmt: skip


@pytest.mark.parametrize("delivered", [json.dumps(BODY), json.dumps(BODY).encode(), BODY], ids=["sqs", "bytes", "gcp"])
def test_every_cloud_s_timer_reaches_the_debouncer_as_the_same_typed_timer(delivered: object) -> None:
    debouncer, metrics = RecordingDebouncer(), MetricCounts()
    outcome = routing.timer(_ports(debouncer, metrics), delivered)
    assert debouncer.timers == [Timer("c1", "t1", armed_at=100.0, due_at=115.5)]
    assert (outcome.status, outcome.reason) == ("done", "wait: not due yet")
    assert metrics["malformed"] == 0


@pytest.mark.parametrize(
    ("delivered", "reason"),
    [
        ("{not json", "timer message is not JSON (JSONDecodeError: Expecting property name enclosed in double quotes"),
        ({"kind": "topocast.recheck"}, "not a topocast.debounce.timer message: {'kind': 'topocast.recheck'}"),
        ({**BODY, "timer_id": 7}, "timer message lacks cluster/timer_id: "),
        ({**BODY, "armed_at": True}, "timer message armed_at is not a number: True"),
    ],
)
def test_a_body_that_is_no_timer_is_dropped_with_the_parser_s_reason_and_counted_malformed(
    delivered: object, reason: str
) -> None:
    debouncer, metrics = RecordingDebouncer(), MetricCounts()
    outcome = routing.timer(_ports(debouncer, metrics), delivered)
    assert outcome.status == "drop" and outcome.reason.startswith(reason), outcome.reason
    assert routing.is_rejected(outcome) and metrics["malformed"] == 1
    assert debouncer.timers == []  # never reached the debouncer


def test_another_cluster_s_timer_is_ignored_before_the_debouncer() -> None:
    debouncer, metrics = RecordingDebouncer(), MetricCounts()
    outcome = routing.timer(_ports(debouncer, metrics), {**BODY, "cluster": "c2"})
    assert (outcome.status, outcome.detail["action"]) == ("done", "ignored")
    assert "debounce timer for cluster 'c2'; this function serves c1" in outcome.reason
    assert (metrics["ignored"], metrics["malformed"], debouncer.timers) == (1, 0, [])
