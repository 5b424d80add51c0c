"""Make moto's SQS and EventBridge usable for a storm of 10,000 events (idempotent patches, same wire behaviour).

moto 5 answers one ``ReceiveMessage`` in ~1 s once 1,000 messages are queued:
for every message it returns it checks the retention period through
``get_queue_attributes``, which recomputes every attribute, including three
approximate counts that each scan the whole queue (O(n) per message, O(n^2) to
drain), and every visibility check converts ``datetime.utcnow()`` to epoch
milliseconds. Draining 1,000 events 10 at a time then outlasts the queue's
visibility timeout and messages come back while they are still being received.

Every ``SendMessage`` (and every event EventBridge delivers to a queue) also
computes all queue attributes, so the three counts scan the queue again; and
EventBridge builds a new JSONPath parser (a yacc table) for each of the eight
input paths of every event it delivers.

:func:`install` replaces exactly those hot spots with equivalents:

* the retention check reads the queue's ``message_retention_period`` directly;
* ``unix_time_millis()`` without an argument is ``time.time() * 1000``;
* ``delete_message`` stops at the message it deletes instead of rebuilding the list;
* the visible-message list and the approximate counts compare timestamps
  inline, one clock read per scan; attribute-name conversion is memoised;
* ``jsonpath_ng.ext.parse`` is memoised (parsed paths are immutable).

What a client sees (which messages, receipt handles, receive counts, DLQ
redrive, visibility) is unchanged; only the cost is.
"""

from __future__ import annotations

import functools
import threading
from datetime import datetime
from typing import Any

from topocast_sim import simclock

__all__ = ["install", "next_due"]

_LOCK = threading.Lock()


def _fast_unix_time_millis(original: Any) -> Any:
    def unix_time_millis(dt: datetime | None = None) -> float:
        return simclock.now() * 1000.0 if dt is None else float(original(dt))

    unix_time_millis._topocast_sim = True  # type: ignore[attr-defined]
    return unix_time_millis


def _retention_ok(self: Any, queue_name: str, message: Any) -> bool:
    queue = self.get_queue(queue_name)
    return float(queue.message_retention_period) + message.sent_timestamp / 1000 > simclock.now()


def _delete_message(self: Any, receipt_handle: str) -> None:
    from moto.sqs.exceptions import ReceiptHandleIsInvalid

    if receipt_handle in self.deleted_messages:
        return  # already deleted: SQS accepts deleting it again
    for i, message in enumerate(self._messages):
        if message.had_receipt_handle(receipt_handle):
            self.pending_messages.discard(message)
            self.deleted_messages.update(message.all_receipt_handles)
            del self._messages[i]
            return
    raise ReceiptHandleIsInvalid()


def _count_visible(self: Any) -> int:
    now = simclock.now() * 1000.0
    return sum(1 for m in self._messages if now > m.visible_at and not now < m.delayed_until)


def _visible_messages(self: Any) -> list[Any]:
    now = simclock.now() * 1000.0
    return [m for m in self._messages if now > m.visible_at and not now < m.delayed_until]


def _count_not_visible(self: Any) -> int:
    now = simclock.now() * 1000.0
    return sum(1 for m in self._messages if not now > m.visible_at)


def _count_delayed(self: Any) -> int:
    now = simclock.now() * 1000.0
    return sum(1 for m in self._messages if now < m.delayed_until)


def install() -> None:
    """Patch moto in this process (the demo's and the tests' in-process moto server)."""
    import jsonpath_ng.ext
    import moto.sqs.models as sqs

    with _LOCK:
        if not getattr(sqs.unix_time_millis, "_topocast_sim", False):
            sqs.unix_time_millis = _fast_unix_time_millis(sqs.unix_time_millis)
        sqs.SQSBackend.is_message_valid_based_on_retention_period = _retention_ok  # type: ignore[method-assign]
        sqs.Queue.delete_message = _delete_message  # type: ignore[method-assign]
        sqs.Queue.messages = property(_visible_messages)  # type: ignore[assignment]
        sqs.Queue.approximate_number_of_messages = property(_count_visible)  # type: ignore[assignment]
        sqs.Queue.approximate_number_of_messages_not_visible = property(_count_not_visible)  # type: ignore[assignment]
        sqs.Queue.approximate_number_of_messages_delayed = property(_count_delayed)  # type: ignore[assignment]
        if not hasattr(sqs.camelcase_to_underscores, "cache_info"):  # pure, and called per attribute per send
            sqs.camelcase_to_underscores = functools.lru_cache(maxsize=1024)(sqs.camelcase_to_underscores)
        if not hasattr(jsonpath_ng.ext.parse, "cache_info"):
            jsonpath_ng.ext.parse = functools.lru_cache(maxsize=256)(jsonpath_ng.ext.parse)


def next_due(queue_urls: list[str]) -> float | None:
    """The earliest simulated time (epoch seconds) at which a message of these queues, in flight or
    delayed, becomes visible; None when none is waiting. Reads the in-process moto server's queues."""
    from moto.sqs.models import sqs_backends

    names = {url.rstrip("/").rsplit("/", 1)[-1] for url in queue_urls}
    now = simclock.now() * 1000.0
    due: list[float] = []
    for regions in sqs_backends.values():
        for backend in regions.values():
            for name, queue in backend.queues.items():
                if name in names:
                    due += [t for m in queue._messages if (t := max(m.visible_at, m.delayed_until)) > now]
    return min(due) / 1000.0 if due else None
