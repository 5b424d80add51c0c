"""What arrives on the discover queue, as cloud-neutral :mod:`topocast.changes` values.

An SQS body is an EventBridge envelope (parsed by :mod:`topocast.aws.events`), an S3 event
notification (an on-prem collector uploaded a fabric dump: a reconcile), or S3's one-off
``s3:TestEvent`` (None: nothing to do). Malformed bodies raise :class:`topocast.changes.MalformedEvent`.
"""

from __future__ import annotations

import json
from typing import Any

from topocast import changes

__all__ = ["neutral", "parse_discover_record"]


def neutral(parsed: Any) -> changes.EventOutcome:
    """The parser's value as a neutral type (a no-op once the parser returns them itself)."""
    if isinstance(parsed, changes.InstanceChange | changes.Reconcile | changes.Noted | changes.Ignored):
        return parsed
    if hasattr(parsed, "instance_id"):  # topocast.aws.events.InstanceChange
        detail = {k: v for k, v in (("state", parsed.state), ("region", parsed.region)) if v}
        return changes.InstanceChange(
            parsed.instance_id, parsed.action, parsed.source, parsed.time, parsed.event_id, detail=detail
        )
    return changes.Reconcile(  # topocast.aws.events.Reconcile
        parsed.source, parsed.reason or "requested", parsed.cluster, parsed.time, parsed.event_id
    )


def parse_discover_record(body: str) -> changes.EventOutcome | None:
    from topocast.aws import events

    try:
        data = json.loads(body)
    except (json.JSONDecodeError, TypeError):
        data = body  # the parser explains what is wrong
    if isinstance(data, dict) and "detail-type" not in data:
        if data.get("Event") == "s3:TestEvent":
            return None
        if "Records" in data:
            return changes.Reconcile("aws.s3/ObjectCreated", "upload")
    try:
        return neutral(events.parse_event(data))
    except events.MalformedEvent as exc:
        if isinstance(exc, changes.MalformedEvent):
            raise
        raise changes.MalformedEvent(str(exc)) from None
