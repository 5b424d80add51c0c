"""The debounce state machine wired to *some* state store and *some* timer service.

:mod:`topocast.pipeline.debounce` decides; this module runs a decision the same
way on every cloud: read the state and its version token, apply one pure
transition, write it back **only if nobody else wrote in between**, and only
then send the timer the transition asked for. A cloud adapter supplies two
small pieces:

* a :class:`StateBackend` - ``load(cluster) -> (state, token)`` and a
  conditional ``save(cluster, state, token) -> new token | None`` (None: lost
  the race; the runner re-reads and decides again). A stored state that cannot
  be read makes ``load`` raise :class:`DamagedState` with the record's token:
  the runner replaces it (:func:`topocast.pipeline.debounce.on_damaged`: a render
  of the latest generation is armed at once), logs a warning and calls ``on_reset``
  (the roots count it), on every cloud alike;
* a :class:`TimerSender` - ``send(timer, delay)``, a one-shot delivery of the
  :class:`~topocast.ports.debounce.Timer` (its :meth:`~topocast.ports.debounce.Timer.to_json`
  body) to the render function after ``delay`` seconds. The timer ID is unique
  per arm, so a sender may use it to deduplicate retries.

The knobs (quiet window, max wait, lease, lost-timer grace, render attempts, write attempts)
are one :class:`~topocast.ports.debounce.DebouncePolicy`, held whole and handed to every
transition; :meth:`DebounceRunner.on_timer` takes a :class:`~topocast.ports.debounce.Timer`
parsed where the delivery entered (:func:`topocast.app.routing.timer`).

Every write is idempotent: it appends a fresh write ID to the state's
``recent_writes``. A conditional write can land on the server while its
response is lost (timeout, connection reset); the client's retry then fails
its own condition and looks like a lost race. Taking that at face value would
re-decide on top of our own change ("generation already noted") and never send
the timer. So before re-deciding, the runner re-reads: if its write ID is in
the stored state, the write was its own and the step completes (timer sent).

A timer is sent in three steps, so that a process that dies anywhere (a Lambda
timeout or OOM, where no ``except`` runs) leaves a state someone can repair:

1. the state write names the new timer and marks it ``unconfirmed_timer``;
2. the send (the timer ID names the task on GCP, so a repeated send is deduplicated;
   on SQS a second copy is harmless: only the live timer renders);
3. a conditional write clears the mark if it still names that timer.

Dying between 1 and 3 leaves the mark: the next observer (the retried delivery,
a reconcile that finds the graph unchanged, a stale timer) re-sends that timer
(:func:`topocast.pipeline.debounce._revive`). If the send raises, the state is
also rolled back (conditionally) and the error propagates, so the caller's input
is retried. The timer body is the same on every cloud
(:class:`~topocast.ports.debounce.Timer`).
"""

from __future__ import annotations

import logging
import random
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import Any, Protocol

from topocast.errors import TopocastError
from topocast.pipeline import debounce as core
from topocast.pipeline.debounce import DebounceState, Step
from topocast.ports.debounce import DebouncePolicy, Decision, Timer

log = logging.getLogger(__name__)

__all__ = ["KEEP_WRITES", "DamagedState", "DebounceRunner", "StateBackend", "TimerSender"]

#: how many write IDs a state keeps: a lost response is recognised even if this many
#: other writers stored on top of it before the re-read
KEEP_WRITES = 8


class DamagedState(TopocastError):
    """The stored state cannot be read; ``token`` versions the damaged record, so it can be replaced."""

    def __init__(self, reason: str, token: Any) -> None:
        super().__init__(reason)
        self.token = token


class StateBackend(Protocol):
    def load(self, cluster: str) -> tuple[DebounceState, Any]:
        """The stored state (``DebounceState()`` when none) and an opaque version token (None: absent).

        Raises :class:`DamagedState` when a stored record cannot be read."""
        ...

    def save(self, cluster: str, state: DebounceState, token: Any) -> Any | None:
        """Write ``state`` if the stored version is still ``token``; the new token, or None if it moved."""
        ...


