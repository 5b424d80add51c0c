"""``topocast controller``: the pipeline inside a Kubernetes cluster, for clouds without Lambda or Cloud Functions.

One Deployment (two replicas for failover; ``infra/k8s/controller/``) does what the three functions do
for a cloud account, for the cluster it runs in:

* **watch** (:class:`topocast.k8s.watch.KindWatcher`): Nodes (and ResourceSlices for ``dra``), listed, then
  watched from the list's resourceVersion in windows with bookmarks; a dropped stream resumes from the same
  resourceVersion, an expired one (410) is a fresh list compared with what was known, so a deletion in the
  gap is still a change. Only what topology reads (a Node's labels) counts as a change;
* **debounce** with the functions' own policy (:mod:`topocast.pipeline.debounce`, the same pure state
  machine and defaults: quiet window, max wait, leading edge), its timer kept in memory;
* **discover** with the configured provider (its connector builds its clients: ``k8s-labels``, ``dra``,
  ``oci`` ...), every time a full read, so every cycle is also a reconcile; one more runs every ``reconcile_seconds``;
* **guard**: a graph that loses more than ``max_loss`` of the last published nodes is held
  (:func:`topocast.pipeline.guard.check`); a later full read that still misses them confirms the loss node
  by node (a node that came back is simply present), so a hold never outlives the cause;
* **render and publish** to its own cluster through the Kubernetes publisher, the same code as
  ``topocast publish`` and the publish function: labels, Kueue/KAI/Volcano objects, the Slinky ConfigMap;
  the publisher reads what the API server holds and patches only what differs, so drift is repaired on
  every cycle;
* **one leader** (:class:`topocast.k8s.lease.LeaderElector`, a ``coordination.k8s.io`` Lease): a standby
  replica only renews its view of the Lease; a new leader lists again and publishes at once. The state
  that must survive a failover (the generation number and the last published node set, for the guard)
  is a ConfigMap beside the Lease, written after each publish; a leader that dies mid-publish leaves it
  at the previous generation, and its successor publishes again (the publisher is idempotent);
* ``/healthz``, ``/readyz`` and Prometheus ``/metrics`` (:func:`serve_http`).
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import http.server
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from topocast.config import (
    DEFAULT_DEBOUNCE_LEADING_EDGE,
    DEFAULT_DEBOUNCE_MAX_WAIT,
    DEFAULT_DEBOUNCE_QUIET,
    DEFAULT_GUARD_MAX_LOSS,
)
from topocast.k8s.lease import LeaderElector, LeaseConfig
from topocast.k8s.watch import Change, KindWatcher, node_topology_view
from topocast.model.graph import TopologyGraph
from topocast.model.prometheus import Family, exposition
from topocast.pipeline import debounce
from topocast.pipeline.guard import check
from topocast.ports.debounce import DebouncePolicy
from topocast.renderers import kubernetes_formats

__all__ = ["Controller", "ControllerSettings", "CycleOutcome", "build_controller", "metrics_text", "serve_http"]

log = logging.getLogger("topocast.controller")


class ControllerSettings(BaseModel):
    """Everything ``topocast controller`` is told (flags); frozen, built once."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cluster: str = Field("default", min_length=1, max_length=63)
    provider: str = "k8s-labels"
    provider_options: dict[str, Any] = Field(default_factory=dict)
    namespace: str = "topocast"
    lease_name: str = "topocast-controller"
    identity: str = Field(default_factory=lambda: f"topocast-{uuid.uuid4().hex[:12]}")
    lease_seconds: float = Field(15.0, gt=0)
    retry_seconds: float = Field(2.0, gt=0)
    quiet: float = Field(DEFAULT_DEBOUNCE_QUIET, ge=0)
    max_wait: float = Field(DEFAULT_DEBOUNCE_MAX_WAIT, gt=0)
    leading_edge: bool = DEFAULT_DEBOUNCE_LEADING_EDGE
    reconcile_seconds: float = Field(900.0, gt=0)
    watch_window: int = Field(10, ge=1, le=300)
    max_loss: float = Field(DEFAULT_GUARD_MAX_LOSS, ge=0, le=1)
    #: the formats it publishes to its own cluster (default: every Kubernetes format of the renderer registry)
    formats: tuple[str, ...] = Field(default_factory=kubernetes_formats)
    #: seconds between capacity readings for /metrics (free / allocated / drained per domain and leaf; 0: none)
    capacity_seconds: float = Field(60.0, ge=0)
    #: count a node with a Running or Pending pod (not a DaemonSet's) as allocated: a LIST of every pod
    capacity_pods: bool = False
    #: the Kubernetes publisher's options (``--k8s-options``: connection, client, labels...)
    k8s_options: dict[str, Any] = Field(default_factory=dict)
    render_options: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _debounce_knobs_agree(self) -> ControllerSettings:
        _ = self.debounce_policy  # a quiet window above the max wait is refused with the flags, not in the loop
        return self

    @property
    def debounce_policy(self) -> DebouncePolicy:
        """The debounce knobs the controller's loop runs with (the functions' own come from their settings)."""
        return DebouncePolicy(quiet=self.quiet, max_wait=self.max_wait, leading_edge=self.leading_edge)


