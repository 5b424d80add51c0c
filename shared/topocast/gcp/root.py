"""The GCP composition root: ``TOPOCAST_*`` settings -> clients, stores and the use cases' ports.

Cloud Storage holds every piece of state (graph generations, manifests, guard records, debounce
state, discover-window markers), Cloud Tasks carries timers and hand-offs. Credentials are
application-default (the function's service account). :class:`GcpRuntime` is built once per process
and per configuration (:func:`topocast.gcp.handlers.runtime`); it supplies the adapters, created on
first use, and :class:`~topocast.app.wiring.CompositionRoot` builds each stage's bundle from them.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from topocast.app.metrics import MetricCounts
from topocast.app.wiring import CompositionRoot
from topocast.config import Settings
from topocast.errors import TopocastError
from topocast.gcp.gcs import GcsObjects
from topocast.gcp.gcs_artifacts import GcsArtifactStore, GcsPublishState
from topocast.gcp.gcs_store import GcsGraphStore
from topocast.gcp.tasks import TaskQueue, task_id
from topocast.gcp.tasks import now as tasks_clock
from topocast.k8s.nodes_client import with_node_lister
from topocast.pipeline.debounce_runner import DebounceRunner
from topocast.pipeline.objects import cluster_base
from topocast.ports.debounce import Decision, Timer
from topocast.ports.protocols import Publisher
from topocast.providers import Provider, ProviderInputs, build_provider
from topocast.providers.base import no_client
from topocast.providers.gcp.api import ComputeApi
from topocast.publish import PublisherInputs, build_publishers, register_publisher

__all__ = ["STATS", "CloudTasksHandoff", "CloudTasksRechecks", "GcpRuntime", "GcsOverride", "NoDebouncer", "build"]

# Slurm files as Cloud Storage objects for `topocast pull --source gcs://...`
register_publisher("gcs", "topocast.gcp.gcs_publish:from_inputs")

#: what the functions did in this process (the demo and tests read it): the Metrics port of every
#: runtime, since one process may hold one runtime per configuration (and a retry meets a fresh one)
STATS: MetricCounts = MetricCounts()


class NoDebouncer:
    """Stands in when no task queue / render URL is configured: changes are stored, nothing renders."""

    reason = "no debouncer configured (TOPOCAST_TASK_QUEUE / TOPOCAST_RENDER_URL)"

    def note_change(self, cluster: str, generation: int) -> Decision:
        return Decision("idle", reason=self.reason)

    def on_timer(self, timer: Timer) -> Decision:
        raise TopocastError(f"render got a timer but {self.reason}")

    def mark_rendered(self, cluster: str, decision: Decision, generation: int) -> Decision:
        return Decision("idle", reason=self.reason)

    def render_failed(self, cluster: str, decision: Decision) -> Decision:
        return Decision("drop", reason=self.reason)


class CloudTasksHandoff:
    """:class:`~topocast.ports.protocols.PublishHandoff`: a named task for the publish function (deduplicated)."""

    def __init__(self, cluster: str, queue: TaskQueue | None, url: str | None) -> None:
        self.cluster, self.queue, self.url = cluster, queue, url

    def request_publish(self, generation: int, reason: str, dedup: str) -> None:
        from topocast.gcp.events import PUBLISH

        if self.queue is None or not self.url:
            raise TopocastError("publish hand-off needs TOPOCAST_TASK_QUEUE and TOPOCAST_PUBLISH_URL")
        body = {"cluster": self.cluster, "generation": generation, "reason": reason}
        self.queue.send_event(self.url, PUBLISH, body, name=task_id("publish", self.cluster, generation, dedup))


class CloudTasksRechecks:
    """:class:`~topocast.ports.protocols.Rechecks`: a named ``dev.topocast.recheck.v1`` task to discover with a
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


