"""The GCP composition root: ``TOPOCAST_*`` settings -> clients, stores and the use cases' ports.

Cloud Storage holds every piece of state (graph generations, manifests, guard records, debounce
state, discover-window markers), Cloud Tasks carries timers and hand-offs. Credentials are
application-default (the function's service account); clients are built once per process and
per configuration (:func:`topocast.gcp.handlers.runtime`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from topocast.app.metrics import MetricCounts, report_quarantined
from topocast.app.ports import DiscoverPorts, Publisher, PublishPorts, RenderPorts
from topocast.config import Settings
from topocast.errors import TopocastError
from topocast.gcp.gcs import GcsObjects
from topocast.gcp.gcs_artifacts import GcsArtifactStore, GcsPublishState
from topocast.gcp.gcs_store import GcsGraphStore, cluster_base
from topocast.gcp.tasks import TaskQueue, task_id
from topocast.pipeline.debounce import Decision
from topocast.pipeline.debounce_runner import DebounceRunner
from topocast.providers import Provider, ProviderInputs, build_provider
from topocast.publish import PublisherInputs, build_publishers, register_publisher

__all__ = ["STATS", "CloudTasksHandoff", "CloudTasksRechecks", "GcpRuntime", "NoDebouncer", "build"]

# Slurm files as Cloud Storage objects for `topocast pull --source gcs://...`
register_publisher("gcs", "topocast.gcp.gcs_publish:from_inputs")

#: what the functions did in this process (the demo and tests read it); the Metrics port of every runtime
STATS: MetricCounts = MetricCounts()


class NoDebouncer:
    """Stands in when no task queue / render URL is configured: changes are stored, nothing renders."""

    reason = "no debouncer configured (TOPOCAST_TASK_QUEUE / TOPOCAST_RENDER_URL)"

    def note_change(self, cluster: str, generation: int) -> Decision:
        return Decision("idle", reason=self.reason)

    def on_timer(self, body: Any) -> Decision:
        raise TopocastError(f"render got a timer but {self.reason}")

    def mark_rendered(self, cluster: str, decision: Decision, generation: int) -> Decision:
        return Decision("idle", reason=self.reason)

    def render_failed(self, cluster: str, decision: Decision, *, max_failures: int) -> Decision:
        return Decision("drop", reason=self.reason)


class CloudTasksHandoff:
    """:class:`~topocast.app.ports.PublishHandoff`: a named task for the publish function (deduplicated)."""

    def __init__(self, cluster: str, queue: TaskQueue | None, url: str | None) -> None:
        self.cluster, self.queue, self.url = cluster, queue, url

    def request_publish(self, generation: int, reason: str, dedup: str) -> None:
        from topocast.gcp.events import PUBLISH

        if self.queue is None or not self.url:
            raise TopocastError("publish hand-off needs TOPOCAST_TASK_QUEUE and TOPOCAST_PUBLISH_URL")
        body = {"cluster": self.cluster, "generation": generation, "reason": reason}
        self.queue.send_event(self.url, PUBLISH, body, name=task_id("publish", self.cluster, generation, dedup))


class CloudTasksRechecks:
    """:class:`~topocast.app.ports.Rechecks`: a named ``dev.topocast.recheck.v1`` task to discover with a
    schedule time, on the queue the discover windows and timers use (the name deduplicates a redelivery)."""

    def __init__(self, cluster: str, queue: TaskQueue, url: str) -> None:
        self.cluster, self.queue, self.url = cluster, queue, url

    def schedule(self, instances: Sequence[tuple[str, str]], attempt: int, delay: float, dedup: str) -> str:
        from topocast.gcp.events import RECHECK

        body = {
            "cluster": self.cluster,
            "attempt": attempt,
            "instances": [{"instance": i, "kind": k} for i, k in instances],
        }
        name = task_id("recheck", self.cluster, attempt, dedup)
        return self.queue.send_event(self.url, RECHECK, body, name=name, delay=delay)


@dataclass
class GcpRuntime:
    settings: Settings
    objects: GcsObjects
    graphs: GcsGraphStore
    artifacts: GcsArtifactStore
    publish_state: GcsPublishState
    queue: TaskQueue | None
    debouncer: DebounceRunner | NoDebouncer
    compute_factory: Callable[[], Any]
    metrics: MetricCounts = field(default_factory=lambda: STATS)
    _compute: Any = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    #: discover windows this process already created (or found) a task for: no second Cloud Tasks call
    armed_windows: set[int] = field(default_factory=set, repr=False)

    @classmethod
    def from_settings(cls, settings: Settings, *, storage: Any = None, tasks: Any = None) -> GcpRuntime:
        from topocast.gcp import clients
        from topocast.gcp.debounce import gcp_debouncer

        settings.require("bucket", "gcp_project")
        storage = storage if storage is not None else clients.storage_client(settings.gcp_project)
        objects = GcsObjects(settings.bucket or "", storage)
        queue = None
        debouncer: DebounceRunner | NoDebouncer = NoDebouncer()
        if settings.task_queue:
            tasks = tasks if tasks is not None else clients.tasks_client(settings.cloudtasks_endpoint)
            queue = TaskQueue(settings.task_queue, tasks, service_account=settings.tasks_service_account)
            if settings.render_url:
                debouncer = gcp_debouncer(
                    objects, settings.prefix, queue, settings.render_url,
                    quiet=settings.debounce_quiet, max_wait=settings.debounce_max_wait,
                    leading_edge=settings.debounce_leading_edge,
                )  # fmt: skip
        return cls(
            settings=settings,
            objects=objects,
            graphs=GcsGraphStore(objects, settings.prefix, settings.cluster),
            artifacts=GcsArtifactStore(objects, settings.prefix, settings.cluster),
            publish_state=GcsPublishState(objects, settings.prefix, settings.cluster),
            queue=queue,
            debouncer=debouncer,
            compute_factory=lambda: clients.compute_client(settings.compute_endpoint),
        )

    def compute(self) -> Any:
        with self._lock:
            if self._compute is None:
                self._compute = self.compute_factory()
            return self._compute

    def pending_prefix(self) -> str:
        return cluster_base(self.settings.prefix, self.settings.cluster, "pending") + "/"

    # ----- discovery and publishers through their registries -----------------------------------
    def _client(self, service: str) -> Any:
        if service == "compute":
            return self.compute()
        if service == "k8s-nodes":  # the k8s-labels provider: the cluster the Kubernetes publisher reaches
            from topocast.k8s.node_source import lister_from_options

            return lister_from_options(self.settings.k8s_options)
        raise TopocastError(f"the GCP functions supply no {service!r} client")

    def _read_text(self, uri: str) -> str:
        """An operator-maintained file: ``gs://bucket/key`` in the pipeline's bucket."""
        bucket, _, key = uri.removeprefix("gs://").partition("/")
        got = self.objects.get(key) if uri.startswith("gs://") and bucket == self.settings.bucket else None
        if got is None:
            raise TopocastError(f"TOPOCAST_DOMAINS_URI {uri!r}: not an object of gs://{self.settings.bucket}/")
        return got.data.decode("utf-8", "replace")

    def _uploads(self) -> Mapping[str, bytes]:
        """Each host's upload; a bad one is quarantined and the host's last good upload stands in."""
        from topocast.pipeline.objects import read_good_uploads
        from topocast.providers import ibnetdiscover

        s = self.settings
        regex = s.provider_options().get("host_regex")
        # the same parse and build as discovery: an upload discovery cannot use is quarantined here
        uploads = read_good_uploads(
            self.objects,
            cluster_base(s.prefix, s.cluster, "uploads"),
            lambda data, uri: ibnetdiscover.check_upload(data, uri, host_regex=regex),
        )
        report_quarantined(uploads.quarantined, self.metrics)
        return uploads.texts

    def provider(self) -> Provider:
        """The configured topology source (``TOPOCAST_PROVIDER``: gcp, ibnetdiscover, netq, k8s-labels)."""
        s = self.settings
        return build_provider(s.provider, ProviderInputs(s.cluster, s.provider_options(), self._client,
                                                         self._uploads, self._read_text), s.overlays)  # fmt: skip

    def publishers(self) -> Sequence[Publisher]:
        """The publishers named in ``TOPOCAST_PUBLISHERS`` (gcs, kubernetes)."""
        inputs = PublisherInputs(self.settings, lambda g: self.graphs.get(g).graph, self._client, self.objects)
        return build_publishers(self.settings.publishers, inputs)

    def handoff(self) -> CloudTasksHandoff:
        return CloudTasksHandoff(self.settings.cluster, self.queue, self.settings.publish_url)

    def rechecks(self) -> CloudTasksRechecks | None:
        """Delayed re-checks are tasks to discover (None without a task queue and TOPOCAST_DISCOVER_URL)."""
        url = self.settings.discover_url
        return CloudTasksRechecks(self.settings.cluster, self.queue, url) if self.queue is not None and url else None

    # ----- one bundle per use case --------------------------------------------------------------
    def discover_ports(self) -> DiscoverPorts:
        s = self.settings
        return DiscoverPorts(
            s.cluster, self.graphs, self.provider, self.debouncer, self.publish_state, self.artifacts,
            self.handoff(), self.metrics, s.full_scan_threshold, self.rechecks(), s.follow_rechecks,
            s.follow_interval,
            set_aside_limit=s.guard_max_loss,
        )  # fmt: skip

    def render_ports(self) -> RenderPorts:
        s = self.settings
        return RenderPorts(
            s.cluster, self.graphs, self.artifacts, self.publish_state, self.debouncer, self.handoff(),
            self.metrics, s.formats, s.render_options,
        )  # fmt: skip

    def publish_ports(self) -> PublishPorts:
        s = self.settings
        return PublishPorts(
            s.cluster, self.graphs, self.artifacts, self.publish_state, self.publishers,
            _Override(self.publish_state), self.metrics, s.guard_max_loss,
        )  # fmt: skip


@dataclass(frozen=True)
class _Override:
    state: GcsPublishState

    def allowed_generation(self) -> str | None:
        return self.state.read_override()


def build(settings: Settings, **clients: Any) -> GcpRuntime:
    """The composition root (``clients``: ``storage=``, ``tasks=`` to reuse existing ones)."""
    return GcpRuntime.from_settings(settings, **clients)