@dataclass(frozen=True)
class CycleOutcome:
    """What one discover -> guard -> render -> publish cycle did."""

    result: str  # published | held | incomplete | failed
    generation: int
    nodes: int = 0
    set_aside: int = 0
    detail: str = ""


@dataclass
class Stats:
    """Counters and gauges for ``/metrics`` (written by the loop thread, read by the HTTP thread)."""

    cycles: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys(("published", "held", "incomplete", "failed"), 0)
    )
    generation: int = 0
    nodes: int = 0
    set_aside: int = 0
    publish_seconds_sum: float = 0.0
    publish_seconds_count: int = 0
    publish_seconds_max: float = 0.0
    changes: int = 0
    last_loop_at: float = 0.0
    api_errors: int = 0


#: discover(previous) -> graph (a provider's full read); publish(graph, generation) -> (complete, detail)
Discover = Callable[[TopologyGraph | None], TopologyGraph]
Publish = Callable[[TopologyGraph, int], tuple[bool, str]]
#: the capacity of the published graph now, as metric families (model.prometheus)
Capacity = Callable[[TopologyGraph], list[Family]]


@dataclass
class Controller:
    """The loop; every effect goes through the ports it is given (tests give fakes or the fake API server)."""

    settings: ControllerSettings
    elector: LeaderElector
    watchers: Sequence[KindWatcher]
    discover: Discover
    publish: Publish
    state: StateStore
    capacity: Capacity | None = None
    clock: Callable[[], float] = time.monotonic
    stats: Stats = field(default_factory=Stats)
    _debounce: debounce.DebounceState = field(default_factory=debounce.DebounceState, init=False)
    _change_generation: int = field(default=0, init=False)
    _next_reconcile: float = field(default=0.0, init=False)
    _leading: bool = field(default=False, init=False)
    _published: set[str] | None = field(default=None, init=False)
    _generation: int = field(default=0, init=False)
    _graph: TopologyGraph | None = field(default=None, init=False)
    #: the nodes the last held graph lacked (a reconcile that still misses them confirms them gone)
    _held: set[str] = field(default_factory=set, init=False)
    _stop: threading.Event = field(default_factory=threading.Event, init=False)
    #: the last capacity reading (families for /metrics) and when it was taken
    capacity_families: list[Family] = field(default_factory=list, init=False)
    _capacity_at: float | None = field(default=None, init=False)

    # ----- the loop -------------------------------------------------------------------------------------------
    def run(self) -> None:
        """Until :meth:`stop`: lead or stand by, watch, debounce, cycle."""
        elector = threading.Thread(target=self._elect, name="lease", daemon=True)
        elector.start()
        try:
            while not self._stop.is_set():
                self.step()
        finally:
            self._stop.set()
            self.elector.release()

    def stop(self) -> None:
        self._stop.set()

    def _elect(self) -> None:
        while not self._stop.is_set():
            self.elector.step()
            self._stop.wait(self.settings.retry_seconds)

    def step(self) -> CycleOutcome | None:
        """One pass: a watch window (or a wait while standing by), then a cycle if one is due."""
        self.stats.last_loop_at = self.clock()
        if not self.elector.leading:
            if self._leading:
                log.warning("lost the lease %s: standing by", self.settings.lease_name)
            self._leading = False
            self._debounce = debounce.DebounceState()
            self._stop.wait(self.settings.retry_seconds)
            return None
        if not self._leading:
            return self._take_over()
        changes: list[Change] = []
        for watcher in self.watchers:
            watcher.window_seconds = self._window()
            changes += watcher.poll()
        now = self.clock()
        if changes:
            self.stats.changes += len(changes)
            self._note_change(now)
        self._read_capacity(now)
        if now >= self._next_reconcile:
            return self.cycle("reconcile")
        due = self._debounce.timer_due_at if self._debounce.phase == "waiting" else None
        if due is not None and now >= due:
            return self._timer_fired(now)
        return None

    def _read_capacity(self, now: float) -> None:
        """Refresh the capacity figures of the published graph, at most every ``capacity_seconds``."""
        every = self.settings.capacity_seconds
        if self.capacity is None or not every or self._graph is None:
            return
        if self._capacity_at is not None and now - self._capacity_at < every:
            return
        self._capacity_at = now
        try:
            self.capacity_families = self.capacity(self._graph)
        except Exception as exc:  # figures for a dashboard: a failed reading keeps the last one
            log.warning("capacity reading failed: %s", _line(exc))

    def _take_over(self) -> CycleOutcome:
        """Just became leader: the state of the last leader, a fresh list, and a cycle at once."""
        self._leading = True
        log.info("holding the lease %s as %s", self.settings.lease_name, self.settings.identity)
        self._generation, self._published = self.state.load()
        for watcher in self.watchers:
            watcher.resource_version = None
            watcher.relist()
        self._debounce = debounce.DebounceState()
        return self.cycle("took over the lease")

    def _window(self) -> int:
        """The next watch window: never past a debounce timer or the reconcile (at least 1 s)."""
        now, until = self.clock(), self._next_reconcile
        if self._debounce.phase == "waiting" and self._debounce.timer_due_at is not None:
            until = min(until, self._debounce.timer_due_at)
        return int(max(1, min(self.settings.watch_window, -(-(until - now) // 1))))

    def _note_change(self, now: float) -> None:
        s = self.settings
        self._change_generation = max(self._change_generation, self._debounce.latest_generation) + 1
        step = debounce.on_change(
            self._debounce, self._change_generation, now, new_timer_id=uuid.uuid4().hex,
            policy=s.debounce_policy,
        )  # fmt: skip
        self._debounce = step.state

    def _timer_fired(self, now: float) -> CycleOutcome | None:
        s, timer = self.settings, self._debounce.timer_id or ""
        step = debounce.on_timer(self._debounce, timer, now, new_timer_id=uuid.uuid4().hex,
                                 policy=s.debounce_policy)  # fmt: skip
        self._debounce = step.state
        if not step.decision.render:
            return None
        outcome = self.cycle(step.decision.reason)
        if outcome.result == "failed":
            failed = debounce.on_render_failed(self._debounce, timer, self.clock(), policy=s.debounce_policy)
            self._debounce = failed.state
        else:
            done = debounce.on_rendered(self._debounce, timer, self._debounce.latest_generation, self.clock(),
                                        new_timer_id=uuid.uuid4().hex, policy=s.debounce_policy)  # fmt: skip
            self._debounce = done.state
        return outcome

    # ----- one cycle ------------------------------------------------------------------------------------------
    def cycle(self, why: str) -> CycleOutcome:
        """Discover (a full read), guard, render and publish; never raises."""
        reconcile = why in ("reconcile", "took over the lease")
        self._next_reconcile = self.clock() + self.settings.reconcile_seconds
        try:
            graph = self.discover(self._graph)
        except Exception as exc:
            return self._count(CycleOutcome("failed", self._generation, detail=f"discovery failed: {_line(exc)}"))
        nodes = {n.name for n in graph.nodes}
        lost_now = (self._published or set()) - nodes
        # node by node: a held node a reconcile still misses is confirmed gone; one that came back is present
        confirmed = self._held & lost_now if reconcile else set()
        baseline = None if self._published is None else self._published - confirmed
        decision = check(baseline, nodes, self.settings.max_loss)
        if not decision.allow:
            self._held = lost_now
            # a reconcile comes back after the max wait (not the full period) to confirm or clear the hold
            self._next_reconcile = min(self._next_reconcile, self.clock() + self.settings.max_wait)
            log.warning("publish held (%s): %s", why, decision.reason)
            return self._count(CycleOutcome("held", self._generation, len(nodes), len(graph.unplaced), decision.reason))
        self._held = set()
        generation = self._generation + 1
        started = self.clock()
        try:
            complete, detail = self.publish(graph, generation)
        except Exception as exc:
            complete, detail = False, f"publishing failed: {_line(exc)}"
        took = self.clock() - started
        self.stats.publish_seconds_sum += took
        self.stats.publish_seconds_count += 1
        self.stats.publish_seconds_max = max(self.stats.publish_seconds_max, took)
        if not complete:
            return self._count(CycleOutcome("incomplete", self._generation, len(nodes), len(graph.unplaced), detail))
        self._generation, self._published, self._graph = generation, nodes, graph
        try:
            self.state.save(generation, nodes)
        except Exception as exc:  # the next leader publishes once more: harmless
            log.warning("could not record generation %d: %s", generation, _line(exc))
        log.info("generation %d published (%s): %d node(s); %s", generation, why, len(nodes), detail)
        return self._count(CycleOutcome("published", generation, len(nodes), len(graph.unplaced), detail))

    def _count(self, outcome: CycleOutcome) -> CycleOutcome:
        self.stats.cycles[outcome.result] = self.stats.cycles.get(outcome.result, 0) + 1
        self.stats.generation = self._generation
        if outcome.result in ("published", "held"):
            self.stats.nodes, self.stats.set_aside = outcome.nodes, outcome.set_aside
        if outcome.result in ("failed", "incomplete"):
            log.warning("cycle %s: %s", outcome.result, outcome.detail)
        return outcome


def _line(exc: BaseException) -> str:
    return " ".join(f"{type(exc).__name__}: {exc}".split())[:300]


# ----- state that survives a failover ----------------------------------------------------------------------
@dataclass
class StateStore:
    """The generation and the last published node set, in a ConfigMap beside the Lease.

    The node names are gzip'd and base64'd (10,000 names are about 20 KB, far under a ConfigMap's 1 MiB)."""

    api: Any
    namespace: str
    name: str

    @property
    def path(self) -> str:
        return f"/api/v1/namespaces/{self.namespace}/configmaps"

    def load(self) -> tuple[int, set[str] | None]:
        from lightkube.core.exceptions import ApiError

        try:
            cm = self.api.request_json("GET", f"{self.path}/{self.name}")
        except ApiError as exc:
            if getattr(exc.status, "code", None) == 404:
                return 0, None
            raise
        data = cm.get("data") or {}
        try:
            names = gzip.decompress(base64.b64decode(data.get("nodes", ""))).decode().split("\n")
            return int(data.get("generation", "0")), {n for n in names if n}
        except (ValueError, OSError, EOFError):  # a damaged record: start over (the guard allows a first publish)
            log.warning("configmap %s/%s is damaged; starting from generation 0", self.namespace, self.name)
            return 0, None

    def save(self, generation: int, nodes: set[str]) -> None:
        packed = base64.b64encode(gzip.compress("\n".join(sorted(nodes)).encode(), mtime=0)).decode()
        body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "labels": {"app.kubernetes.io/managed-by": "topocast"},
            },
            "data": {
                "generation": str(generation),
                "nodes": packed,
                "nodes-sha256": hashlib.sha256(packed.encode()).hexdigest(),
            },
        }
        self.api.request_json(
            "PATCH", f"{self.path}/{self.name}", params={"fieldManager": "topocast-controller", "force": "true"},
            body=body, content_type="application/apply-patch+yaml",
        )  # fmt: skip


# ----- composition ----------------------------------------------------------------------------------------
def build_controller(settings: ControllerSettings, client_options: Mapping[str, Any] | None = None) -> Controller:
    """The controller wired to the cluster of ``settings.k8s_options`` (in-cluster or a kubeconfig)."""
    from topocast.agents.collect import uploads_reader
    from topocast.config import Settings
    from topocast.k8s.client import build_client, client_settings_from_options, connection_from_options
    from topocast.k8s.nodes_client import KubeListers, with_node_lister
    from topocast.providers import ProviderInputs, ShellMeans, build_provider, connect
    from topocast.publish import PublisherInputs, build_publishers
    from topocast.renderers import render
    from topocast.renderers.base import RenderOptions

    k8s = dict(settings.k8s_options)
    # a long-running client: an outage marks the server unreachable for seconds, not for the process's life
    k8s["client"] = {"unreachable_seconds": 5.0, **(k8s.get("client") or {})}
    kube = build_client(connection_from_options(k8s), client_settings_from_options(k8s))
    elector = LeaderElector(kube, LeaseConfig(settings.namespace, settings.lease_name, settings.identity,
                                              settings.lease_seconds, settings.retry_seconds))  # fmt: skip
    # the labels topocast writes are no change to react to: its own publish would wake it up again
    own_keys: set[str] = set()
    nodes = KindWatcher(kube, "/api/v1/nodes", relevant=lambda obj: node_topology_view(obj, own_keys),
                        window_seconds=settings.watch_window)  # fmt: skip
    watchers = [nodes]
    if settings.provider == "dra":
        watchers.append(KindWatcher(kube, "/apis/resource.k8s.io/v1/resourceslices", relevant=_whole,
                                    window_seconds=settings.watch_window))  # fmt: skip
    options = RenderOptions.model_validate(settings.render_options)

    provider_options = dict(settings.provider_options)
    if settings.provider == "k8s-labels" and not provider_options.keys() & {"schemes", "preset"}:
        # the controller writes the Topograph keys itself: read back, its own map would become its source
        from topocast.providers.k8s_labels.provider import DEFAULT_SCHEMES

        provider_options["schemes"] = [s for s in DEFAULT_SCHEMES if s != "topograph"]
    # the provider's own connector builds its SDK clients (the cloud SDKs' credential chains: workload
    # identity, instance principals); its Kubernetes reads go to the cluster the controller publishes to
    means = ShellMeans(kubernetes=KubeListers(k8s), read_uploads=uploads_reader(log.warning))
    clients = with_node_lister(connect(settings.provider, means, provider_options), k8s)

    def discover(previous: TopologyGraph | None) -> TopologyGraph:
        inputs = ProviderInputs(settings.cluster, provider_options, clients)
        return build_provider(settings.provider, inputs).discover_full(previous).graph

    config = Settings(cluster=settings.cluster, publishers=["kubernetes"], render_options=options,
                      k8s_options={**k8s, "formats": list(settings.formats)})  # fmt: skip
    last: dict[int, TopologyGraph] = {}
    # the Kubernetes publisher also takes a graph and rendered artifacts, as ``topocast publish --graph`` does
    publisher: Any = build_publishers(config.publishers, PublisherInputs(config, last.__getitem__))[0]

    def publish(graph: TopologyGraph, generation: int) -> tuple[bool, str]:
        last.clear()
        last[generation] = graph
        artifacts = [render(graph, fmt, options) for fmt in settings.formats]
        for art in artifacts:
            if art.format == "k8s-labels":
                own_keys.update(key for labels in json.loads(art.content).values() for key in labels)
        result = publisher.publish({"generation": generation, "graph": graph}, artifacts)
        return bool(result.published), str(result.detail)

    def capacity(graph: TopologyGraph) -> list[Family]:
        from topocast.k8s.workloads import node_states_of
        from topocast.model.capacity import cluster_capacity
        from topocast.model.prometheus import capacity_families

        nodes = kube.request_json("GET", "/api/v1/nodes")
        pods = kube.request_json("GET", "/api/v1/pods") if settings.capacity_pods else None
        return capacity_families(cluster_capacity(graph, node_states_of(nodes, "nodes", pods)))

    state = StateStore(kube, settings.namespace, f"{settings.lease_name}-state")
    return Controller(settings, elector, watchers, discover, publish, state, capacity)


def _whole(obj: Mapping[str, Any]) -> Any:
    return json.dumps(obj.get("spec"), sort_keys=True)


# ----- health and metrics ------------------------------------------------------------------------------------
def metrics_text(controller: Controller) -> str:
    """The Prometheus text exposition (format 0.0.4) of the controller's counters and gauges."""
    s, c = controller.stats, {"cluster": controller.settings.cluster}
    relists = sum(w.stats["relists"] for w in controller.watchers)
    watch_errors = sum(w.stats["watch_errors"] for w in controller.watchers)
    name = "topocast_controller_{}".format
    return exposition(
        [
            Family(name("leader"), "1 while this replica holds the Lease", [(c, int(controller.elector.leading))]),
            Family(name("generation"), "the last generation published", [(c, s.generation)]),
            Family(name("nodes"), "nodes in the last graph", [(c, s.nodes)]),
            Family(name("nodes_set_aside"), "nodes set aside in the last graph", [(c, s.set_aside)]),
            Family(name("cycles_total"), "discover-publish cycles by result",
                   [({**c, "result": k}, v) for k, v in sorted(s.cycles.items())], "counter"),
            Family(name("changes_total"), "topology-relevant object changes seen", [(c, s.changes)], "counter"),
            Family(name("publish_seconds_total"), "time spent publishing", [(c, s.publish_seconds_sum)], "counter"),
            Family(name("publishes_total"), "publishes timed (rate of _seconds_total / this: the mean)",
                   [(c, s.publish_seconds_count)], "counter"),
            Family(name("publish_seconds_max"), "the longest publish since start", [(c, s.publish_seconds_max)]),
            Family(name("lease_transitions_total"), "times this replica acquired the Lease",
                   [(c, controller.elector.transitions)], "counter"),
            Family(name("watch_relists_total"), "full lists (start, takeover, 410 Expired)", [(c, relists)], "counter"),
            Family(name("api_errors_total"), "watch windows that failed", [(c, watch_errors)], "counter"),
            *(controller.capacity_families if controller.elector.leading else []),
        ]
    )  # fmt: skip


def serve_http(controller: Controller, port: int, host: str = "0.0.0.0") -> http.server.ThreadingHTTPServer:
    """``/healthz`` (the loop turned recently), ``/readyz`` (the API server answers the Lease) and ``/metrics``."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            c = controller
            turn = c.settings.watch_window + c.settings.retry_seconds
            stale = c.clock() - c.stats.last_loop_at > max(60.0, 3 * turn)
            if self.path == "/healthz":
                code, body = (500, "loop stalled\n") if stale else (200, "ok\n")
            elif self.path == "/readyz":
                problem = c.elector.last_error
                role = "leader\n" if c.elector.leading else "standby\n"
                code, body = (503, f"{problem}\n") if problem else (200, role)
            elif self.path == "/metrics":
                code, body = 200, metrics_text(c)
            else:
                code, body = 404, "not found\n"
            data = body.encode()
            self.send_response(code)
            ctype = "text/plain; version=0.0.4; charset=utf-8" if self.path == "/metrics" else "text/plain"
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = http.server.ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="http", daemon=True).start()
    return server
