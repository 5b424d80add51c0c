"""Debounce: turn a burst of graph changes into one render, but never starve under churn.

A render is due when the graph has been quiet for ``quiet`` seconds (default 15)
or when ``max_wait`` seconds (default 120) have passed since the first change
that is not rendered yet, whichever comes first::

    due = min(last_change_at + quiet, first_change_at + max_wait)

Everything here is pure: a :class:`DebounceState` plus an event (a change was
noted, a timer fired, a render finished) gives a new state, a :class:`Decision`
and possibly "arm a timer in N seconds" (:class:`Step`).
:mod:`topocast.pipeline.debounce_runner` stores the state with a conditional
write and sends the timer (on DynamoDB + SQS or Cloud Storage + Cloud Tasks);
the rules below make at-least-once delivery harmless:

* There is at most one live timer per cluster, identified by ``timer_id``. A timer
  message whose id is not the live one is dropped (duplicate or superseded).
* "Render now" does not clear the timer: the state moves to ``rendering`` with a
  lease. A redelivered copy during the lease is dropped; one arriving after the
  lease (the render died without reporting) renders again. The render stage
  reports back with :func:`on_rendered`, which goes idle or, if changes arrived
  meanwhile, arms the next timer.
* A timer that never fires (message lost) is presumed lost ``lost_timer_grace``
  seconds after it was due; the next change re-arms.
* Arming is two writes around the send: the state is saved with the new timer
  *unconfirmed* (``timer_unconfirmed_since``), the timer is sent, then the state is
  marked sent. A process that dies between the save and the send (Lambda timeout,
  OOM: no ``except`` runs) leaves an unconfirmed timer; ``send_grace`` seconds later
  it counts as dead, and the redelivered change, any later discovery (a reconcile
  that finds the graph unchanged included) re-arms while a generation is unrendered.
* A copy of the live timer that arrives during its render's lease asks to be
  **retried** (action ``retry``): if that render dies, the copy renders after the lease.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

DEFAULT_QUIET = 15.0
DEFAULT_MAX_WAIT = 120.0
#: how long a claimed render may take before a redelivered timer renders again; keep it at or
#: below the timer queue's visibility timeout so a render that failed is retried by redelivery
DEFAULT_LEASE = 180.0
DEFAULT_LOST_TIMER_GRACE = 300.0
#: an armed timer whose send was not confirmed this long ago is taken as never sent (the sender
#: died between the state write and the send); a send takes milliseconds, a stuck one times out first
DEFAULT_SEND_GRACE = 60.0

Phase = Literal["idle", "waiting", "rendering"]
Action = Literal["render", "wait", "idle", "drop", "retry"]


@dataclass(frozen=True)
class DebounceState:
    """Per-cluster debounce state (one DynamoDB item in the AWS adapter)."""

    #: first change not covered by a render yet (None: nothing pending)
    first_change_at: float | None = None
    last_change_at: float | None = None
    #: newest generation a change notification announced
    latest_generation: int = 0
    #: newest generation a render reported as done
    last_rendered_generation: int = 0
    phase: Phase = "idle"
    #: the single live timer (phase waiting) or the timer whose render is running (phase rendering)
    timer_id: str | None = None
    timer_due_at: float | None = None
    lease_until: float | None = None
    #: when the live timer was armed, while its send is not confirmed (None: sent, or no timer)
    timer_unconfirmed_since: float | None = None
    #: optimistic-concurrency counter, bumped by the store on every write
    version: int = 0
    #: renders of the pending changes that failed in a row (reset by a successful render)
    render_failures: int = 0
    #: IDs of the last few writes, newest last (set by the runner, not by the transitions below):
    #: a writer whose conditional write landed but whose response was lost finds its ID here
    recent_writes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Decision:
    """What to do now. ``render``: render the latest generation, then call ``on_rendered`` with ``timer_id``."""

    action: Action
    wait_seconds: float = 0.0
    reason: str = ""
    generation: int | None = None
    timer_id: str | None = None
    #: filled in by adapters that serve several clusters (the timer message names it)
    cluster: str | None = None

    @property
    def render(self) -> bool:
        return self.action == "render"


@dataclass(frozen=True)
class Step:
    """Result of a transition: the new state, the decision, and a timer to send (delay) if any."""

    state: DebounceState
    decision: Decision
    arm: float | None = None


def decide(
    state: DebounceState, now: float, quiet: float = DEFAULT_QUIET, max_wait: float = DEFAULT_MAX_WAIT
) -> Decision:
    """Render now, wait N seconds, or idle (nothing unrendered)."""
    if state.first_change_at is None:
        return Decision("idle", reason="no unrendered change")
    last = state.last_change_at if state.last_change_at is not None else state.first_change_at
    quiet_due = last + quiet
    cap_due = state.first_change_at + max_wait
    due = min(quiet_due, cap_due)
    if now >= due:
        why = f"quiet for {quiet:g}s" if quiet_due <= cap_due else f"changes kept coming for {max_wait:g}s"
        return Decision("render", reason=why, generation=state.latest_generation)
    return Decision("wait", wait_seconds=due - now, reason=f"render due in {due - now:.1f}s")


def timer_alive(
    state: DebounceState,
    now: float,
    lost_timer_grace: float = DEFAULT_LOST_TIMER_GRACE,
    send_grace: float = DEFAULT_SEND_GRACE,
) -> bool:
    """Is a timer (or a render it started) still expected to report back?"""
    if state.phase == "waiting":
        if state.timer_unconfirmed_since is not None:  # saved, but the send never said it went out
            return now < state.timer_unconfirmed_since + send_grace
        return state.timer_due_at is None or now < state.timer_due_at + lost_timer_grace
    if state.phase == "rendering":
        return state.lease_until is not None and now < state.lease_until
    return False


def _arm(state: DebounceState, now: float, delay: float, timer_id: str, reason: str) -> Step:
    delay = max(0.0, delay)
    armed = replace(
        state, phase="waiting", timer_id=timer_id, timer_due_at=now + delay, lease_until=None,
        timer_unconfirmed_since=now,
    )  # fmt: skip
    return Step(armed, Decision("wait", wait_seconds=delay, reason=reason, timer_id=timer_id), arm=delay)


def on_change(
    state: DebounceState,
    generation: int,
    now: float,
    *,
    new_timer_id: str,
    quiet: float = DEFAULT_QUIET,
    max_wait: float = DEFAULT_MAX_WAIT,
    lost_timer_grace: float = DEFAULT_LOST_TIMER_GRACE,
    send_grace: float = DEFAULT_SEND_GRACE,
) -> Step:
    """A generation was written (or found unchanged): record it; arm a timer only if none is alive.

    An already noted generation re-arms when a generation is still unrendered and its timer is dead
    (never sent, lost, or its render's lease ran out): whatever killed it, the next discovery heals it.
    """
    if generation <= max(state.latest_generation, state.last_rendered_generation):
        unrendered = state.latest_generation > state.last_rendered_generation
        if unrendered and not timer_alive(state, now, lost_timer_grace, send_grace):
            pending = replace(
                state,
                first_change_at=state.first_change_at if state.first_change_at is not None else now,
                last_change_at=state.last_change_at if state.last_change_at is not None else now,
            )
            dead = "its render's lease ran out" if state.phase == "rendering" else "its timer was lost"
            return _arm(
                pending, now, 0.0, new_timer_id, f"generation {state.latest_generation} unrendered and {dead}: re-armed"
            )
        return Step(state, Decision("drop", reason=f"generation {generation} already noted"))
    noted = replace(
        state,
        latest_generation=generation,
        last_change_at=now,
        first_change_at=state.first_change_at if state.first_change_at is not None else now,
    )
    if timer_alive(state, now, lost_timer_grace, send_grace):
        return Step(noted, Decision("wait", reason=f"timer already {state.phase}", timer_id=state.timer_id))
    due = decide(noted, now, quiet, max_wait)
    return _arm(noted, now, due.wait_seconds, new_timer_id, "timer armed")


def on_timer(
    state: DebounceState,
    timer_id: str,
    now: float,
    *,
    new_timer_id: str,
    quiet: float = DEFAULT_QUIET,
    max_wait: float = DEFAULT_MAX_WAIT,
    lease: float = DEFAULT_LEASE,
) -> Step:
    """A timer fired: drop it if it is not the live one, else re-arm once or claim the render."""
    if timer_id != state.timer_id or state.phase == "idle":
        return Step(state, Decision("drop", reason=f"timer {timer_id} is not the live one"))
    if state.phase == "rendering":
        if state.lease_until is not None and now < state.lease_until:
            # not acknowledged: if that render dies, this copy (redelivered after the lease) renders
            wait = state.lease_until - now
            reason = f"duplicate timer: its render is in progress; retry after the lease ({wait:.0f} s)"
            return Step(state, Decision("retry", wait_seconds=wait, reason=reason, timer_id=timer_id))
        # the render that claimed this timer never reported back (crashed, timed out): try again
        retry = replace(state, lease_until=now + lease, first_change_at=None)
        return Step(
            retry,
            Decision(
                "render", reason="previous render did not finish", generation=state.latest_generation, timer_id=timer_id
            ),
        )
    due = decide(state, now, quiet, max_wait)
    if due.action == "idle":
        idle = replace(state, phase="idle", timer_id=None, timer_due_at=None)
        return Step(idle, Decision("idle", reason=due.reason))
    if due.action == "wait":
        return _arm(state, now, due.wait_seconds, new_timer_id, due.reason)
    claimed = replace(state, phase="rendering", lease_until=now + lease, first_change_at=None)
    return Step(claimed, replace(due, timer_id=timer_id))


def on_timer_sent(state: DebounceState, timer_id: str) -> Step:
    """The send of ``timer_id`` was confirmed: it is alive until it is due (plus the lost-timer grace)."""
    if state.timer_id != timer_id or state.timer_unconfirmed_since is None:
        return Step(state, Decision("drop", reason="nothing to confirm"))
    return Step(replace(state, timer_unconfirmed_since=None), Decision("wait", reason="timer sent", timer_id=timer_id))


def on_rendered(
    state: DebounceState,
    timer_id: str | None,
    generation: int,
    now: float,
    *,
    new_timer_id: str,
    quiet: float = DEFAULT_QUIET,
    max_wait: float = DEFAULT_MAX_WAIT,
) -> Step:
    """The render claimed by ``timer_id`` finished with ``generation``: go idle or arm the next window."""
    done = replace(state, last_rendered_generation=max(state.last_rendered_generation, generation))
    if timer_id is None or timer_id != state.timer_id or state.phase != "rendering":
        return Step(done, Decision("drop", reason="another timer took over; generation recorded"))
    if done.first_change_at is not None and done.latest_generation > done.last_rendered_generation:
        # changes arrived while rendering; they have been waiting since first_change_at already
        due = decide(done, now, quiet, max_wait)
        return _arm(done, now, due.wait_seconds, new_timer_id, "changes arrived during the render")
    idle = replace(done, phase="idle", timer_id=None, timer_due_at=None, lease_until=None, first_change_at=None)
    return Step(replace(idle, render_failures=0), Decision("idle", reason=f"generation {generation} rendered"))


def on_render_failed(
    state: DebounceState,
    timer_id: str | None,
    now: float,
    *,
    new_timer_id: str,
    retry_after: float,
    max_failures: int,
) -> Step:
    """The render claimed by ``timer_id`` failed: arm a retry, or give up after ``max_failures`` in a row.

    Giving up is the decision ``drop`` (the caller dead-letters and alarms); the state goes idle
    and the next change renders again, so a fixed graph recovers on its own.
    """
    if timer_id is None or timer_id != state.timer_id or state.phase != "rendering":
        return Step(state, Decision("drop", reason="another timer took over"))
    failures = state.render_failures + 1
    if failures >= max_failures:
        # the given-up generation counts as not noted: the same number written again (a healed store) renders
        idle = replace(
            state, phase="idle", timer_id=None, timer_due_at=None, lease_until=None, first_change_at=None,
            render_failures=0, latest_generation=state.last_rendered_generation,
        )  # fmt: skip
        return Step(idle, Decision("drop", reason=f"render failed {failures} time(s) in a row; giving up"))
    # pending again, already quiet: the retry timer renders as soon as it fires
    pending = replace(state, render_failures=failures, first_change_at=now, last_change_at=now - retry_after)
    return _arm(pending, now, retry_after, new_timer_id, f"render failed ({failures}/{max_failures}); retrying")
