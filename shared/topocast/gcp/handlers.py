"""The three GCP functions' logic; ``functions/*/main.py`` only forward their CloudEvent here.

Flow (docs/gcp.md has the picture)::

    audit log (VM insert/delete...) ─► discover: marker object + one "window" task per window
    window task / reconcile        ─► discover: instances.get per VM (or a full scan) -> graph generation
                                       -> debounce.note_change -> timer task (quiet window)
    timer task                     ─► render: claim, render_generation -> manifest -> publish task
    graph object finalized (opt.)  ─► render: note_change (a graph written by anyone gets rendered)
    publish task                   ─► publish: guard + publishers (gcs Slurm object, GKE)

Answering events (functions-framework turns an exception into HTTP 500; Eventarc
and Cloud Tasks retry every non-2xx answer, 4xx included): a malformed or
unknown event is **logged with the reason and answered 200**, because retrying
it can never succeed; a well-formed event with nothing to do is logged and
answered 200; a transient failure (storage, Compute, Cloud Tasks after their own
retries; a publisher that did not finish) **raises**, so the platform retries.
A graph that cannot be rendered is logged as an error and not retried: the last
published files stay in place and the next change renders again.

Everything is configured from ``TOPOCAST_*`` variables (:mod:`topocast.config`);
clients and stores are built once per process and per configuration.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Literal

from topocast.config import Settings, settings_from_env
from topocast.errors import InvalidGraphError, RenderError, StaleGenerationError, TopocastError
from topocast.gcp import events as ev
from topocast.gcp.gcs import GcsObjects
from topocast.gcp.gcs_artifacts import GcsArtifactStore, GcsPublishState
from topocast.gcp.gcs_store import GcsGraphStore, cluster_base
from topocast.gcp.tasks import TaskQueue, task_id
from topocast.pipeline.debounce_runner import DebounceRunner
from topocast.pipeline.publish_stage import confirm_on_reconcile, load_files, publish_manifest
from topocast.pipeline.render_stage import render_generation
from topocast.pipeline.store import GenerationNotFoundError, StoredGraph, commit

log = logging.getLogger("topocast.gcp")

Function = Literal["discover", "render", "publish"]
ACCEPTS: dict[str, tuple[type, ...]] = {
    "discover": (ev.InstanceChange, ev.Reconcile, ev.DiscoverWindow),
    "render": (ev.DebounceTimer, ev.ObjectWritten),
    "publish": (ev.PublishRequest,),
}

#: longest a discover batch may hold the lease (a crashed batch frees it after this); keep >= the function timeout
DISCOVER_LEASE_SECONDS = 540.0

#: what the functions did in this process (the demo and tests read it; also logged per event)
STATS: Counter[str] = Counter()
_STATS_LOCK = threading.Lock()


def count(key: str, n: int = 1) -> None:
    with _STATS_LOCK:
        STATS[key] += n


class PublishIncomplete(TopocastError):
    """A publisher did not finish; raised so Cloud Tasks retries the publish task."""


# ----- logging: one JSON line per record, the shape Cloud Logging parses (severity, message) ----------
class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {"severity": record.levelname, "message": record.getMessage(), "logger": record.name}
        fields = getattr(record, "topocast", None)
        if fields:
            entry["topocast"] = fields
        return json.dumps(entry, default=str)


class _StdoutHandler(logging.Handler):
    """Writes to whatever ``sys.stdout`` is at the time (functions-framework and test runners swap it)."""

    _topocast_json = True

    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stdout.write(self.format(record) + "\n")
            sys.stdout.flush()
        except Exception:
            self.handleError(record)


def setup_logging() -> None:
    """Send the GCP functions' records (``topocast.gcp.*``) to stdout as JSON lines; idempotent.

    Only this subtree: other topocast code keeps whatever logging its host set up.
    Records still propagate, so pytest's caplog and a root handler see them too.
    """
    logger = logging.getLogger("topocast.gcp")
    if not any(getattr(h, "_topocast_json", False) for h in logger.handlers):
        handler = _StdoutHandler()
        handler.setFormatter(_JsonFormatter())
        logger.addHandler(handler)
    if logger.level == logging.NOTSET and logging.getLogger("topocast").level == logging.NOTSET:
        logger.setLevel(logging.INFO)  # unless someone (a test, the demo) set topocast's level explicitly


def _emit(level: int, message: str, **fields: Any) -> None:
    log.log(level, message, extra={"topocast": fields})


# ----- the per-process runtime ------------------------------------------------------------------
@dataclass
class GcpRuntime:
    settings: Settings
    objects: GcsObjects
    graphs: GcsGraphStore
    artifacts: GcsArtifactStore
    publish_state: GcsPublishState
    queue: TaskQueue | None
    debouncer: DebounceRunner | None
    compute_factory: Callable[[], Any]
    _compute: Any = field(default=None, repr=False)
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
        debouncer = None
        if settings.task_queue:
            tasks = tasks if tasks is not None else clients.tasks_client(settings.cloudtasks_endpoint)
            queue = TaskQueue(settings.task_queue, tasks, service_account=settings.tasks_service_account)
            if settings.render_url:
                debouncer = gcp_debouncer(
                    objects,
                    settings.prefix,
                    queue,
                    settings.render_url,
                    quiet=settings.debounce_quiet,
                    max_wait=settings.debounce_max_wait,
                )
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
        if self._compute is None:
            self._compute = self.compute_factory()
        return self._compute

    def discovery_config(self) -> Any:
        from topocast.providers.gcp import GcpDiscoveryConfig

        s = self.settings
        return GcpDiscoveryConfig.from_data(
            {
                "cluster": s.cluster,
                "project": s.gcp_project,
                "zones": s.gcp_zones,
                "labels": s.gcp_labels,
                "name_from": s.name_from,
                "domain_tier": s.gcp_domain_tier,
            },
            "TOPOCAST_GCP_* configuration",
        )

    def pending_prefix(self) -> str:
        return cluster_base(self.settings.prefix, self.settings.cluster, "pending") + "/"


_RUNTIMES: dict[tuple[tuple[str, str], ...], GcpRuntime] = {}
_RUNTIME_LOCK = threading.Lock()


def runtime() -> GcpRuntime:
    """The runtime for the current environment (cached per distinct TOPOCAST_* / emulator configuration)."""
    import os

    key = tuple(
        sorted((k, v) for k, v in os.environ.items() if k.startswith("TOPOCAST_") or k == "STORAGE_EMULATOR_HOST")
    )
    with _RUNTIME_LOCK:
        rt = _RUNTIMES.get(key)
        if rt is None:
            rt = _RUNTIMES[key] = GcpRuntime.from_settings(settings_from_env())
        return rt


# ----- discover ---------------------------------------------------------------------------------
def _note(rt: GcpRuntime, generation: int) -> str:
    if rt.debouncer is None:
        return "no debouncer configured (TOPOCAST_TASK_QUEUE / TOPOCAST_RENDER_URL)"
    return rt.debouncer.note_change(rt.settings.cluster, generation).reason


def _full_scan(rt: GcpRuntime, reason: str) -> dict[str, Any]:
    from topocast.providers.gcp import discover_full

    count("discover_runs")
    try:
        current = rt.graphs.latest()
    except InvalidGraphError as exc:
        # a corrupt stored generation must not block discovery forever: a full scan supersedes it
        _emit(logging.WARNING, f"stored graph unreadable, a full scan replaces it: {exc}", function="discover")
        result = discover_full(rt.compute(), rt.discovery_config(), None)
        count("compute_api_calls", sum(result.api_calls.values()))
        written = rt.graphs.replace_unreadable(result.graph)
    else:
        result = discover_full(rt.compute(), rt.discovery_config(), current.graph if current else None)
        count("compute_api_calls", sum(result.api_calls.values()))
        written = commit(rt.graphs, lambda _cur: result.graph)
    out: dict[str, Any] = {
        "action": "full scan",
        "reason": reason,
        "generation": written.generation,
        "changed": written.changed,
        "nodes": len(result.graph.nodes),
        "without_topology": len(result.graph.nodes_without_topology()),
        "api_calls": result.api_calls,
        "warnings": result.warnings[:5],
    }
    if written.changed:
        out["debounce"] = _note(rt, written.generation)
    confirmed = confirm_on_reconcile(rt.publish_state, result.graph)
    if confirmed is not None:
        latest = rt.artifacts.latest_manifest()
        out["hold_confirmed"] = confirmed.generation
        if latest is not None and rt.queue is not None and rt.settings.publish_url:
            rt.queue.send_event(
                rt.settings.publish_url,
                ev.PUBLISH,
                {"cluster": rt.settings.cluster, "generation": latest.generation, "reason": "hold confirmed"},
                name=task_id("publish", rt.settings.cluster, latest.generation, "confirmed", confirmed.confirmed_at),
            )
    return out


def _incremental(rt: GcpRuntime, refs: list[Any]) -> dict[str, Any]:
    from topocast.providers.gcp import NeedsFullScan, discover_instances

    count("discover_runs")
    results: list[Any] = []

    def build(current: StoredGraph | None) -> Any:
        res = discover_instances(rt.compute(), rt.discovery_config(), current.graph if current else None, refs)
        results.append(res)
        count("compute_api_calls", sum(res.api_calls.values()))
        return res.graph

    try:
        written = commit(rt.graphs, build)
    except (NeedsFullScan, InvalidGraphError) as exc:  # no usable base to apply the change to
        return _full_scan(rt, str(exc))
    last = results[-1]
    out: dict[str, Any] = {
        "action": "incremental",
        "vms": len(refs),
        "upserted": last.upserted[:10],
        "removed": last.removed[:10],
        "generation": written.generation,
        "changed": written.changed,
        "warnings": last.warnings[:5],
    }
    if written.changed:
        out["debounce"] = _note(rt, written.generation)
    return out


def _marker_key(rt: GcpRuntime, zone: str, instance: str) -> str:
    return f"{rt.pending_prefix()}{zone}/{instance}"


def _arm_window(rt: GcpRuntime, now: float, *, after: int | None = None) -> str:
    window = rt.settings.discover_window
    bucket = int(now // window)
    if after is not None:
        bucket = max(bucket, after + 1)
    if bucket in rt.armed_windows:
        return "armed earlier"  # this instance created (or met) the task already; it runs at the window's end
    delay = (bucket + 1) * window - now + 0.05
    assert rt.queue is not None and rt.settings.discover_url
    outcome = rt.queue.send_event(
        rt.settings.discover_url,
        ev.DISCOVER_WINDOW,
        {"cluster": rt.settings.cluster, "window": bucket},
        name=task_id("window", rt.settings.cluster, bucket),
        delay=delay,
    )
    if after is None:  # re-arms after a busy or leftover window must always reach Cloud Tasks
        rt.armed_windows = {b for b in rt.armed_windows if b >= bucket - 2} | {bucket}
    return outcome


def _instance_change(rt: GcpRuntime, cmd: ev.InstanceChange) -> dict[str, Any]:
    from topocast.providers.gcp import InstanceRef

    s = rt.settings
    project, zone, name = cmd.instance.split("/", 2)  # the GCP parser's key: project/zone/name
    instance_id = cmd.detail.get("instance_id") or None
    if project != s.gcp_project and not project.isdigit():
        return {"ignored": f"event for project {project}; this function serves {s.gcp_project}"}
    if s.gcp_zones and zone not in s.gcp_zones:
        return {"ignored": f"zone {zone} is not one of {s.gcp_zones}"}
    batched = s.discover_window > 0 and rt.queue is not None and bool(s.discover_url)
    if not batched:
        return _incremental(rt, [InstanceRef(zone, name, instance_id)])
    meta = {"instance_id": instance_id or "", "method": cmd.detail.get("method", cmd.kind)}
    meta["origin"] = cmd.detail.get("origin", "api")
    body = json.dumps({"zone": zone, "instance": name, "event_id": cmd.event_id, **meta}).encode()
    rt.objects.put(_marker_key(rt, zone, name), body, content_type="application/json", metadata=meta)
    window = _arm_window(rt, time.time())
    return {"action": "queued", "vm": f"{zone}/{name}", "window_task": window}


def _take_lease(rt: GcpRuntime, seconds: float) -> int | None:
    """Claim the discover lease (one batch at a time per cluster); its object generation, or None if held."""
    key = cluster_base(rt.settings.prefix, rt.settings.cluster, "state") + "/discover-lease.json"
    now = time.time()
    current = rt.objects.get(key)
    if current is not None:
        try:
            until = float(json.loads(current.data).get("until", 0))
        except (ValueError, AttributeError):
            until = 0.0  # unreadable: treat as expired
        if until > now:
            return None
    body = json.dumps({"until": now + seconds}).encode()
    return rt.objects.put(
        key, body, content_type="application/json", if_generation_match=current.generation if current else 0
    )


def _release_lease(rt: GcpRuntime, generation: int) -> None:
    key = cluster_base(rt.settings.prefix, rt.settings.cluster, "state") + "/discover-lease.json"
    rt.objects.delete(key, if_generation_match=generation)


def _discover_window(rt: GcpRuntime, cmd: ev.DiscoverWindow) -> dict[str, Any]:
    from topocast.providers.gcp import InstanceRef

    prefix = rt.pending_prefix()
    markers = rt.objects.list(prefix)
    if not markers:
        return {"action": "nothing pending", "window": cmd.window}
    lease = _take_lease(rt, DISCOVER_LEASE_SECONDS)
    if lease is None:
        # an earlier window is still working on these markers: look again one window later
        return {
            "action": "busy, re-armed",
            "window": cmd.window,
            "next_window": _arm_window(rt, time.time(), after=cmd.window),
        }
    try:
        refs = []
        for m in markers:
            zone, _, instance = m.key.removeprefix(prefix).partition("/")
            refs.append(InstanceRef(zone, instance, m.metadata.get("instance_id") or None))
        if len(refs) > rt.settings.full_scan_threshold:
            out = _full_scan(rt, f"{len(refs)} VMs changed (over TOPOCAST_FULL_SCAN_THRESHOLD)")
        else:
            out = _incremental(rt, refs)
        # a marker rewritten meanwhile has a new generation and survives for the next window
        with ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(lambda m: rt.objects.delete(m.key, if_generation_match=m.generation), markers))
    finally:
        _release_lease(rt, lease)
    if rt.objects.list(prefix):
        out["next_window"] = _arm_window(rt, time.time(), after=cmd.window)
    out["window"] = cmd.window
    return out


def discover(cmd: Any, rt: GcpRuntime) -> dict[str, Any]:
    s = rt.settings
    if isinstance(cmd, ev.Reconcile):
        if cmd.cluster and cmd.cluster != s.cluster:
            return {"ignored": f"reconcile for cluster {cmd.cluster}; this function serves {s.cluster}"}
        return _full_scan(rt, cmd.reason)
    if isinstance(cmd, ev.DiscoverWindow):
        if cmd.cluster != s.cluster:
            return {"ignored": f"window task for cluster {cmd.cluster}; this function serves {s.cluster}"}
        return _discover_window(rt, cmd)
    return _instance_change(rt, cmd)


# ----- render -----------------------------------------------------------------------------------
def render(cmd: Any, rt: GcpRuntime) -> dict[str, Any]:
    s = rt.settings
    if isinstance(cmd, ev.ObjectWritten):
        generation = rt.graphs.generation_of_key(cmd.name) if cmd.bucket == s.bucket else None
        if generation is None:
            return {"ignored": f"gs://{cmd.bucket}/{cmd.name} is not a graph generation of {s.cluster}"}
        return {"action": "noted", "generation": generation, "debounce": _note(rt, generation)}
    if rt.debouncer is None:
        raise TopocastError("render got a timer but has no debouncer: set TOPOCAST_TASK_QUEUE and TOPOCAST_RENDER_URL")
    if cmd.body.get("cluster") != s.cluster:
        return {"ignored": f"timer for cluster {cmd.body.get('cluster')!r}; this function serves {s.cluster}"}
    decision = rt.debouncer.on_timer(cmd.body)
    if not decision.render:
        return {"action": decision.action, "reason": decision.reason}
    try:
        result = render_generation(rt.graphs, rt.artifacts, None, s.formats, s.render_options)
    except (RenderError, InvalidGraphError, GenerationNotFoundError) as exc:
        # retrying cannot fix a graph that does not render: record it as handled, keep the last publish
        count("render_failures")
        rt.debouncer.mark_rendered(s.cluster, decision, decision.generation or 0)
        _emit(logging.ERROR, f"render failed, the last published files stay in place: {exc}", function="render")
        return {"action": "render failed", "error": str(exc)}
    count("renders")
    after = rt.debouncer.mark_rendered(s.cluster, decision, result.generation)
    out: dict[str, Any] = {
        "action": "rendered",
        "generation": result.generation,
        "changed": result.changed,
        "detail": result.detail,
        "next": after.action,
    }
    if result.changed and rt.queue is not None and s.publish_url:
        sha = result.manifest.graph_sha256[:12]
        out["publish_task"] = rt.queue.send_event(
            s.publish_url,
            ev.PUBLISH,
            {"cluster": s.cluster, "generation": result.generation, "reason": "rendered"},
            name=task_id("publish", s.cluster, result.generation, sha),
        )
    return out


# ----- publish ----------------------------------------------------------------------------------
def build_publishers(rt: GcpRuntime) -> list[Any]:
    """The publishers named in ``TOPOCAST_PUBLISHERS`` (gcs, kubernetes)."""
    from topocast.gcp.gcs_publish import GcsSlurmPublisher

    s = rt.settings
    out: list[Any] = []
    for name in s.publishers:
        if name == "gcs":
            formats = [f for f in s.formats if f.startswith("slurm-")]
            out.append(GcsSlurmPublisher(rt.objects, cluster_base(s.prefix, s.cluster, "slurm"), formats=formats))
        elif name in ("kubernetes", "k8s"):
            from topocast.publish.kubernetes import from_settings

            out.append(from_settings(s, lambda generation: rt.graphs.get(generation).graph))
        else:
            raise TopocastError(
                f"publisher {name!r} is not available on GCP; set TOPOCAST_PUBLISHERS to gcs;kubernetes"
            )
    return out


def publish(cmd: ev.PublishRequest, rt: GcpRuntime) -> dict[str, Any]:
    s = rt.settings
    if cmd.cluster != s.cluster:
        return {"ignored": f"publish request for cluster {cmd.cluster}; this function serves {s.cluster}"}
    latest = rt.artifacts.latest_manifest()
    if latest is not None and latest.generation > cmd.generation:
        return {"ignored": f"generation {cmd.generation} is superseded by {latest.generation}, published on its own"}
    manifest = rt.artifacts.get_manifest(cmd.generation)
    files = load_files(rt.artifacts, manifest)
    outcome = publish_manifest(
        manifest,
        files,
        build_publishers(rt),
        graphs=rt.graphs,
        state=rt.publish_state,
        max_loss_fraction=s.guard_max_loss,
        override=rt.publish_state.read_override(),
    )
    if outcome.held:
        count("held")
        _emit(logging.WARNING, f"publish of generation {cmd.generation} held: {outcome.detail}", function="publish")
        return {"action": "held", "generation": cmd.generation, "detail": outcome.detail}
    if not outcome.published:
        raise PublishIncomplete(f"generation {cmd.generation}: {outcome.detail}")
    count("publishes")
    return {"action": "published", "generation": cmd.generation, "detail": outcome.detail}


# ----- the entry point main.py calls -----------------------------------------------------------------
_HANDLERS: dict[str, Callable[[Any, GcpRuntime], dict[str, Any]]] = {
    "discover": discover,
    "render": render,
    "publish": publish,
}


def handle(function: Function, cloud_event: Any, rt: GcpRuntime | None = None) -> dict[str, Any]:
    """Parse ``cloud_event`` and run ``function`` on it; see the module docstring for what raises."""
    count("events")
    try:
        cmd = ev.parse_cloud_event(cloud_event)
    except ev.MalformedEvent as exc:
        count("rejected")
        _emit(
            logging.ERROR,
            f"rejected event (answered 200 so it is not redelivered): {exc}",
            function=function,
            outcome="rejected",
        )
        return {"outcome": "rejected", "reason": str(exc)}
    event_id = getattr(cmd, "event_id", None)
    if isinstance(cmd, ev.Noted):
        count("noted")
        _emit(logging.WARNING, f"noted: {cmd.reason}", function=function, event_id=event_id, outcome="noted")
        return {"outcome": "noted", "reason": cmd.reason}
    if isinstance(cmd, ev.Ignored):
        count("ignored")
        _emit(logging.INFO, f"ignored: {cmd.reason}", function=function, event_id=event_id, outcome="ignored")
        return {"outcome": "ignored", "reason": cmd.reason}
    if not isinstance(cmd, ACCEPTS[function]):
        count("rejected")
        reason = f"{type(cmd).__name__} events are not for the {function} function; check its trigger"
        _emit(logging.ERROR, f"rejected event: {reason}", function=function, event_id=event_id, outcome="rejected")
        return {"outcome": "rejected", "reason": reason}
    rt = rt if rt is not None else runtime()
    started = time.monotonic()
    try:
        result = _HANDLERS[function](cmd, rt)
    except StaleGenerationError as exc:
        # the store kept moving under us: let the platform retry the event a little later
        _emit(logging.WARNING, f"{function}: {exc}; retrying via redelivery", function=function, event_id=event_id)
        raise
    outcome = "ignored" if "ignored" in result else "ok"
    result = {"outcome": outcome, **result, "seconds": round(time.monotonic() - started, 3)}
    _emit(
        logging.INFO,
        f"{function}: {result.get('action') or result.get('ignored')}",
        function=function,
        event_id=event_id,
        **{k: v for k, v in result.items() if k != "outcome"},
        outcome=outcome,
    )
    return result