class GcpRuntime(CompositionRoot):
    """Clients and adapters for one cluster, created on first use (``storage`` / ``tasks``: reuse these)."""

    def __init__(self, settings: Settings, *, storage: Any = None, tasks: Any = None) -> None:
        settings.require("bucket", "gcp_project")
        self.settings = settings
        self.metrics: MetricCounts = STATS
        self._storage, self._tasks = storage, tasks
        self._compute: ComputeApi | None = None
        self._lock = threading.Lock()
        #: discover windows this process already created (or found) a task for: no second Cloud Tasks call
        self.armed_windows: set[int] = set()

    @property
    def counters(self) -> MetricCounts:
        return self.metrics

    # ----- clients ------------------------------------------------------------------------------
    @cached_property
    def storage(self) -> Any:
        from topocast.gcp import clients

        return self._storage if self._storage is not None else clients.storage_client(self.settings.gcp_project)

    def compute(self) -> ComputeApi:
        """The Compute Engine client (a provider's zone reads may ask for it from several threads)."""
        from topocast.providers.gcp.sdk import compute_client

        with self._lock:
            if self._compute is None:
                self._compute = compute_client(self.settings.compute_endpoint)
            return self._compute

    @cached_property
    def queue(self) -> TaskQueue | None:
        """The Cloud Tasks queue of timers, windows and hand-offs (None without ``TOPOCAST_TASK_QUEUE``)."""
        from topocast.gcp import clients

        s = self.settings
        if not s.task_queue:
            return None
        tasks = self._tasks if self._tasks is not None else clients.tasks_client(s.cloudtasks_endpoint)
        return TaskQueue(s.task_queue, tasks, service_account=s.tasks_service_account)

    # ----- adapters -----------------------------------------------------------------------------
    @cached_property
    def objects(self) -> GcsObjects:
        return GcsObjects(self.settings.bucket or "", self.storage)

    @cached_property
    def graphs(self) -> GcsGraphStore:
        return GcsGraphStore(self.objects, self.settings.prefix, self.settings.cluster)

    @cached_property
    def artifacts(self) -> GcsArtifactStore:
        return GcsArtifactStore(self.objects, self.settings.prefix, self.settings.cluster)

    @cached_property
    def publish_state(self) -> GcsPublishState:
        return GcsPublishState(self.objects, self.settings.prefix, self.settings.cluster)

    @cached_property
    def debouncer(self) -> DebounceRunner | NoDebouncer:
        from topocast.gcp.debounce import gcp_debouncer

        s = self.settings
        if self.queue is None or not s.render_url:
            return NoDebouncer()
        return gcp_debouncer(
            self.objects,
            s.prefix,
            self.queue,
            s.render_url,
            self.debounce_policy,
            on_reset=self.debounce_state_reset,
            clock=tasks_clock,
        )

    @cached_property
    def handoff(self) -> CloudTasksHandoff:
        return CloudTasksHandoff(self.settings.cluster, self.queue, self.settings.publish_url)

    @cached_property
    def rechecks(self) -> CloudTasksRechecks | None:
        """Delayed re-checks are tasks to discover (None without a task queue and TOPOCAST_DISCOVER_URL)."""
        url = self.settings.discover_url
        return CloudTasksRechecks(self.settings.cluster, self.queue, url) if self.queue is not None and url else None

    @cached_property
    def override(self) -> GcsOverride:
        return GcsOverride(self.publish_state)

    def pending_prefix(self) -> str:
        return cluster_base(self.settings.prefix, self.settings.cluster, "pending") + "/"

    # ----- discovery and publishers through their registries -----------------------------------
    def _client(self, service: str) -> Any:
        if service == "compute":
            return self.compute()
        if service == "compute-sub-blocks":  # providers.gcp.provider SUB_BLOCKS_CLIENT (sub_block_health)
            from topocast.providers.gcp.sdk import sub_blocks_client

            return sub_blocks_client(self.settings.compute_endpoint)
        return no_client(service)  # one line, like every runtime that builds no such client

    def _read_text(self, uri: str) -> str:
        """An operator-maintained file: ``gs://bucket/key`` in the pipeline's bucket."""
        bucket, _, key = uri.removeprefix("gs://").partition("/")
        got = self.objects.get(key) if uri.startswith("gs://") and bucket == self.settings.bucket else None
        if got is None:
            raise TopocastError(f"TOPOCAST_DOMAINS_URI {uri!r}: not an object of gs://{self.settings.bucket}/")
        return got.data.decode("utf-8", "replace")

    def provider(self) -> Provider:
        """The configured topology source (``TOPOCAST_PROVIDER``: gcp, ibnetdiscover, netq, k8s-labels)."""
        s = self.settings
        clients = with_node_lister(self._client, s.k8s_options)  # compute, and k8s-nodes for k8s-labels
        return build_provider(s.provider, ProviderInputs(s.cluster, s.provider_options(), clients,
                                                         self.uploads, self._read_text), s.overlays)  # fmt: skip

    def publishers(self) -> Sequence[Publisher]:
        """The publishers named in ``TOPOCAST_PUBLISHERS`` (gcs, kubernetes)."""
        clients = with_node_lister(self._client, self.settings.k8s_options)
        inputs = PublisherInputs(self.settings, lambda g: self.graphs.get(g).graph, clients, self.objects)
        return build_publishers(self.settings.publishers, inputs)


@dataclass(frozen=True)
class GcsOverride:
    """:class:`~topocast.ports.protocols.GuardOverride`: env ``TOPOCAST_GUARD_ALLOW_GENERATION``, then an object."""

    state: GcsPublishState

    def allowed_generation(self) -> str | None:
        return self.state.read_override()


def build(settings: Settings, **clients: Any) -> GcpRuntime:
    """The composition root (``clients``: ``storage=``, ``tasks=`` to reuse existing ones)."""
    return GcpRuntime(settings, **clients)
