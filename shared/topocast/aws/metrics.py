"""The pipeline's metrics as CloudWatch sees them: EMF names, and the Metrics port that emits them.

The names in :mod:`topocast.app.metrics` are cloud-neutral; :data:`EMF_NAMES` gives each its CloudWatch
name (the alarms in ``infra/terraform/modules/aws`` use these). A publisher's result reports its counts
under the same names (:data:`topocast.app.metrics.PUBLISHER_METRICS`), so what the Kubernetes publisher
calls ``Drift`` is ``Drift`` in CloudWatch too.
"""

from __future__ import annotations

from collections.abc import Callable

from topocast.app import metrics as m
from topocast.app.metrics import MetricCounts

__all__ = ["EMF_NAMES", "AwsMetrics"]

#: metric -> CloudWatch metric name
EMF_NAMES = {
    m.EVENTS: "EventsReceived",
    m.MALFORMED: "MalformedEvents",
    m.IGNORED: "IgnoredEvents",
    m.NOTED: "NotedEvents",
    m.DISCOVER_RUNS: "DiscoverRuns",
    m.DISCOVER_FAILURES: "DiscoverFailures",
    m.API_CALLS: "Ec2ApiCalls",
    m.NODES: "Nodes",
    m.NODES_WITHOUT_TOPOLOGY: "NodesWithoutTopology",
    m.NODES_SET_ASIDE: "NodesSetAside",
    m.GENERATIONS: "GraphGenerations",
    m.HEALED: "GraphsHealed",
    m.FOLLOW_RECHECKS: "FollowRechecks",
    m.FOLLOW_BOUND_REACHED: "FollowBoundReached",
    m.FOLLOW_UNSETTLED_KEPT: "FollowUnsettledKept",
    m.RENDERS: "Renders",
    m.RENDER_FAILURES: "RenderFailures",
    m.RENDER_DEAD_LETTERED: "RenderDeadLettered",
    m.DEBOUNCE_STATE_RESETS: "DebounceStateResets",
    m.PUBLISHES: "Publishes",
    m.HELD: "PublishHeld",
    m.PUBLISH_INCOMPLETE: "PublishIncomplete",
    m.QUARANTINED: "QuarantinedUploads",
    **m.REPORTED_AS,  # Drift, NodesPatched, NodesRefused, ... as the publisher reports them
}


class AwsMetrics:
    """:class:`~topocast.ports.protocols.Metrics`: counts in-process (``counts``) and, inside a Lambda
    invocation, as CloudWatch EMF metrics (``sink`` is set by the handlers' Powertools wrapper)."""

    def __init__(self) -> None:
        self.counts = MetricCounts()
        self.sink: Callable[[str, float], None] | None = None

    def count(self, name: str, value: float = 1) -> None:
        self.counts.count(name, value)
        if self.sink is not None:
            self.sink(EMF_NAMES.get(name, name), value)
