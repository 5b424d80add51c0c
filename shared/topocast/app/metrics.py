"""The pipeline's metrics, named once: every use case counts through the :class:`~topocast.ports.protocols.Metrics`
port. The names are cloud-neutral; AWS mirrors them as CloudWatch EMF metrics under its own names
(:data:`topocast.aws.metrics.EMF_NAMES`), GCP logs them per event.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Iterable, Mapping

from topocast.ports.protocols import Metrics

__all__ = [
    "API_CALLS",
    "DEBOUNCE_STATE_RESETS",
    "DISCOVER_FAILURES",
    "DISCOVER_RUNS",
    "DRIFT",
    "EVENTS",
    "FOLLOW_BOUND_REACHED",
    "FOLLOW_RECHECKS",
    "FOLLOW_UNSETTLED_KEPT",
    "GENERATIONS",
    "HEALED",
    "HELD",
    "IGNORED",
    "MALFORMED",
    "NODES",
    "NODES_REFUSED",
    "NODES_SET_ASIDE",
    "NODES_WITHOUT_TOPOLOGY",
    "NOTED",
    "PUBLISHED_NODES_PATCHED",
    "PUBLISHER_API_REQUESTS",
    "PUBLISHER_METRICS",
    "PUBLISHER_OBJECTS_APPLIED",
    "PUBLISHER_OBJECTS_DELETED",
    "PUBLISHER_THROTTLED",
    "PUBLISHES",
    "PUBLISH_INCOMPLETE",
    "QUARANTINED",
    "RENDERS",
    "RENDER_DEAD_LETTERED",
    "RENDER_FAILURES",
    "REPORTED_AS",
    "MetricCounts",
    "report_publisher_metrics",
    "report_quarantined",
]

#: events that ask for discovery (instance changes, reconciles); Noted / Ignored count on their own
EVENTS = "events"
MALFORMED = "malformed"
IGNORED = "ignored"
NOTED = "noted"
DISCOVER_RUNS = "discover_runs"
DISCOVER_FAILURES = "discover_failures"
API_CALLS = "api_calls"
NODES = "nodes"
NODES_WITHOUT_TOPOLOGY = "nodes_without_topology"
#: nodes the last discovery set aside (kept without topology or left out: their data breaks a rule of the graph)
NODES_SET_ASIDE = "nodes_set_aside"
GENERATIONS = "generations"
#: followed instances (host maintenance, restarts) not steady yet, re-read later
FOLLOW_RECHECKS = "follow_rechecks"
#: followed instances read at the last re-check the bound allows (placed, removed or kept, as they were)
FOLLOW_BOUND_REACHED = "follow_bound_reached"
#: ... of which still in transition: kept at their last place (warning; the next event or reconcile decides)
FOLLOW_UNSETTLED_KEPT = "follow_unsettled_kept"
#: a corrupt stored graph replaced from a fresh full discovery
HEALED = "healed"
RENDERS = "renders"
#: a debounce state record that could not be read, reset (a render of the latest generation is armed at once)
DEBOUNCE_STATE_RESETS = "debounce_state_resets"
RENDER_FAILURES = "render_failures"
#: a render that kept failing and was given up (alarm: the last publish stays)
RENDER_DEAD_LETTERED = "render_dead_lettered"
PUBLISHES = "publishes"
HELD = "held"
PUBLISH_INCOMPLETE = "publish_incomplete"
#: what a publisher's result reports (``result.metrics``; the Kubernetes publisher's): objects and node
#: labels found hand-edited and repaired, writes, requests, requests the API server throttled (429)
DRIFT = "drift"
PUBLISHED_NODES_PATCHED = "nodes_patched"
#: nodes the API server refused to label (admission policy, validation): the rest were labelled, the publish
#: is done; the refused ones are in the log line and stay unlabelled until the cause is fixed
NODES_REFUSED = "nodes_refused"
PUBLISHER_OBJECTS_APPLIED = "objects_applied"
PUBLISHER_OBJECTS_DELETED = "objects_deleted"
PUBLISHER_API_REQUESTS = "publisher_api_requests"
PUBLISHER_THROTTLED = "publisher_throttled"
#: an on-prem upload that did not parse, moved to quarantine/ (alarm: that host's last good upload stands in)
QUARANTINED = "quarantined_uploads"

#: the name a publisher's ``result.metrics`` uses (the Kubernetes publisher's) -> the pipeline's metric
PUBLISHER_METRICS = {
    "Drift": DRIFT,
    "NodesPatched": PUBLISHED_NODES_PATCHED,
    "NodesRefused": NODES_REFUSED,
    "ObjectsApplied": PUBLISHER_OBJECTS_APPLIED,
    "ObjectsDeleted": PUBLISHER_OBJECTS_DELETED,
    "ApiRequests": PUBLISHER_API_REQUESTS,
    "Throttled": PUBLISHER_THROTTLED,
}
#: the pipeline's metric -> the name a publisher's result reports it under
REPORTED_AS = {name: reported for reported, name in PUBLISHER_METRICS.items()}

#: gauges: the latest value, not a sum
GAUGES = frozenset({NODES, NODES_WITHOUT_TOPOLOGY, NODES_SET_ASIDE})


class MetricCounts(Counter[str]):
    """What one process did (thread-safe); ``counts.renders`` reads ``counts["renders"]``."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()

    def count(self, name: str, value: float = 1) -> None:
        with self._lock:
            if name in GAUGES:
                self[name] = int(value)
            else:
                self[name] += int(value)

    def __getattr__(self, name: str) -> int:
        if name.startswith("_"):
            raise AttributeError(name)
        return self[name]


def report_quarantined(quarantined: Iterable[tuple[str, str]], metrics: Metrics) -> None:
    """Log and count each upload that was moved to quarantine (uri, reason)."""
    for uri, reason in quarantined:
        logging.getLogger("topocast").error(
            "quarantined upload %s (the host's last good upload stands in): %s", uri, reason
        )
        metrics.count(QUARANTINED)


def report_publisher_metrics(results: Iterable[object], metrics: Metrics) -> None:
    """Count what each publisher's result reports in ``metrics`` (the Kubernetes publisher's ``Drift``...).

    A result without ``metrics`` (SSM, GCS) counts nothing; a name not in :data:`PUBLISHER_METRICS`
    is skipped, so a publisher cannot invent a metric the alarms do not know.
    """
    for result in results:
        reported = getattr(result, "metrics", None)
        if not isinstance(reported, Mapping):
            continue
        for emf_name, value in reported.items():
            name = PUBLISHER_METRICS.get(emf_name)
            if name is not None and value:
                metrics.count(name, value)
