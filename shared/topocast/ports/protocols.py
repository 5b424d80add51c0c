"""The ports the use cases run against: small Protocols each cloud implements once.

Every port of the three use cases is declared here and only here: the stores (:class:`GraphStore`,
:class:`ArtifactStore`, :class:`PublishState`; their bucket implementations are in
:mod:`topocast.pipeline`, over the :class:`~topocast.pipeline.objects.ObjectStore` a cloud supplies),
the :class:`Publisher` every publish target implements (:mod:`topocast.publish`, ``topocast.aws``,
``topocast.gcp``), and what only a cloud can do (:class:`Debouncer`, :class:`PublishHandoff`,
:class:`Rechecks`, :class:`GuardOverride`, :class:`Metrics`).

A cloud's composition root (``topocast.aws.root``, ``topocast.gcp.root``) builds one bundle per
use case through :class:`topocast.app.wiring.CompositionRoot`; each bundle holds exactly what its
use case touches, so a function only builds (and its role only needs) the clients of its own stage.
The bundles are built by keyword only: two numbers of the same type cannot swap unnoticed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from topocast.model.graph import TopologyGraph
from topocast.ports.debounce import Decision, Timer
from topocast.ports.records import HoldRecord, Manifest, PublishedRecord, PublishResult, StoredGraph, WriteResult
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
    """Versioned storage of one cluster's graph (:class:`topocast.pipeline.store.ObjectGraphStore` over S3 or GCS)."""

    def latest(self) -> StoredGraph | None:
        """The newest generation, or None when nothing was ever written."""
        ...

    def get(self, generation: int) -> StoredGraph:
        """One generation; :class:`~topocast.pipeline.store.GenerationNotFoundError` if absent,
        InvalidGraphError if corrupt."""
        ...

    def write_if_changed(self, graph: TopologyGraph, *, expected_generation: int | None) -> WriteResult:
        """Store ``graph`` as generation latest+1 unless its content equals the latest.

        ``expected_generation`` is the generation the caller read (None: it saw an
        empty store). Raises :class:`~topocast.errors.StaleGenerationError` when the store moved on.
        """
        ...

    def replace_unreadable(self, graph: TopologyGraph) -> WriteResult:
        """Heal a store whose latest generation cannot be read, with a freshly discovered ``graph``."""
        ...


class ArtifactStore(Protocol):
    """Where rendered files and manifests live (:class:`topocast.pipeline.artifacts.ObjectArtifactStore`)."""

    def put_artifact(self, generation: int, filename: str, content: bytes, media_type: str) -> str:
        """Store one file; returns its URI."""
        ...

    def get_artifact(self, generation: int, filename: str) -> bytes: ...

    def artifact_uri(self, generation: int, filename: str) -> str: ...

    def put_manifest(self, manifest: Manifest) -> bool:
        """Store the generation's manifest, then move "latest" to it unless latest is newer.

        Returns whether "latest" now points at this manifest.
        """
        ...

    def get_manifest(self, generation: int) -> Manifest: ...

    def latest_manifest(self) -> Manifest | None: ...


class PublishState(Protocol):
    """Where the guard's memory lives (:class:`topocast.pipeline.publish_state.ObjectPublishState` in a bucket)."""

    def load_published(self) -> PublishedRecord | None: ...
    def save_published(self, record: PublishedRecord) -> None: ...
    def load_hold(self) -> HoldRecord | None: ...
    def save_hold(self, hold: HoldRecord) -> None: ...
    def clear_hold(self) -> None: ...


class Publisher(Protocol):
    """A publish target: manifest + file bytes in, "does the target now serve it?" out.

    Implementations (:mod:`topocast.publish`, ``topocast.aws.ssm_publish``, ``topocast.gcp.gcs_publish``)
    must be idempotent (publishing the same manifest twice is a no-op the second time, so a retried
    publish redoes only what is not done) and must never move a target back to an older generation.
    """

    name: str

    def publish(self, manifest: Manifest, artifacts: Mapping[str, bytes]) -> PublishResult:
        """Push ``artifacts`` (file name -> bytes, as listed in ``manifest``) to the target."""
        ...


class Debouncer(Protocol):
    """:class:`topocast.pipeline.debounce_runner.DebounceRunner` over the cloud's state store and timers."""

    def note_change(self, cluster: str, generation: int) -> Decision: ...
    def on_timer(self, timer: Timer) -> Decision: ...
    def mark_rendered(self, cluster: str, decision: Decision, generation: int) -> Decision: ...
    def render_failed(self, cluster: str, decision: Decision) -> Decision:
        """The render ``decision`` started failed: ``retry``, or ``drop`` after the policy's
        ``render_attempts`` failures in a row."""
        ...


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


@dataclass(frozen=True, kw_only=True)
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
    # the numbers below are settings (topocast.config holds their defaults; CompositionRoot passes them)
    #: changed instances in one batch above which a full discovery is cheaper (``TOPOCAST_FULL_SCAN_THRESHOLD``)
    full_scan_threshold: int
    #: delayed re-reads of followed instances (None: this runtime cannot deliver later; one read decides)
    rechecks: Rechecks | None
    #: re-checks of a followed instance at most (``TOPOCAST_FOLLOW_RECHECKS``) ...
    follow_rechecks: int
    #: ... this far apart (``TOPOCAST_FOLLOW_INTERVAL_SECONDS``)
    follow_interval: float
    #: share of the nodes a discovery may set aside before it fails (the guard's ``TOPOCAST_GUARD_MAX_LOSS``)
    set_aside_limit: float


@dataclass(frozen=True, kw_only=True)
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


@dataclass(frozen=True, kw_only=True)
class PublishPorts:
    cluster: str
    graphs: GraphStore
    artifacts: ArtifactStore
    publish_state: PublishState
    #: the configured publishers, built on first use (the registry: topocast.publish)
    publishers: Callable[[], Sequence[Publisher]]
    override: GuardOverride
    metrics: Metrics
    #: share of the published nodes a publish may lose (``TOPOCAST_GUARD_MAX_LOSS``)
    guard_max_loss: float
