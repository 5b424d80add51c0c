"""Discover windows on GCP: Eventarc delivers one event per request, so the batching that an SQS
batching window gives the AWS discover function is done here.

An instance event stores a **marker** object (``<prefix>/<cluster>/pending/<zone>/<vm>``, rewritten
by later events of the same VM) and makes sure one **window task** exists for the current
``TOPOCAST_DISCOVER_WINDOW_SECONDS`` slot (a named Cloud Task: a thousand events create one). When
the window closes, its task runs :func:`close_window`: while markers are still arriving (a storm) it
waits for the next window (bounded, :data:`STORM_HOLD_WINDOWS`); then one lease per cluster, the markers become
:class:`~topocast.model.changes.InstanceChange` values for one ``app.discover`` run, and only the markers
that run saw are deleted (conditioned on their generation, so a VM changed meanwhile stays pending
for the next window).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from topocast.app.outcome import Outcome
from topocast.gcp.root import GcpRuntime
from topocast.gcp.tasks import now as clock_now
from topocast.gcp.tasks import task_id
from topocast.model.changes import InstanceChange
from topocast.pipeline.objects import ObjectInfo, cluster_base

__all__ = ["DISCOVER_LEASE_SECONDS", "STORM_HOLD_WINDOWS", "batched", "close_window", "queue_change"]

#: longest a discover batch may hold the lease (a crashed batch frees it after this); keep >= the function timeout
DISCOVER_LEASE_SECONDS = 540.0
#: a window whose markers are still arriving (the newest younger than one window) waits for the next
#: one, for at most this many windows after its oldest marker: a storm becomes one discovery whatever
#: the window boundaries, and churn is still discovered every STORM_HOLD_WINDOWS windows
STORM_HOLD_WINDOWS = 10


def batched(rt: GcpRuntime) -> bool:
    s = rt.settings
    return s.discover_window > 0 and rt.queue is not None and bool(s.discover_url)


def _arm(rt: GcpRuntime, now: float, *, after: int | None = None) -> str:
    from topocast.gcp.events import DISCOVER_WINDOW

    window = rt.settings.discover_window
    slot = int(now // window)
    if after is not None:
        slot = max(slot, after + 1)
    if slot in rt.armed_windows:
        return "armed earlier"  # this instance created (or met) the task already; it runs at the window's end
    assert rt.queue is not None and rt.settings.discover_url
    outcome = rt.queue.send_event(
        rt.settings.discover_url,
        DISCOVER_WINDOW,
        {"cluster": rt.settings.cluster, "window": slot},
        name=task_id("window", rt.settings.cluster, slot),
        delay=(slot + 1) * window - now + 0.05,
    )
    if after is None:  # re-arms after a busy or leftover window must always reach Cloud Tasks
        rt.armed_windows = {b for b in rt.armed_windows if b >= slot - 2} | {slot}
    return outcome


def queue_change(rt: GcpRuntime, change: InstanceChange) -> Outcome:
    """Store the change as a marker and make sure its window's task exists."""
    _, _, rest = change.instance.partition("/")
    meta = {**{k: change.detail.get(k, "") for k in ("instance_id", "method", "origin")}, "action": change.action}
    if change.follow:  # host maintenance / restart: the window's read follows it until steady
        meta["follow"] = change.kind
    body = json.dumps({"instance": change.instance, "event_id": change.event_id, **meta}).encode()
    rt.objects.put(rt.pending_prefix() + rest, body, content_type="application/json", metadata=meta)
    return Outcome.done("queued", vm=rest, window_task=_arm(rt, clock_now()))


def _lease_key(rt: GcpRuntime) -> str:
    return cluster_base(rt.settings.prefix, rt.settings.cluster, "state") + "/discover-lease.json"


def _take_lease(rt: GcpRuntime, seconds: float) -> int | None:
    """Claim the discover lease (one batch at a time per cluster); its object generation, or None if held."""
    now = clock_now()
    current = rt.objects.get(_lease_key(rt))
    if current is not None:
        try:
            until = float(json.loads(current.data).get("until", 0))
        except (ValueError, AttributeError):
            until = 0.0  # unreadable: treat as expired
        if until > now:
            return None
    body = json.dumps({"until": now + seconds}).encode()
    token = current.generation if current else 0
    return rt.objects.put(_lease_key(rt), body, content_type="application/json", if_generation_match=token)


def _storm_in_progress(rt: GcpRuntime, markers: list[ObjectInfo]) -> bool:
    stamps = [m.updated.timestamp() for m in markers if m.updated is not None]
    if not stamps:
        return False
    now, length = clock_now(), rt.settings.discover_window
    return now - max(stamps) < length and now - min(stamps) < STORM_HOLD_WINDOWS * length


def close_window(rt: GcpRuntime, window: int, discover: Callable[[list[InstanceChange]], Outcome]) -> Outcome:
    """Run ``discover`` once on every pending marker; see the module docstring."""
    prefix = rt.pending_prefix()
    markers = rt.objects.list_prefix(prefix)
    if not markers:
        return Outcome.done("nothing pending", window=window)
    if _storm_in_progress(rt, markers):
        return Outcome.done("changes still arriving, re-armed", window=window, vms=len(markers),
                            next_window=_arm(rt, clock_now(), after=window))  # fmt: skip
    lease = _take_lease(rt, DISCOVER_LEASE_SECONDS)
    if lease is None:  # an earlier window is still working on these markers: look again one window later
        return Outcome.done("busy, re-armed", window=window, next_window=_arm(rt, clock_now(), after=window))
    try:
        project = rt.settings.gcp_project
        changes = [
            InstanceChange(
                f"{project}/{m.key.removeprefix(prefix)}",
                "remove" if m.metadata.get("action") == "remove" else "upsert",
                m.metadata.get("follow") or f"gcp.compute/{m.metadata.get('method', 'window')}",
                # the marker's object generation names this write: a re-check scheduled from it is sent once
                event_id=f"marker-{m.generation}",
                follow=bool(m.metadata.get("follow")),
                detail={k: v for k, v in m.metadata.items() if v},
            )
            for m in markers
        ]
        outcome = discover(changes)
        if outcome.status == "done":  # a marker rewritten meanwhile has a new generation and survives
            with ThreadPoolExecutor(max_workers=8) as pool:
                list(pool.map(lambda m: rt.objects.delete(m.key, if_generation_match=m.generation), markers))
    finally:
        rt.objects.delete(_lease_key(rt), if_generation_match=lease)
    detail = dict(outcome.detail, window=window, vms=len(markers))
    if rt.objects.list_prefix(prefix):
        detail["next_window"] = _arm(rt, clock_now(), after=window)
    return Outcome(outcome.status, outcome.reason, detail)
