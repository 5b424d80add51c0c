"""Debounce on AWS: one DynamoDB item per cluster + delayed SQS "timer" messages.

Why this shape: Lambda has no timers, and EventBridge Scheduler needs one
schedule per timer. An SQS *standard* queue with ``DelaySeconds`` is a cheap
one-shot timer (up to 900 s), and the render function is simply its consumer.
The rules that make it safe (one live timer, drop stale/duplicate messages,
render lease, lost-timer grace) are the pure transitions in
:mod:`topocast.pipeline.debounce`; this module only persists and sends:

* DynamoDB table, partition key ``cluster`` (S). Attributes: ``first_change_at``,
  ``last_change_at``, ``latest_generation``, ``last_rendered_generation``,
  ``phase``, ``timer_id``, ``timer_due_at``, ``lease_until``, ``version``, ``updated_at``.
  Every write is a read-modify-write conditioned on ``version`` (optimistic
  concurrency); concurrent callers retry on ConditionalCheckFailed.
* The state is written *before* a timer is sent, so at most one timer message
  exists per cluster. If the send fails the state is rolled back (conditionally)
  and the error propagates, so the caller's input is retried; if even the
  rollback is lost, the lost-timer grace re-arms on the next change.
* Timer body: ``{"kind": "topocast.debounce.timer", "cluster", "timer_id", "armed_at", "due_at"}``.

Configuration: render function timeout <= ``lease`` <= the timer queue's
visibility timeout. Then a render that failed (the message is not deleted) is
redelivered after its lease and rendered again, while a duplicate delivery
during a running render is dropped.

Callers: discover calls :meth:`note_change` after writing a generation (it is
idempotent per generation, so calling it again after a retry is safe); render
calls :meth:`on_timer` for each queue message and, after a successful render,
:meth:`mark_rendered` with the decision it got.
"""

from __future__ import annotations

import json
import logging
import math
import random
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import fields, replace
from typing import Any

from topocast.aws.retry import error_code, with_retries
from topocast.errors import TopocastError
from topocast.pipeline import debounce as core
from topocast.pipeline.debounce import DebounceState, Decision, Step

log = logging.getLogger(__name__)

TIMER_KIND = "topocast.debounce.timer"
MAX_SQS_DELAY = 900
_NUMBERS = ("first_change_at", "last_change_at", "timer_due_at", "lease_until")
_INTS = ("latest_generation", "last_rendered_generation", "version")


def _to_item(cluster: str, state: DebounceState, now: float) -> dict[str, Any]:
    item: dict[str, Any] = {"cluster": {"S": cluster}, "phase": {"S": state.phase}, "updated_at": {"N": repr(now)}}
    for name in _NUMBERS:
        value = getattr(state, name)
        if value is not None:
            item[name] = {"N": repr(float(value))}
    for name in _INTS:
        item[name] = {"N": str(int(getattr(state, name)))}
    if state.timer_id is not None:
        item["timer_id"] = {"S": state.timer_id}
    return item


def _from_item(item: Mapping[str, Any]) -> DebounceState:
    values: dict[str, Any] = {}
    known = {f.name for f in fields(DebounceState)}
    for name in _NUMBERS:
        if name in item:
            values[name] = float(item[name]["N"])
    for name in _INTS:
        if name in item:
            values[name] = int(item[name]["N"])
    if "phase" in item:
        values["phase"] = item["phase"]["S"]
    if "timer_id" in item:
        values["timer_id"] = item["timer_id"]["S"]
    return DebounceState(**{k: v for k, v in values.items() if k in known})


def parse_timer(message: str | Mapping[str, Any]) -> dict[str, Any]:
    """Accept an SQS record (Lambda ``body`` or boto3 ``Body``), a body string, or a parsed body.

    Raises ValueError when it is not a timer message.
    """
    body: Any = message
    if isinstance(body, Mapping) and "timer_id" not in body:
        body = body.get("body", body.get("Body", body))
    if isinstance(body, str | bytes):
        try:
            body = json.loads(body)
        except json.JSONDecodeError as exc:
            raise ValueError(f"timer message is not JSON ({exc})") from None
    if not isinstance(body, Mapping) or body.get("kind") != TIMER_KIND:
        raise ValueError(f"not a {TIMER_KIND} message: {str(body)[:200]}")
    if not isinstance(body.get("cluster"), str) or not isinstance(body.get("timer_id"), str):
        raise ValueError(f"timer message lacks cluster/timer_id: {str(body)[:200]}")
    return dict(body)