class TimerSender(Protocol):
    def send(self, timer: Timer, delay: float) -> None:
        """Deliver ``timer`` to the render function after ``delay`` seconds (its ID may name the delivery)."""
        ...


class DebounceRunner:
    """``note_change`` (discover), ``on_timer`` and ``mark_rendered`` (render) over the two backends."""

    def __init__(
        self,
        states: StateBackend,
        timers: TimerSender,
        policy: DebouncePolicy,
        *,
        clock: Callable[[], float] = time.time,
        on_reset: Callable[[str], None] | None = None,
    ) -> None:
        if policy.quiet <= 0:  # a timer due at once on every change would render every event
            raise ValueError(f"a debounce timer needs a quiet window above 0, got quiet={policy.quiet}")
        self.states = states
        self.timers = timers
        self.policy = policy
        self.clock = clock
        #: called with the cluster when its damaged state was reset (after the warning is logged)
        self.on_reset = on_reset

    def state(self, cluster: str) -> DebounceState:
        return self.states.load(cluster)[0]

    def note_change(self, cluster: str, generation: int) -> Decision:
        """A generation was written: record it; arm a timer if none is alive (idempotent per generation)."""
        step = self._transition(
            cluster,
            lambda s, now, tid: core.on_change(s, generation, now, new_timer_id=tid, policy=self.policy),
        )
        return replace(step.decision, cluster=cluster)

    def on_timer(self, timer: Timer) -> Decision:
        """A timer fired: re-arm once, drop it, or "render now" (claiming the render)."""
        step = self._transition(
            timer.cluster,
            lambda s, now, tid: core.on_timer(s, timer.timer_id, now, new_timer_id=tid, policy=self.policy),
        )
        return replace(step.decision, cluster=timer.cluster)

    def mark_rendered(self, cluster: str, decision: Decision, generation: int) -> Decision:
        """The render that ``decision`` started finished with ``generation``."""
        step = self._transition(
            cluster,
            lambda s, now, tid: core.on_rendered(
                s, decision.timer_id, generation, now, new_timer_id=tid, policy=self.policy
            ),
        )
        return replace(step.decision, cluster=cluster)

    def render_failed(self, cluster: str, decision: Decision) -> Decision:
        """The render that ``decision`` started failed: ``retry`` (the claim is released, the caller asks
        for the timer's redelivery), or ``drop`` when the policy's ``render_attempts`` renders failed in
        a row (the caller dead-letters it)."""
        step = self._transition(
            cluster, lambda s, now, tid: core.on_render_failed(s, decision.timer_id, now, policy=self.policy)
        )
        return replace(step.decision, cluster=cluster)

    def _transition(self, cluster: str, fn: Callable[[DebounceState, float, str], Step]) -> Step:
        new_timer_id = uuid.uuid4().hex
        for _ in range(self.policy.write_attempts):
            before, token = self._load(cluster)
            now = self.clock()
            step = fn(before, now, new_timer_id)
            timer_id = step.state.timer_id if step.arm is not None else None
            if step.state == before and (timer_id is None or before.unconfirmed_timer == timer_id):
                if timer_id is not None:  # a re-send of the unconfirmed live timer: nothing to write first
                    self._send(cluster, timer_id, step, now)
                    self._confirm(cluster, timer_id)
                return step
            after = _tagged(replace(step.state, version=before.version + 1, unconfirmed_timer=_mark(step)))
            saved, new_token = self._save(cluster, after, token)
            if not saved:
                time.sleep(random.uniform(0, 0.02))  # lost a race: re-read and re-decide
                continue
            if timer_id is not None:
                try:
                    self._send(cluster, timer_id, step, now)
                except Exception:
                    self._roll_back(cluster, before, after, new_token)
                    raise
                self._confirm(cluster, timer_id)
            return replace(step, state=after)
        raise TopocastError(
            f"debounce state of cluster {cluster!r} kept changing ({self.policy.write_attempts} attempts)"
        )

    def _load(self, cluster: str) -> tuple[DebounceState, Any]:
        try:
            return self.states.load(cluster)
        except DamagedState as damaged:
            return self._reset(cluster, damaged)

    def _reset(self, cluster: str, damaged: DamagedState) -> tuple[DebounceState, Any]:
        """Replace a damaged record with :func:`~topocast.pipeline.debounce.on_damaged`'s state and send its
        timer (due now): the latest generation renders whatever the record said. A send that fails leaves
        the timer marked unconfirmed (the next observer re-sends it) and raises, so the caller retries."""
        log.warning("debounce state of %s is damaged, reset; a render of the latest generation is armed: %s",
                    cluster, damaged)  # fmt: skip
        if self.on_reset is not None:
            self.on_reset(cluster)
        now = self.clock()
        step = core.on_damaged(now, new_timer_id=uuid.uuid4().hex, policy=self.policy)
        timer_id = step.state.timer_id
        assert timer_id is not None
        if self._save(cluster, _tagged(replace(step.state, unconfirmed_timer=timer_id)), damaged.token)[0]:
            self._send(cluster, timer_id, step, now)
            self._confirm(cluster, timer_id)
        return self.states.load(cluster)  # ours, or what replaced the damaged record first

    def _send(self, cluster: str, timer_id: str, step: Step, now: float) -> None:
        delay = step.arm or 0.0
        self.timers.send(Timer(cluster, timer_id, armed_at=now, due_at=now + delay), delay)

    def _confirm(self, cluster: str, timer_id: str) -> None:
        """Clear the ``unconfirmed_timer`` mark of ``timer_id`` (sent). A failure only costs a re-send
        by the next observer, so it is logged, not raised: the caller's step did happen."""
        try:
            for _ in range(self.policy.write_attempts):
                state, token = self.states.load(cluster)
                if state.unconfirmed_timer != timer_id:
                    return  # already confirmed, or another timer took over
                confirmed = _tagged(replace(state, unconfirmed_timer=None, version=state.version + 1))
                if self._save(cluster, confirmed, token)[0]:
                    return
        except Exception as exc:
            log.warning("debounce: could not confirm timer %s of %s (it will be re-sent): %s", timer_id, cluster, exc)

    def _save(self, cluster: str, state: DebounceState, token: Any) -> tuple[bool, Any]:
        """Write ``state`` (tagged by :func:`_tagged`) if the store is still at ``token``.

        Returns (saved, token to roll back from). A refused write may be our own
        whose response was lost and whose retry then failed the condition: if the
        stored state carries our write ID, it landed. The token is then only known
        when nobody wrote after us (None: do not roll back over their change).
        """
        new_token = self.states.save(cluster, state, token)
        if new_token is not None:
            return True, new_token
        write_id = state.recent_writes[-1]
        try:
            current, current_token = self.states.load(cluster)
        except DamagedState:  # still the damaged record: the write did not land
            return False, None
        if write_id not in current.recent_writes:
            return False, None
        log.info("debounce: the write to %s was ours (its response was lost); carrying on", cluster)
        return True, current_token if current.recent_writes[-1] == write_id else None

    def _roll_back(self, cluster: str, before: DebounceState, after: DebounceState, token: Any) -> None:
        """Undo ``after`` (its timer was not sent) so the caller's retry re-arms; the grace covers a failure."""
        rolled_back = _tagged(replace(before, version=after.version + 1))
        if token is None or not self._save(cluster, rolled_back, token)[0]:
            log.warning("debounce: could not roll back the state of %s after a failed timer send", cluster)


def _mark(step: Step) -> str | None:
    """``unconfirmed_timer`` after ``step``: the timer it sends; else a mark that still names the live,
    waiting timer (its sender died); else none (a claimed or idle state has no timer to send)."""
    state = step.state
    if step.arm is not None:
        return state.timer_id
    keep = state.phase == "waiting" and state.unconfirmed_timer == state.timer_id
    return state.unconfirmed_timer if keep else None


def _tagged(state: DebounceState) -> DebounceState:
    """``state`` with a fresh write ID appended to ``recent_writes`` (the last :data:`KEEP_WRITES` kept)."""
    return replace(state, recent_writes=(*state.recent_writes, uuid.uuid4().hex)[-KEEP_WRITES:])
