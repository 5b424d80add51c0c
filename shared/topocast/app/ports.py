"""The ports the use cases run against: small Protocols each cloud implements once.

A cloud's composition root (``topocast.aws.root``, ``topocast.gcp.root``) builds one bundle per
use case from its settings; each bundle holds exactly what its use case touches, so a function
only builds (and its role only needs) the clients of its own stage.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from topocast.model.graph import TopologyGraph
from topocast.pipeline.artifacts import ArtifactStore
from topocast.pipeline.debounce import Decision
from topocast.pipeline.publish_stage import PublishState
from topocast.pipeline.publisher import Publisher
from topocast.pipeline.store import StoredGraph, WriteResult
from topocast.providers.base import Provider
from topocast.renderers.base import RenderOptions

__all__ = [
    "ArtifactStore",
    "Debouncer",
    "DiscoverPorts",
    "GraphStore",
    "GuardOverride",
    "Metrics",
    "PublishHandoff",
    "PublishPorts",
    "PublishState",
    "Publisher",
    "Rechecks",
    "RenderPorts",
]


class GraphStore(Protocol):
    """Graph generations (:class:`topocast.pipeline.store.ObjectGraphStore` over S3 or GCS)."""

    def latest(self) -> StoredGraph | None: ...
    def get(self, generation: int) -> StoredGraph: ...
    def write_if_changed(self, graph: TopologyGraph, *, expected_generation: int | None) -> WriteResult: ...
    def replace_unreadable(self, graph: TopologyGraph) -> WriteResult: ...


class Debouncer(Protocol):
    """:class:`topocast.pipeline.debounce_runner.DebounceRunner` over the cloud's state store and timers."""

    def note_change(self, cluster: str, generation: int) -> Decision: ...
    def on_timer(self, body: Any) -> Decision: ...
    def mark_rendered(self, cluster: str, decision: Decision, generation: int) -> Decision: ...
    def render_failed(self, cluster: str, decision: Decision, *, max_failures: int) -> Decision: ...


class PublishHandoff(Protocol):
    """Ask the publish function to publish ``generation`` (SQS message / Cloud Task)."""

    def request_publish(self, generation: int, reason: str, dedup: str) -> None:
        """``dedup`` names this request: senders that can deduplicate (Cloud Tasks names) send it once."""
        ...


class Rechecks(Protocol):
    """Deliver a :class:`~topocast.model.changes.Recheck` to discover later (SQS ``DelaySeconds`` / a Cloud Task)."""

    def schedule(self, instances: Sequence[tuple[str, str]], attempt: int, delay: float, dedup: str) -> str:
        """``instances``: (instance, kind) pairs; ``dedup`` names the request (Cloud Tasks sends it once).

        Returns how it went (``created`` / ``exists`` / ``sent``), for the outcome's detail."""
        ...


class GuardOverride(Protocol):
    """The operator's "let generation N through" value (env, SSM parameter, GCS object), or None."""

    def allowed_generation(self) -> str | None: ...


class Metrics(Protocol):
    """Counters and gauges named in :mod:`topocast.app.metrics`."""

    def count(self, name: str, value: float = 1) -> None: ...


@dataclass(frozen=True)
class DiscoverPorts:
    cluster: str
    graphs: GraphStore
    #: the configured topology source, built on first use (the registry: topocast.providers)
    provider: Callable[[], Provider]
    debouncer: Debouncer
    publish_state: PublishState
    artifacts: ArtifactStore
    handoff: PublishHandoff
    metrics: Metrics
    #: changed instances in one batch above which a full discovery is cheaper
    full_scan_threshold: int = 100
    #: delayed re-reads of followed instances (None: this runtime cannot deliver later; one read decides)
    rechecks: Rechecks | None = None
    #: re-checks of a followed instance at most (``TOPOCAST_FOLLOW_RECHECKS``) ...
    follow_rechecks: int = 6
    #: ... this far apart (``TOPOCAST_FOLLOW_INTERVAL_SECONDS``)
    follow_interval: float = 30.0
    #: share of the nodes a discovery may set aside before it fails (the guard's ``TOPOCAST_GUARD_MAX_LOSS``)
    set_aside_limit: float = 0.10


@dataclass(frozen=True)
class RenderPorts:
    cluster: str
    graphs: GraphStore
    artifacts: ArtifactStore
    publish_state: PublishState
    debouncer: Debouncer
    handoff: PublishHandoff
    metrics: Metrics
    formats: Sequence[str]
    render_options: RenderOptions
    #: renders of the same pending change that may fail in a row before it is dead-lettered
    render_attempts: int = 3


@dataclass(frozen=True)
class PublishPorts:
    cluster: str
    graphs: GraphStore
    artifacts: ArtifactStore
    publish_state: PublishState
    #: the configured publishers, built on first use (the registry: topocast.publish)
    publishers: Callable[[], Sequence[Publisher]]
    override: GuardOverride
    metrics: Metrics
    guard_max_loss: float = 0.10