class DynamoSqsDebouncer:
    """The debounce state machine persisted in DynamoDB, with SQS delayed messages as timers."""

    def __init__(
        self,
        table: str,
        queue_url: str,
        dynamodb: Any,
        sqs: Any,
        *,
        quiet: float = core.DEFAULT_QUIET,
        max_wait: float = core.DEFAULT_MAX_WAIT,
        lease: float = core.DEFAULT_LEASE,
        lost_timer_grace: float = core.DEFAULT_LOST_TIMER_GRACE,
        clock: Callable[[], float] = time.time,
        max_attempts: int = 50,
    ) -> None:
        if quiet <= 0 or max_wait < quiet:
            raise ValueError(f"debounce needs 0 < quiet <= max_wait, got quiet={quiet} max_wait={max_wait}")
        self.table = table
        self.queue_url = queue_url
        self.dynamodb = dynamodb
        self.sqs = sqs
        self.quiet = quiet
        self.max_wait = max_wait
        self.lease = lease
        self.lost_timer_grace = lost_timer_grace
        self.clock = clock
        self.max_attempts = max_attempts

    # ----- public API ---------------------------------------------------------------
    def state(self, cluster: str) -> DebounceState:
        resp = with_retries(
            lambda: self.dynamodb.get_item(TableName=self.table, Key={"cluster": {"S": cluster}}, ConsistentRead=True),
            what=f"read debounce state of {cluster}",
        )
        return _from_item(resp["Item"]) if "Item" in resp else DebounceState()

    def note_change(self, cluster: str, generation: int) -> Decision:
        """Discover wrote ``generation``: record the change, arm a timer if none is alive."""
        return self._transition(
            cluster,
            lambda s, now, tid: core.on_change(
                s,
                generation,
                now,
                new_timer_id=tid,
                quiet=self.quiet,
                max_wait=self.max_wait,
                lost_timer_grace=self.lost_timer_grace,
            ),
        ).decision

    def on_timer(self, message: str | Mapping[str, Any]) -> Decision:
        """A timer message arrived: re-arm once, drop it, or say "render now" (claiming the render).

        The decision names the cluster; after a successful render pass it to :meth:`mark_rendered`.
        """
        try:
            body = parse_timer(message)
        except ValueError as exc:
            # raising would make the queue redeliver garbage forever; a bad message is dropped
            log.warning("dropping queue message: %s", exc)
            return Decision("drop", reason=str(exc))
        timer_id, cluster = body["timer_id"], body["cluster"]
        step = self._transition(
            cluster,
            lambda s, now, tid: core.on_timer(
                s, timer_id, now, new_timer_id=tid, quiet=self.quiet, max_wait=self.max_wait, lease=self.lease
            ),
        )
        return replace(step.decision, cluster=cluster)

    def mark_rendered(self, cluster: str, decision: Decision, generation: int) -> Decision:
        """The render that ``decision`` started succeeded with ``generation``."""
        return self._transition(
            cluster,
            lambda s, now, tid: core.on_rendered(
                s, decision.timer_id, generation, now, new_timer_id=tid, quiet=self.quiet, max_wait=self.max_wait
            ),
        ).decision

    # ----- persistence ----------------------------------------------------------------
    def _transition(self, cluster: str, fn: Callable[[DebounceState, float, str], Step]) -> Step:
        new_timer_id = uuid.uuid4().hex
        for _ in range(self.max_attempts):
            before = self.state(cluster)
            now = self.clock()
            step = fn(before, now, new_timer_id)
            if step.state == before:
                return step
            after = replace(step.state, version=before.version + 1)
            if not self._put(cluster, after, before.version, now):
                time.sleep(random.uniform(0, 0.02))  # lost a race: re-read and re-decide
                continue
            if step.arm is not None:
                self._send_timer(cluster, after, before, now, step.arm)
            return replace(step, state=after)
        raise TopocastError(
            f"debounce state of cluster {cluster!r} in table {self.table} kept changing ({self.max_attempts} attempts)"
        )

    def _put(self, cluster: str, state: DebounceState, expected_version: int, now: float) -> bool:
        if expected_version == 0:
            condition: dict[str, Any] = {
                "ConditionExpression": "attribute_not_exists(#c)",
                "ExpressionAttributeNames": {"#c": "cluster"},
            }
        else:
            condition = {
                "ConditionExpression": "#v = :v",
                "ExpressionAttributeNames": {"#v": "version"},
                "ExpressionAttributeValues": {":v": {"N": str(expected_version)}},
            }
        try:
            with_retries(
                lambda: self.dynamodb.put_item(TableName=self.table, Item=_to_item(cluster, state, now), **condition),
                what=f"write debounce state of {cluster}",
            )
        except Exception as exc:
            if error_code(exc) == "ConditionalCheckFailedException":
                return False
            raise
        return True

    def _send_timer(self, cluster: str, after: DebounceState, before: DebounceState, now: float, delay: float) -> None:
        seconds = min(MAX_SQS_DELAY, math.ceil(delay))
        body = {
            "kind": TIMER_KIND,
            "cluster": cluster,
            "timer_id": after.timer_id,
            "armed_at": now,
            "due_at": now + seconds,
        }
        try:
            with_retries(
                lambda: self.sqs.send_message(
                    QueueUrl=self.queue_url, MessageBody=json.dumps(body), DelaySeconds=seconds
                ),
                what=f"send debounce timer for {cluster}",
            )
        except Exception:
            # Undo the state so the caller's retry re-arms; if the state moved on meanwhile, the
            # lost-timer grace covers it.
            rolled_back = replace(before, version=after.version + 1)
            if not self._put(cluster, rolled_back, after.version, now):
                log.warning("debounce: could not roll back state of %s after a failed timer send", cluster)
            raise
