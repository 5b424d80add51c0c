"""Debounce: turn a burst of graph changes into one render, but never starve under churn.

A render is due when the graph has been quiet for ``quiet`` seconds or when ``max_wait`` seconds
have passed since the first change that is not rendered yet, whichever comes first (every knob is a
field of the one :class:`~topocast.ports.debounce.DebouncePolicy` each transition takes)::

    due = min(last_change_at + quiet, first_change_at + max_wait)

With the leading edge (``policy.leading_edge``, setting ``TOPOCAST_DEBOUNCE_LEADING_EDGE``,
default off), a change that finds the pipeline idle - nothing unrendered, no timer alive, and
no change for at least ``quiet`` seconds - renders at once (``leading_due_at``); the changes
that follow it (the rest of a burst) debounce as above into one more render. A burst thus ends
in at most two renders, and a lone event after a quiet period does not wait out the window.

Everything here is pure: a :class:`DebounceState` plus an event (a change was
noted, a timer fired, a render finished) gives a new state, a :class:`Decision`
and possibly "arm a timer in N seconds" (:class:`Step`).
:mod:`topocast.pipeline.debounce_runner` stores the state with a conditional
write and sends the timer (on DynamoDB + SQS or Cloud Storage + Cloud Tasks);
the rules below make at-least-once delivery harmless:

* There is at most one live timer per cluster, identified by ``timer_id``. A timer
  message whose id is not the live one is dropped (duplicate or superseded).
* "Render now" does not clear the timer: the state moves to ``rendering`` with a
  lease. A redelivered copy during the lease asks to be **retried** (decision
  ``retry``): the render holding the lease may die, and then that copy, retried
  after the lease, renders again. The render stage reports back with
  :func:`on_rendered` (idle, or the next timer when changes arrived meanwhile) or
  :func:`on_render_failed`, which **releases** the claim: back to ``waiting`` on
  the same timer, due now, so the platform's retry of that delivery renders at once.
* A timer is *lost* when its send was never confirmed (``unconfirmed_timer``, kept
  by the runner: the sender died between the state write and the send), when it
  is ``lost_timer_grace`` seconds past due, or when a render's lease ran out. Any
  observer that finds a lost timer while a generation is still unrendered gets it
  going again (:func:`_revive`): a retried or repeated change notification (a
  reconcile that finds the graph unchanged), a stale timer delivery. An
  unconfirmed timer is re-sent under its own ID (idempotent, so a sender that is
  merely slow does no harm); a timer or render that ran out is re-armed due now.
* A stored state that cannot be read (hand-edited, written by another version) is replaced by
  :func:`on_damaged`: an unrendered change and a timer due now, so whatever the lost record said,
  the latest generation renders (a spare render at worst, never a pending one lost).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any, Literal, get_args

from topocast.ports.debounce import DebouncePolicy, Decision

__all__ = [
    "DebounceState",
    "Phase",
    "Step",
    "decide",
    "on_change",
    "on_damaged",
    "on_render_failed",
    "on_rendered",
    "on_timer",
    "state_from",
    "timer_alive",
    "timer_unsent",
    "unrendered",
    "was_idle",
]

Phase = Literal["idle", "waiting", "rendering"]


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
    #: optimistic-concurrency counter, bumped by the store on every write
    version: int = 0
    #: renders of the pending changes that failed in a row (reset by a successful render)
    render_failures: int = 0
    #: IDs of the last few writes, newest last (set by the runner, not by the transitions below):
    #: a writer whose conditional write landed but whose response was lost finds its ID here
    recent_writes: tuple[str, ...] = ()
    #: the live timer while its send is not confirmed (set by the runner before the send, cleared
    #: after it): an observer that finds it set presumes the sender died and re-sends that timer
    unconfirmed_timer: str | None = None
    #: a leading-edge render is due at this time (the first change after a quiet period); cleared
    #: when a render claims the pending changes
    leading_due_at: float | None = None


_TIMES = ("first_change_at", "last_change_at", "timer_due_at", "lease_until", "leading_due_at")
_COUNTS = ("latest_generation", "last_rendered_generation", "version", "render_failures")
_IDS = ("timer_id", "unconfirmed_timer")


def state_from(values: Mapping[str, Any]) -> DebounceState:
    """The state stored as ``values`` (unknown names skipped); ValueError naming the first field that is wrong."""
    known = {f.name for f in fields(DebounceState)}
    got = {k: v for k, v in values.items() if k in known}
    for name, value in got.items():
        if name in _TIMES:
            ok = value is None or (isinstance(value, int | float) and not isinstance(value, bool))
        elif name in _COUNTS:
            ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
        elif name in _IDS:
            ok = value is None or isinstance(value, str)
        elif name == "phase":
            ok = value in get_args(Phase)
        else:  # recent_writes
            ok = isinstance(value, list | tuple) and all(isinstance(w, str) for w in value)
        if not ok:
            raise ValueError(f"debounce state field {name}: unexpected value {str(value)[:80]!r}")
    if "recent_writes" in got:
        got["recent_writes"] = tuple(got["recent_writes"])
    return DebounceState(**got)


@dataclass(frozen=True)
class Step:
    """Result of a transition: the new state, the decision, and a timer to send (delay) if any."""

    state: DebounceState
    decision: Decision
    arm: float | None = None


def decide(state: DebounceState, now: float, policy: DebouncePolicy) -> Decision:
    """Render now, wait N seconds, or idle (nothing unrendered)."""
    quiet, max_wait = policy.quiet, policy.max_wait
    if state.first_change_at is None:
        return Decision("idle", reason="no unrendered change")
    if state.leading_due_at is not None and now >= state.leading_due_at:
        return Decision("render", reason="first change after a quiet period", generation=state.latest_generation)
    last = state.last_change_at if state.last_change_at is not None else state.first_change_at
    quiet_due = last + quiet
    cap_due = state.first_change_at + max_wait
    due = min(quiet_due, cap_due)
    if now >= due:
        why = f"quiet for {quiet:g}s" if quiet_due <= cap_due else f"changes kept coming for {max_wait:g}s"
        return Decision("render", reason=why, generation=state.latest_generation)
    return Decision("wait", wait_seconds=due - now, reason=f"render due in {due - now:.1f}s")


def timer_alive(state: DebounceState, now: float, policy: DebouncePolicy) -> bool:
    """Is a timer (or a render it started) still expected to report back?"""
    if state.phase == "waiting":
        return state.timer_due_at is None or now < state.timer_due_at + policy.lost_timer_grace
    if state.phase == "rendering":
        return state.lease_until is not None and now < state.lease_until
    return False


def timer_unsent(state: DebounceState) -> bool:
    """Was the live timer written but its send never confirmed (the sender may have died)?"""
    return state.phase == "waiting" and state.timer_id is not None and state.unconfirmed_timer == state.timer_id


def unrendered(state: DebounceState) -> bool:
    return state.latest_generation > state.last_rendered_generation


def _arm(state: DebounceState, now: float, delay: float, timer_id: str, reason: str) -> Step:
    delay = max(0.0, delay)
    armed = replace(state, phase="waiting", timer_id=timer_id, timer_due_at=now + delay, lease_until=None)
    return Step(armed, Decision("wait", wait_seconds=delay, reason=reason, timer_id=timer_id), arm=delay)


def _resend(state: DebounceState, now: float) -> Step:
    """Send the live timer again under its own ID, for its remaining delay (the state does not change)."""
    assert state.timer_id is not None
    delay = max(0.0, (state.timer_due_at or now) - now)
    reason = "timer re-sent: its send was never confirmed"
    return Step(state, Decision("wait", wait_seconds=delay, reason=reason, timer_id=state.timer_id), arm=delay)


def _revive(state: DebounceState, now: float, new_timer_id: str, policy: DebouncePolicy) -> Step | None:
    """Get an unrendered generation going again when its timer (or render) is lost; None: nothing to do."""
    if not unrendered(state):
        return None
    if timer_unsent(state):
        return _resend(state, now)
    if timer_alive(state, now, policy):
        return None
    # the timer never fired or the render that claimed it died: render as soon as the new timer fires
    pending = replace(
        state,
        first_change_at=state.first_change_at if state.first_change_at is not None else now,
        last_change_at=min(state.last_change_at or now, now - policy.quiet),  # quiet already: due when it fires
    )
    return _arm(pending, now, 0.0, new_timer_id, f"timer re-armed: the {state.phase} timer was lost")


def on_damaged(now: float, *, new_timer_id: str, policy: DebouncePolicy) -> Step:
    """The stored state could not be read: start over with an unrendered change and a timer due now.

    What the lost record said is unknown, so the render is armed whatever it was: the latest
    generation renders (a spare render at worst; a pending one is never lost). ``latest_generation``
    1 over ``last_rendered_generation`` 0 stands for "something unrendered": any render covers it.
    """
    pending = DebounceState(first_change_at=now, last_change_at=now - policy.quiet, latest_generation=1, version=1)
    return _arm(pending, now, 0.0, new_timer_id, "debounce state reset: a render of the latest generation is armed")


def was_idle(state: DebounceState, now: float, policy: DebouncePolicy) -> bool:
    """Nothing unrendered, no timer or render alive, and no change for at least ``quiet`` seconds."""
    if unrendered(state) or state.first_change_at is not None or timer_alive(state, now, policy):
        return False
    return state.last_change_at is None or now - state.last_change_at >= policy.quiet


def on_change(
    state: DebounceState,
    generation: int,
    now: float,
    *,
    new_timer_id: str,
    policy: DebouncePolicy,
) -> Step:
    """A new generation was written: record it; arm a timer only if none is alive.

    A generation already noted (a retried batch, a reconcile that finds the graph unchanged) arms
    nothing while its timer is alive, but gets a lost timer going again if it is still unrendered.
    With ``policy.leading_edge``, the first change after a quiet period arms a timer due now.
    """
    if generation <= max(state.latest_generation, state.last_rendered_generation):
        revived = _revive(state, now, new_timer_id, policy)
        return revived or Step(state, Decision("drop", reason=f"generation {generation} already noted"))
    leading = policy.leading_edge and was_idle(state, now, policy)
    noted = replace(
        state,
        latest_generation=generation,
        last_change_at=now,
        first_change_at=state.first_change_at if state.first_change_at is not None else now,
        leading_due_at=now if leading else state.leading_due_at,
    )
    if timer_unsent(noted):
        return _resend(noted, now)
    if timer_alive(state, now, policy):
        return Step(noted, Decision("wait", reason=f"timer already {state.phase}", timer_id=state.timer_id))
    due = decide(noted, now, policy)
    return _arm(noted, now, due.wait_seconds, new_timer_id, "timer armed (leading edge)" if leading else "timer armed")


def on_timer(
    state: DebounceState,
    timer_id: str,
    now: float,
    *,
    new_timer_id: str,
    policy: DebouncePolicy,
) -> Step:
    """A timer fired: drop it if it is not the live one, else re-arm once or claim the render.

    A stale timer that finds the live one lost while a generation is unrendered gets it going
    again; a copy of the live timer during its render's lease asks to be retried.
    """
    if timer_id != state.timer_id or state.phase == "idle":
        revived = _revive(state, now, new_timer_id, policy)
        if revived is not None:
            return replace(revived, decision=replace(revived.decision, action="drop"))  # this copy is done
        return Step(state, Decision("drop", reason=f"timer {timer_id} is not the live one"))
    if state.phase == "rendering":
        if state.lease_until is not None and now < state.lease_until:
            # retried, not dropped: if the render holding the lease died, this copy renders after it
            why = f"duplicate timer: its render is in progress (lease for {state.lease_until - now:.0f}s more)"
            return Step(state, Decision("retry", reason=why, timer_id=timer_id))
        # the render that claimed this timer never reported back (crashed, timed out): try again
        retry = replace(state, lease_until=now + policy.lease, first_change_at=None, leading_due_at=None)
        return Step(
            retry,
            Decision(
                "render", reason="previous render did not finish", generation=state.latest_generation, timer_id=timer_id
            ),
        )
    due = decide(state, now, policy)
    if due.action == "idle":
        idle = replace(state, phase="idle", timer_id=None, timer_due_at=None)
        return Step(idle, Decision("idle", reason=due.reason))
    if due.action == "wait":
        return _arm(state, now, due.wait_seconds, new_timer_id, due.reason)
    claimed = replace(
        state, phase="rendering", lease_until=now + policy.lease, first_change_at=None, leading_due_at=None
    )
    return Step(claimed, replace(due, timer_id=timer_id))


def on_rendered(
    state: DebounceState,
    timer_id: str | None,
    generation: int,
    now: float,
    *,
    new_timer_id: str,
    policy: DebouncePolicy,
) -> Step:
    """The render claimed by ``timer_id`` finished with ``generation``: go idle or arm the next window."""
    done = replace(state, last_rendered_generation=max(state.last_rendered_generation, generation))
    if timer_id is None or timer_id != state.timer_id or state.phase != "rendering":
        return Step(done, Decision("drop", reason="another timer took over; generation recorded"))
    if done.first_change_at is not None and done.latest_generation > done.last_rendered_generation:
        # changes arrived while rendering; they have been waiting since first_change_at already
        due = decide(done, now, policy)
        return _arm(done, now, due.wait_seconds, new_timer_id, "changes arrived during the render")
    idle = replace(done, phase="idle", timer_id=None, timer_due_at=None, lease_until=None, first_change_at=None)
    return Step(replace(idle, render_failures=0), Decision("idle", reason=f"generation {generation} rendered"))


def on_render_failed(
    state: DebounceState,
    timer_id: str | None,
    now: float,
    *,
    policy: DebouncePolicy,
) -> Step:
    """The render claimed by ``timer_id`` failed: release the claim, or give up after ``policy.render_attempts``
    failures in a row.

    Released: back to ``waiting`` on the same timer, due now, and the decision ``retry`` - the
    caller asks the platform to redeliver that timer, which then renders at once (no new timer
    to send, so this path is a single write). Giving up is the decision ``drop`` (the caller
    dead-letters and alarms); the state goes idle and the next change renders again, so a fixed
    graph recovers on its own. ``wait``: another timer took over; nothing to do.
    """
    if timer_id is None or timer_id != state.timer_id or state.phase != "rendering":
        return Step(state, Decision("wait", reason="another timer took over"))
    failures, max_failures = state.render_failures + 1, policy.render_attempts
    if failures >= max_failures:
        # the given-up generation counts as not noted: the same number written again (a healed store) renders
        idle = replace(
            state, phase="idle", timer_id=None, timer_due_at=None, lease_until=None, first_change_at=None,
            render_failures=0, latest_generation=state.last_rendered_generation,
        )  # fmt: skip
        return Step(idle, Decision("drop", reason=f"render failed {failures} time(s) in a row; giving up"))
    released = replace(
        state, phase="waiting", timer_due_at=now, lease_until=None, render_failures=failures,
        first_change_at=min(state.first_change_at or now, now), last_change_at=now - policy.quiet,
    )  # fmt: skip
    why = f"render failed ({failures}/{max_failures}); the claim is released and the timer retried"
    return Step(released, Decision("retry", reason=why, timer_id=timer_id))
