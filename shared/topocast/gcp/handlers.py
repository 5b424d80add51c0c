"""The three GCP functions: parse the CloudEvent, run the use case, answer with its outcome.

``functions/*/main.py`` forward their CloudEvent to :func:`handle`; the pipeline's decisions live
in :mod:`topocast.app` (which use case a delivery is for, and whether it is this cluster's:
:mod:`topocast.app.routing`), the wiring in :mod:`topocast.gcp.root`, discover-window batching in
:mod:`topocast.gcp.windows`. functions-framework turns an exception into HTTP 500, and Eventarc and
Cloud Tasks retry every non-2xx answer, so: ``done`` answers 200; ``drop`` (a malformed, unknown or
misrouted event, a render given up) is logged as an error with the reason and answered 200,
because a retry can never succeed (Cloud Tasks has no DLQ: the log entry and the metric are the
dead letter); ``retry`` raises :class:`RetryLater`, answered 500, so the platform redelivers.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any, Literal

from topocast.app import routing
from topocast.app.discover import discover as run_discover
from topocast.app.outcome import Outcome
from topocast.config import settings_from_env
from topocast.errors import TopocastError
from topocast.gcp import events as ev
from topocast.gcp import windows
from topocast.gcp.jsonlog import setup_logging
from topocast.gcp.root import STATS, GcpRuntime, build
from topocast.model.changes import Ignored, InstanceChange, MalformedEvent, Noted, Recheck, Reconcile

__all__ = ["STATS", "GcpRuntime", "RetryLater", "handle", "runtime", "setup_logging"]

log = logging.getLogger("topocast.gcp")
Function = Literal["discover", "render", "publish"]


class RetryLater(TopocastError):
    """The use case asked for a retry: raised so functions-framework answers 500 and the platform redelivers."""


_RUNTIMES: dict[tuple[tuple[str, str], ...], GcpRuntime] = {}
_RUNTIME_LOCK = threading.Lock()


def runtime() -> GcpRuntime:
    """The runtime for the current environment (cached per distinct TOPOCAST_* / emulator configuration)."""
    key = tuple(
        sorted((k, v) for k, v in os.environ.items() if k.startswith("TOPOCAST_") or k == "STORAGE_EMULATOR_HOST")
    )
    with _RUNTIME_LOCK:
        if key not in _RUNTIMES:
            _RUNTIMES[key] = build(settings_from_env())
        return _RUNTIMES[key]


def discover(cmd: Any, rt: GcpRuntime) -> Outcome:
    if isinstance(cmd, ev.DiscoverWindow):
        other = routing.foreign(rt.metrics, rt.settings.cluster, cmd.cluster, "discover window")
        return other or windows.close_window(rt, cmd.window, lambda changes: run_discover(rt.discover_ports(), changes))
    if windows.batched(rt) and isinstance(cmd, InstanceChange):  # the window's discovery decides it
        why = rt.provider().scope(cmd)
        return routing.ignored(rt.metrics, why) if why else windows.queue_change(rt, cmd)
    return run_discover(rt.discover_ports(), [cmd])


def render(cmd: Any, rt: GcpRuntime) -> Outcome:
    if isinstance(cmd, ev.ObjectWritten):
        generation = rt.graphs.generation_of_key(cmd.name) if cmd.bucket == rt.settings.bucket else None
        return routing.generation_written(rt.render_ports(), generation, f"gs://{cmd.bucket}/{cmd.name}")
    return routing.timer(rt.render_ports(), cmd.body)


def publish(cmd: ev.PublishRequest, rt: GcpRuntime) -> Outcome:
    return routing.publish_request(rt.publish_ports(), cmd.cluster, cmd.generation)


_HANDLERS: dict[str, Callable[[Any, GcpRuntime], Outcome]] = {
    "discover": discover,
    "render": render,
    "publish": publish,
}
ACCEPTS: dict[str, tuple[type, ...]] = {
    "discover": (InstanceChange, Reconcile, Noted, Recheck, ev.DiscoverWindow),
    "render": (ev.DebounceTimer, ev.ObjectWritten),
    "publish": (ev.PublishRequest,),
}


def _emit(level: int, message: str, **fields: Any) -> None:
    log.log(level, message, extra={"topocast": fields})


def _rejected(function: str, outcome: Outcome) -> dict[str, Any]:
    _emit(logging.ERROR, f"rejected event (answered 200 so it is not redelivered): {outcome.reason}",
          function=function, outcome="rejected")  # fmt: skip
    return {"outcome": "rejected", "reason": outcome.reason}


def handle(function: Function, cloud_event: Any, rt: GcpRuntime | None = None) -> dict[str, Any]:
    """Parse ``cloud_event`` and run ``function`` on it; see the module docstring for what raises."""
    rt = rt if rt is not None else runtime()
    try:
        cmd = ev.parse_cloud_event(cloud_event)
        if not isinstance(cmd, ACCEPTS[function] + (Ignored, Noted)):
            raise MalformedEvent(f"{type(cmd).__name__} events are not for the {function} function; check its trigger")
    except MalformedEvent as exc:
        return _rejected(function, routing.rejected(rt.metrics, exc))
    event_id = getattr(cmd, "event_id", None)
    if isinstance(cmd, Ignored) or (isinstance(cmd, Noted) and function != "discover"):
        skipped = routing.skipped(rt.metrics, cmd)
        kind = skipped.detail["action"]
        _emit(logging.INFO, f"{kind}: {cmd.reason}", function=function, event_id=event_id, outcome=kind)
        return {"outcome": kind, "reason": cmd.reason}
    started = time.monotonic()
    outcome = _HANDLERS[function](cmd, rt)
    if routing.is_rejected(outcome):
        return _rejected(function, outcome)
    fields = {**outcome.detail, "seconds": round(time.monotonic() - started, 3)}
    if outcome.status == "retry":
        _emit(logging.WARNING, f"{function}: {outcome.reason}; retrying via redelivery", function=function,
              event_id=event_id, outcome="retry")  # fmt: skip
        raise RetryLater(outcome.reason)
    level = logging.ERROR if outcome.status == "drop" else logging.INFO
    _emit(level, f"{function}: {outcome.reason}", function=function, event_id=event_id, outcome=outcome.status,
          **fields)  # fmt: skip
    return {"outcome": "ok" if outcome.status == "done" else outcome.status, "reason": outcome.reason, **fields}
