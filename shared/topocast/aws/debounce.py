"""Debounce on AWS: one DynamoDB item per cluster + delayed SQS "timer" messages.

Why this shape: Lambda has no timers, and EventBridge Scheduler needs one
schedule per timer. An SQS *standard* queue with ``DelaySeconds`` is a cheap
one-shot timer (up to 900 s), and the render function is simply its consumer.
The rules (one live timer, stale/duplicate timers dropped, render lease,
lost-timer grace) are the pure transitions of :mod:`topocast.pipeline.debounce`,
and the read-decide-write-send loop (conditional writes, idempotent retries,
rollback when the send fails) is :class:`~topocast.pipeline.debounce_runner.DebounceRunner`,
shared with GCP. This module supplies the two AWS pieces:

* :class:`DynamoDbStates` - table with partition key ``cluster`` (S); attributes
  ``first_change_at``, ``last_change_at``, ``latest_generation``,
  ``last_rendered_generation``, ``phase``, ``timer_id``, ``timer_due_at``,
  ``lease_until``, ``version``, ``recent_writes`` (L of S), ``unconfirmed_timer``
  (S, while a timer's send is not confirmed), ``leading_due_at`` (N, while a leading-edge render
  is due), ``updated_at``. The
  version token is ``version``: every put is conditioned on it (on the item
  not existing for the first write).
* :class:`SqsTimers` - ``SendMessage`` with ``DelaySeconds`` = the delay rounded
  up, at most 900 (a longer wait simply re-arms when the message arrives).

Configuration: render function timeout <= ``lease`` <= the timer queue's
visibility timeout. Then a render that died (the message is not deleted) is
redelivered after its lease and rendered again, and a duplicate delivery during
a running render is reported as a batch item failure (retried after the
visibility timeout, when the lease is over).

Callers: discover calls :meth:`~DebounceRunner.note_change` after writing a
generation (idempotent per generation, so calling it again after a retry is
safe); render calls :meth:`~DebounceRunner.on_timer` with the
:class:`~topocast.ports.debounce.Timer` each queue message's body parses into
(:func:`topocast.app.routing.timer`, where the SQS record enters) and, after a
successful render, :meth:`~DebounceRunner.mark_rendered` with the decision it got.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from topocast.aws.retry import error_code, with_retries
from topocast.pipeline.debounce import DebounceState, state_from
from topocast.pipeline.debounce_runner import DamagedState, DebounceRunner
from topocast.ports.debounce import DebouncePolicy, Timer

MAX_SQS_DELAY = 900
_NUMBERS = ("first_change_at", "last_change_at", "timer_due_at", "lease_until", "leading_due_at")
_INTS = ("latest_generation", "last_rendered_generation", "version", "render_failures")
_STRINGS = ("timer_id", "unconfirmed_timer")


@dataclass(frozen=True)
class _DamagedItem:
    """The token of an item that cannot be read: its ``version`` attribute as stored (None: it has none)."""

    version: Mapping[str, Any] | None


def create_state_table(dynamodb: Any, name: str) -> None:
    """The table the debouncer expects (partition key ``cluster``); Terraform creates the same one."""
    dynamodb.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "cluster", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "cluster", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )


def _to_item(cluster: str, state: DebounceState, now: float) -> dict[str, Any]:
    item: dict[str, Any] = {"cluster": {"S": cluster}, "phase": {"S": state.phase}, "updated_at": {"N": repr(now)}}
    for name in _NUMBERS:
        value = getattr(state, name)
        if value is not None:
            item[name] = {"N": repr(float(value))}
    for name in _INTS:
        item[name] = {"N": str(int(getattr(state, name)))}
    for name in _STRINGS:
        value = getattr(state, name)
        if value is not None:
            item[name] = {"S": value}
    item["recent_writes"] = {"L": [{"S": w} for w in state.recent_writes]}
    return item


def _from_item(item: Mapping[str, Any]) -> DebounceState:
    values: dict[str, Any] = {}
    for name in _NUMBERS:
        if name in item:
            values[name] = float(item[name]["N"])
    for name in _INTS:
        if name in item:
            values[name] = int(item[name]["N"])
    if "phase" in item:
        values["phase"] = item["phase"]["S"]
    for name in _STRINGS:
        if name in item:
            values[name] = item[name]["S"]
    if "recent_writes" in item:
        values["recent_writes"] = tuple(w["S"] for w in item["recent_writes"]["L"])
    return state_from(values)


class DynamoDbStates:
    """:class:`~topocast.pipeline.debounce_runner.StateBackend`: one item per cluster, token = ``version``."""

    def __init__(self, table: str, dynamodb: Any, clock: Callable[[], float] = time.time) -> None:
        self.table = table
        self.dynamodb = dynamodb
        self.clock = clock

    def load(self, cluster: str) -> tuple[DebounceState, int | None]:
        resp = with_retries(
            lambda: self.dynamodb.get_item(TableName=self.table, Key={"cluster": {"S": cluster}}, ConsistentRead=True),
            what=f"read debounce state of {cluster}",
        )
        if "Item" not in resp:
            return DebounceState(), None
        item = resp["Item"]
        try:
            state = _from_item(item)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise DamagedState(f"{self.table} item {cluster!r}: {exc!r}", _DamagedItem(item.get("version"))) from None
        return state, state.version

    def save(self, cluster: str, state: DebounceState, token: int | _DamagedItem | None) -> int | None:
        condition: dict[str, Any]
        if isinstance(token, _DamagedItem) and token.version is not None:  # replace exactly the damaged item
            condition = {
                "ConditionExpression": "#v = :v",
                "ExpressionAttributeNames": {"#v": "version"},
                "ExpressionAttributeValues": {":v": token.version},
            }
        elif isinstance(token, _DamagedItem):
            condition = {
                "ConditionExpression": "attribute_exists(#c) AND attribute_not_exists(#v)",
                "ExpressionAttributeNames": {"#c": "cluster", "#v": "version"},
            }
        elif token is None:
            condition = {
                "ConditionExpression": "attribute_not_exists(#c)",
                "ExpressionAttributeNames": {"#c": "cluster"},
            }
        else:
            condition = {
                "ConditionExpression": "#v = :v",
                "ExpressionAttributeNames": {"#v": "version"},
                "ExpressionAttributeValues": {":v": {"N": str(token)}},
            }
        item = _to_item(cluster, state, self.clock())
        try:
            with_retries(
                lambda: self.dynamodb.put_item(TableName=self.table, Item=item, **condition),
                what=f"write debounce state of {cluster} in {self.table}",
            )
        except Exception as exc:
            if error_code(exc) == "ConditionalCheckFailedException":
                return None
            raise
        return state.version


class SqsTimers:
    """:class:`~topocast.pipeline.debounce_runner.TimerSender`: a delayed message on the timer queue."""

    def __init__(self, queue_url: str, sqs: Any) -> None:
        self.queue_url = queue_url
        self.sqs = sqs

    def send(self, timer: Timer, delay: float) -> None:
        seconds = min(MAX_SQS_DELAY, math.ceil(delay))
        body = json.dumps(timer.to_json())
        with_retries(
            lambda: self.sqs.send_message(QueueUrl=self.queue_url, MessageBody=body, DelaySeconds=seconds),
            what=f"send debounce timer for {timer.cluster}",
        )


class DynamoSqsDebouncer(DebounceRunner):
    """The shared debounce runner over DynamoDB state and SQS delayed messages, run by ``policy``."""

    def __init__(
        self,
        table: str,
        queue_url: str,
        dynamodb: Any,
        sqs: Any,
        policy: DebouncePolicy,
        *,
        clock: Callable[[], float] = time.time,
        on_reset: Callable[[str], None] | None = None,
    ) -> None:
        states = DynamoDbStates(table, dynamodb, clock)
        super().__init__(states, SqsTimers(queue_url, sqs), policy, clock=clock, on_reset=on_reset)
        self.table = table
        self.queue_url = queue_url
        self.dynamodb = dynamodb
        self.sqs = sqs
