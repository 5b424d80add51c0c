"""EventBridge events that drive AWS discovery, parsed into two small commands.

An EventBridge rule delivers the *full envelope* (``version, id, detail-type,
source, account, time, region, resources, detail``) to its target; with an SQS
target that JSON is the message body. :func:`parse_event` takes the envelope
(as a dict or the raw body) and returns:

* :class:`InstanceChange` for ``aws.ec2`` "EC2 Instance State-change
  Notification" (``detail.instance-id``, ``detail.state``: pending/running ->
  upsert; stopping/stopped/shutting-down/terminated -> remove) and for
  ``aws.autoscaling`` "EC2 Instance Launch Successful" (upsert) /
  "EC2 Instance Terminate Successful" (remove), ``detail.EC2InstanceId``;
* :class:`Reconcile` for ``aws.events`` "Scheduled Event" (a schedule rule)
  and for the custom ``{"source": "topocast", "detail-type": "Reconcile"}``
  (optional ``detail.cluster`` and ``detail.reason``).

Anything else raises :class:`MalformedEvent` naming the field path that is
wrong (``detail.state: ...``); well-formed events of a kind topocast does not
handle raise its subclass :class:`UnsupportedEvent`, so a caller can drop those
without alarm. Only pydantic is imported; no AWS SDK.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from topocast.errors import TopocastError
from topocast.validation import load_json, validate

STATE_CHANGE = "EC2 Instance State-change Notification"
ASG_LAUNCH = "EC2 Instance Launch Successful"
ASG_TERMINATE = "EC2 Instance Terminate Successful"
SCHEDULED = "Scheduled Event"
RECONCILE = "Reconcile"

#: EC2 instance state -> what discovery does with the node.
STATE_ACTIONS: dict[str, Literal["upsert", "remove"]] = {
    "pending": "upsert",
    "running": "upsert",
    "stopping": "remove",
    "stopped": "remove",
    "shutting-down": "remove",
    "terminated": "remove",
}
_INSTANCE_ID = r"^i-[0-9a-f]{8,17}$"


class MalformedEvent(TopocastError):
    """An event body is not a valid EventBridge envelope of a kind topocast handles."""


class UnsupportedEvent(MalformedEvent):
    """A well-formed event of a source/detail-type topocast does not act on."""


@dataclass(frozen=True)
class InstanceChange:
    """One instance to re-discover (``upsert``) or drop from the graph (``remove``)."""

    instance_id: str
    action: Literal["upsert", "remove"]
    source: str  # event source + detail-type, e.g. "aws.ec2/EC2 Instance State-change Notification"
    time: datetime | None = None
    state: str | None = None  # the EC2 state named by a state-change event
    region: str | None = None
    event_id: str | None = None


@dataclass(frozen=True)
class Reconcile:
    """Rediscover the whole cluster (schedule or operator request)."""

    source: str
    time: datetime | None = None
    cluster: str | None = None
    reason: str | None = None
    rule: str | None = None  # the schedule rule ARN for "Scheduled Event"
    event_id: str | None = None


# ----- pydantic models (aliases are the wire names, so error paths read like the JSON) -----------
class _Model(BaseModel):
    # defer_build: a cold start only pays for the models of the event it actually parses
    model_config = ConfigDict(populate_by_name=True, extra="ignore", frozen=True, defer_build=True)


class Envelope(_Model):
    version: str | None = None
    id: str | None = None
    detail_type: str = Field(alias="detail-type", min_length=1)
    source: str = Field(min_length=1)
    account: str | None = None
    time: datetime | None = None
    region: str | None = None
    resources: list[str] = Field(default_factory=list)
    detail: dict[str, Any] = Field(default_factory=dict)


class StateChangeDetail(_Model):
    instance_id: str = Field(alias="instance-id", pattern=_INSTANCE_ID)
    state: Literal["pending", "running", "stopping", "stopped", "shutting-down", "terminated"]


class AutoScalingDetail(_Model):
    ec2_instance_id: str = Field(alias="EC2InstanceId", pattern=_INSTANCE_ID)
    auto_scaling_group_name: str | None = Field(None, alias="AutoScalingGroupName")


class ReconcileDetail(_Model):
    cluster: str | None = None
    reason: str | None = None


def _validate(model: type[_Model], data: Any, prefix: str, kind: str) -> Any:
    return validate(model, data, f"{kind} event", MalformedEvent, prefix)


def _load(raw: dict[str, Any] | str | bytes) -> dict[str, Any]:
    body = load_json(raw, "event body", MalformedEvent)
    if not isinstance(body, dict):
        got = "nothing" if body is None else type(body).__name__
        raise MalformedEvent(f"event body must be a JSON object, got {got}")
    if "detail-type" not in body and "body" in body and ("messageId" in body or "receiptHandle" in body):
        raise MalformedEvent("this is an SQS record, not an EventBridge envelope: pass record['body']")
    return body


def parse_event(body: dict[str, Any] | str | bytes) -> InstanceChange | Reconcile:
    """Parse one EventBridge envelope (dict or JSON text, e.g. an SQS message body).

    Every failure is a :class:`MalformedEvent`, so the caller dead-letters this
    record with its reason and the rest of the batch goes on; a shape no
    validator foresaw (TypeError, RecursionError...) included.
    """
    try:
        return _parse_event(body)
    except MalformedEvent:
        raise
    except (RecursionError, MemoryError, TypeError, ValueError, AttributeError, KeyError) as exc:
        raise MalformedEvent(f"unusable event body ({type(exc).__name__}: {str(exc)[:200]})") from None


def _parse_event(body: dict[str, Any] | str | bytes) -> InstanceChange | Reconcile:
    env = _validate(Envelope, _load(body), "", "EventBridge")
    kind = f"{env.source}/{env.detail_type}"
    if env.source == "aws.ec2" and env.detail_type == STATE_CHANGE:
        d = _validate(StateChangeDetail, env.detail, "detail", kind)
        return InstanceChange(d.instance_id, STATE_ACTIONS[d.state], kind, env.time, d.state, env.region, env.id)
    if env.source == "aws.autoscaling" and env.detail_type in (ASG_LAUNCH, ASG_TERMINATE):
        a = _validate(AutoScalingDetail, env.detail, "detail", kind)
        action: Literal["upsert", "remove"] = "upsert" if env.detail_type == ASG_LAUNCH else "remove"
        return InstanceChange(a.ec2_instance_id, action, kind, env.time, None, env.region, env.id)
    if env.source == "aws.events" and env.detail_type == SCHEDULED:
        rule = env.resources[0] if env.resources else None
        return Reconcile(kind, env.time, None, "schedule", rule, env.id)
    if env.source == "topocast" and env.detail_type == RECONCILE:
        r = _validate(ReconcileDetail, env.detail, "detail", kind)
        return Reconcile(kind, env.time, r.cluster, r.reason or "requested", None, env.id)
    raise UnsupportedEvent(
        f"unsupported event source={env.source!r} detail-type={env.detail_type!r}; topocast handles "
        f"aws.ec2/{STATE_CHANGE}, aws.autoscaling/{ASG_LAUNCH}, aws.autoscaling/{ASG_TERMINATE}, "
        f"aws.events/{SCHEDULED} and topocast/{RECONCILE}"
    )
