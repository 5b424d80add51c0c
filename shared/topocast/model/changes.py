"""What one cloud event asks of discovery, in cloud-neutral terms.

Every event parser (AWS EventBridge / S3, GCP CloudEvents / Pub/Sub) turns one delivery
into one of these, and the discover use case acts on them the same way for every cloud:

* :class:`InstanceChange` - re-read one instance (``upsert``) or drop it (``remove``);
* :class:`Reconcile` - rediscover the whole cluster;
* :class:`Noted` - logged and counted, nothing in the graph changes (e.g. an interruption warning);
* :class:`Ignored` - well-formed but nothing to do, with the reason;
* :class:`Recheck` - topocast's own delayed re-read of followed instances that were not steady yet.

A delivery that must be dead-lettered is not a value here: the parser raises
:class:`MalformedEvent` (or :class:`UnsupportedEvent`) with the reason.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal, TypeVar

from topocast.errors import TopocastError

T = TypeVar("T")

__all__ = [
    "EventAction",
    "EventOutcome",
    "Ignored",
    "InstanceChange",
    "MalformedEvent",
    "Noted",
    "Recheck",
    "Reconcile",
    "UnsupportedEvent",
    "as_malformed",
]

#: what the event table says an event kind does (``rejected`` = dead-lettered with the reason)
EventAction = Literal["upsert", "remove", "reconcile", "noted", "ignored", "rejected"]


class MalformedEvent(TopocastError):
    """A delivery is not a valid event of a kind topocast handles; it is dead-lettered with this reason."""


class UnsupportedEvent(MalformedEvent):
    """A well-formed event of a kind topocast does not act on (dead-lettered, without alarm)."""


#: what a parser can raise on a shape no validator foresaw: this record's fault, never a transient one
_UNUSABLE = (RecursionError, MemoryError, TypeError, ValueError, AttributeError, KeyError)


def as_malformed(what: str, parse: Callable[[], T]) -> T:
    """``parse()``, with any unforeseen failure turned into :class:`MalformedEvent` naming ``what``,
    so the caller dead-letters this one record with its reason and the rest of the batch goes on."""
    try:
        return parse()
    except MalformedEvent:
        raise
    except _UNUSABLE as exc:
        raise MalformedEvent(f"unusable {what} ({type(exc).__name__}: {str(exc)[:200]})") from None


@dataclass(frozen=True)
class InstanceChange:
    """Re-read one instance (``upsert``) or drop it from the graph (``remove``)."""

    #: the provider's key for the instance: an EC2 instance ID, or ``project/zone/name`` on GCP
    instance: str
    action: Literal["upsert", "remove"]
    #: the event kind, as named in the event table (e.g. ``aws.ec2/state-change``)
    kind: str
    time: datetime | None = None
    event_id: str | None = None
    #: re-read until the instance is steady (running again, or gone), bounded: host maintenance
    #: and restarts, where one read could land between the stop and the start
    follow: bool = False
    #: cloud-specific facts for logs and providers (EC2 state, GCE method, origin, region, ...)
    detail: dict[str, str] = field(default_factory=dict, compare=False, hash=False)
    #: follow only: re-checks of this instance done so far (0: the event itself)
    attempt: int = 0
    #: follow only: the last re-check the bound allows; an instance that is out (stopped, even if it
    #: may still restart) is removed now, one still in transition is kept (and reported)
    final: bool = False


@dataclass(frozen=True)
class Reconcile:
    """Rediscover the whole cluster (schedule, operator request, upload, capacity change)."""

    kind: str
    reason: str = "requested"
    cluster: str | None = None
    time: datetime | None = None
    event_id: str | None = None


@dataclass(frozen=True)
class Noted:
    """Logged and counted; nothing in the graph changes (an interruption warning, a rebalance hint)."""

    kind: str
    reason: str
    instances: tuple[str, ...] = ()
    event_id: str | None = None


@dataclass(frozen=True)
class Ignored:
    """Well-formed, but nothing to do (the reason says why)."""

    kind: str
    reason: str
    event_id: str | None = None


@dataclass(frozen=True)
class Recheck:
    """Re-read followed instances that were not steady at the last read (``attempt`` of the bound).

    Sent by the discover use case to itself, delayed (an SQS message with ``DelaySeconds`` on AWS,
    a Cloud Task with a schedule time on GCP); ``instances`` are ``(instance, kind)`` pairs, the
    kind being the event that started the follow (it decides whether a stopped VM may restart).
    """

    kind: str
    instances: tuple[tuple[str, str], ...]
    attempt: int
    cluster: str | None = None
    event_id: str | None = None

    def changes(self, *, final: bool) -> list[InstanceChange]:
        """The instance changes of this re-check (``final``: the bound is reached with this one)."""
        return [
            InstanceChange(
                instance, "upsert", kind, None, self.event_id, True, {"recheck": self.kind}, self.attempt, final
            )
            for instance, kind in self.instances
        ]


#: what a parser returns for one event
EventOutcome = InstanceChange | Reconcile | Noted | Ignored | Recheck
