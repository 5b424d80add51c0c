"""What one cloud event asks of discovery, in cloud-neutral terms.

Every event parser (AWS EventBridge / S3, GCP CloudEvents / Pub/Sub) turns one delivery
into one of these, and the discover use case acts on them the same way for every cloud:

* :class:`InstanceChange` - re-read one instance (``upsert``) or drop it (``remove``);
* :class:`Reconcile` - rediscover the whole cluster;
* :class:`Noted` - logged and counted, nothing in the graph changes (e.g. an interruption warning);
* :class:`Ignored` - well-formed but nothing to do, with the reason.

A delivery that must be dead-lettered is not a value here: the parser raises
:class:`MalformedEvent` (or :class:`UnsupportedEvent`) with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from topocast.errors import TopocastError

__all__ = [
    "EventAction",
    "EventOutcome",
    "Ignored",
    "InstanceChange",
    "MalformedEvent",
    "Noted",
    "Reconcile",
    "UnsupportedEvent",
]

#: what the event table says an event kind does (``rejected`` = dead-lettered with the reason)
EventAction = Literal["upsert", "remove", "reconcile", "noted", "ignored", "rejected"]


class MalformedEvent(TopocastError):
    """A delivery is not a valid event of a kind topocast handles; it is dead-lettered with this reason."""


class UnsupportedEvent(MalformedEvent):
    """A well-formed event of a kind topocast does not act on (dead-lettered, without alarm)."""


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


#: what a parser returns for one event
EventOutcome = InstanceChange | Reconcile | Noted | Ignored
