"""What the AWS discover function receives, parsed into the neutral outcomes of ``topocast.model.changes``.

One SQS message body (or the dict it decodes to) is one of:

* an **EventBridge envelope** (``version, id, detail-type, source, account, time, region,
  resources, detail``): EC2 state changes, Auto Scaling group events, Spot / rebalance /
  capacity-reservation warnings, Capacity Block notices, S3 "Object Created", a schedule rule's
  "Scheduled Event", a tag change of an EC2 instance (``aws.tag`` "Tag Change on Resource": cluster
  membership is a tag; the instance is re-read, ``detail["changed-tag-keys"]`` lets the provider ignore
  changes of other keys), or topocast's own ``{"source": "topocast", "detail-type": "Reconcile"}`` and
  ``"Recheck"`` (discover's delayed re-read of followed instances, :class:`~topocast.model.changes.Recheck`);
* an **S3 event notification** (``{"Records": [{"eventSource": "aws:s3", ...}]}``, the bucket's
  uploads notification) or S3's one-off ``s3:TestEvent``;
* an **EventBridge Scheduler** target's own Input: any other JSON object (optional ``cluster``,
  ``reason``) or the plain text ``reconcile``.

What each kind does comes from :mod:`topocast.app.event_table` (kinds ``<source>/<detail-type>``,
``#<variant>`` where the detail decides, e.g. ``...State-change Notification#running``).
A body that is none of these raises :class:`MalformedEvent` naming the field path
(``detail.state: ...``); a well-formed event of a kind the table does not handle raises
:class:`UnsupportedEvent`, except for the sources the module subscribes to (``aws.ec2``,
``aws.autoscaling``): their other events (a failed launch, an AMI state change) are
:class:`Ignored` with the reason, never dead-lettered. Only pydantic is imported; no AWS SDK.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any
from urllib.parse import unquote_plus

from pydantic import BaseModel, ConfigDict, Field, field_validator

from topocast.app import event_table as table
from topocast.model import changes
from topocast.safeio.validation import load_json, validate

#: ``arn:<partition>:ec2:<region>:<account>:instance/<id>`` (the resource of an EC2 instance's tag change)
_INSTANCE_ARN = re.compile(r"^arn:[a-z-]+:ec2:[a-z0-9-]*:\d*:instance/(?P<id>i-[0-9a-f]{8,17})$")
#: the Auto Scaling events that move an instance in or out of a group
_ASG_MEMBERSHIP = (table.ASG_LAUNCH, table.ASG_TERMINATE, table.ASG_LAUNCH_HOOK, table.ASG_TERMINATE_HOOK)
_INSTANCE_ID = r"^i-[0-9a-f]{8,17}$"
_CAPACITY_ID = r"^cr-[0-9a-f]{8,17}$"

__all__ = ["parse_event"]


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

    @field_validator("time", mode="before")
    @classmethod
    def _placeholder_time(cls, value: Any) -> Any:
        # the time only orders changes of one instance: a placeholder ("yyyy-mm-ddThh:mm:ssZ", as the
        # EC2 docs' samples print it) or garbage must not dead-letter an otherwise valid event
        if isinstance(value, str):
            try:
                datetime.fromisoformat(value)
            except ValueError:
                return None
        return value

    @field_validator("resources", mode="before")
    @classmethod
    def _one_resource(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value  # some documented samples carry one ARN as a string


class StateChangeDetail(_Model):
    instance_id: str = Field(alias="instance-id", pattern=_INSTANCE_ID)
    state: table.Ec2State


class AutoScalingDetail(_Model):
    ec2_instance_id: str = Field(alias="EC2InstanceId", pattern=_INSTANCE_ID)
    auto_scaling_group_name: str | None = Field(None, alias="AutoScalingGroupName")
    origin: str | None = Field(None, alias="Origin")
    destination: str | None = Field(None, alias="Destination")
    action: str | None = Field(None, alias="Action")


class AutoScalingFailureDetail(_Model):
    auto_scaling_group_name: str | None = Field(None, alias="AutoScalingGroupName")
    ec2_instance_id: str | None = Field(None, alias="EC2InstanceId")
    status_message: str | None = Field(None, alias="StatusMessage", max_length=2000)


class InstanceNoticeDetail(_Model):
    instance_id: str = Field(alias="instance-id", pattern=_INSTANCE_ID)
    instance_action: str | None = Field(None, alias="instance-action")


class CapacityDetail(_Model):
    capacity_reservation_id: str | None = Field(None, alias="capacity-reservation-id")
    end_date: str | None = Field(None, alias="end-date")


class TagChangeDetail(_Model):
    """``detail`` of "Tag Change on Resource" (Tag Editor user guide, "Monitor tag changes ... with EventBridge")."""

    service: str = Field(min_length=1)
    resource_type: str = Field(alias="resource-type", min_length=1)
    changed_tag_keys: list[str] = Field(alias="changed-tag-keys", max_length=50)  # at most 50 tags per resource


class _Named(_Model):
    name: str = Field(min_length=1)


class _Key(_Model):
    key: str = Field(min_length=1)


class ObjectCreatedDetail(_Model):
    bucket: _Named
    object: _Key


class ReconcileDetail(_Model):
    cluster: str | None = None
    reason: str | None = None


class _Followed(_Model):
    instance: str = Field(pattern=_INSTANCE_ID)
    kind: str = Field(min_length=1, max_length=200)


class RecheckDetail(_Model):
    cluster: str | None = None
    attempt: int = Field(ge=1)
    instances: list[_Followed] = Field(min_length=1)


class _S3Entity(_Model):
    bucket: _Named
    object: _Key


class _S3Record(_Model):
    event_source: str = Field("aws:s3", alias="eventSource")
    event_name: str = Field(alias="eventName", min_length=1)
    s3: _S3Entity


class S3Notification(_Model):
    records: list[_S3Record] = Field(alias="Records", min_length=1)


def _validate(model: type[_Model], data: Any, prefix: str, kind: str) -> Any:
    return validate(model, data, f"{kind} event", changes.MalformedEvent, prefix)


def _row(kind: str) -> table.EventKind:
    row = table.lookup("aws", kind)
    assert row is not None, f"event table has no row {kind!r}"
    return row


def _detail(**facts: str | None) -> dict[str, str]:
    return {k: v for k, v in facts.items() if v}


# ----- what a body is ------------------------------------------------------------------------------
def _is_reconcile_text(body: Any) -> bool:
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    return isinstance(body, str) and body.strip().lower() == "reconcile"


def _load(raw: dict[str, Any] | str | bytes) -> dict[str, Any]:
    body = load_json(raw, "event body", changes.MalformedEvent)
    if not isinstance(body, dict):
        got = "nothing" if body is None else type(body).__name__
        raise changes.MalformedEvent(f"event body must be a JSON object, got {got}")
    if "detail-type" not in body and "body" in body and ("messageId" in body or "receiptHandle" in body):
        raise changes.MalformedEvent("this is an SQS record, not an EventBridge envelope: pass record['body']")
    records = body.get("Records")
    if (
        isinstance(records, list)
        and records
        and isinstance(records[0], dict)
        and records[0].get("eventSource") == "aws:sqs"
    ):
        raise changes.MalformedEvent("this is an SQS batch, not one message body: pass each record['body']")
    first = records[0] if isinstance(records, list) and records else None
    source = first.get("eventSource") if isinstance(first, dict) else None
    if isinstance(source, str) and source.endswith(".amazonaws.com"):
        # CloudTrail's own record shape (a log file in S3, a CloudTrail Lake row), not an S3 notification
        raise changes.MalformedEvent(
            f"this is a CloudTrail record ({source}), not an event the functions receive: EC2 changes arrive "
            "as EventBridge events (detail-type, source aws.ec2) on the events queue; see docs/events.md"
        )
    if "detail-type" not in body and "detail_type" in body:
        # the Capacity Block samples in the EC2 docs spell the envelope this way
        body = {**body, "detail-type": body["detail_type"], "id": body.get("id") or body.get("customer_event_id")}
    return body


def _under(uploads: str | None, bucket: str, key: str) -> bool:
    if uploads is None:
        return True  # no uploads prefix given: every object counts
    where = uploads.removeprefix("s3://")
    want_bucket, _, want_prefix = where.partition("/")
    return bucket == want_bucket and key.startswith(want_prefix.rstrip("/") + "/")


# ----- per kind ------------------------------------------------------------------------------------
def _s3_records(data: dict[str, Any], uploads: str | None) -> changes.EventOutcome:
    note = _validate(S3Notification, data, "", "S3 notification")
    created = [r for r in note.records if r.event_name.startswith("ObjectCreated")]
    inside = [r for r in created if _under(uploads, r.s3.bucket.name, unquote_plus(r.s3.object.key))]
    if inside:
        first = inside[0].s3
        return table.outcome_of(
            _row(table.S3_UPLOAD), reason=f"upload s3://{first.bucket.name}/{unquote_plus(first.object.key)}"
        )
    if created:
        return changes.Ignored(table.S3_UPLOAD, f"object(s) created outside the uploads ({uploads})")
    if all(r.event_name.startswith("ObjectRemoved") for r in note.records):
        return table.outcome_of(_row(table.S3_REMOVED))
    names = sorted({r.event_name for r in note.records})
    return changes.Ignored(f"s3/{names[0].partition(':')[0]}", f"S3 event(s) {names} do not change the fabric")


def _scheduler_input(data: dict[str, Any]) -> changes.EventOutcome:
    r = _validate(ReconcileDetail, data, "", "EventBridge Scheduler input")
    return table.outcome_of(_row(table.SCHEDULER_INPUT), reason=r.reason or "scheduler", cluster=r.cluster)


def _autoscaling(env: Envelope, kind: str) -> changes.EventOutcome:
    a: AutoScalingDetail = _validate(AutoScalingDetail, env.detail, "detail", kind)
    facts = _detail(region=env.region, group=a.auto_scaling_group_name, origin=a.origin, destination=a.destination)
    variant = ""
    if env.detail_type == table.ASG_LAUNCH and a.destination == table.WARM_POOL:
        variant = table.WARM_POOL
    elif env.detail_type == table.ASG_TERMINATE_HOOK and a.action == table.REPLACE_ROOT_VOLUME:
        variant = table.REPLACE_ROOT_VOLUME
    return table.outcome_of(
        _row(table.aws_kind(table.AUTOSCALING, env.detail_type, variant)),
        instance=a.ec2_instance_id,
        time=env.time,
        event_id=env.id,
        detail=facts,
    )


def _autoscaling_failure(env: Envelope, kind: str) -> changes.EventOutcome:
    f: AutoScalingFailureDetail = _validate(AutoScalingFailureDetail, env.detail, "detail", kind)
    row = _row(kind)
    facts = ", ".join(x for x in (f.auto_scaling_group_name and f"group {f.auto_scaling_group_name}",
                                  f.ec2_instance_id, f.status_message and f.status_message[:200]) if x)  # fmt: skip
    return table.outcome_of(row, reason=f"{row.reason} ({facts})" if facts else row.reason, event_id=env.id)


def _instance_notice(env: Envelope, kind: str) -> changes.EventOutcome:
    n: InstanceNoticeDetail = _validate(InstanceNoticeDetail, env.detail, "detail", kind)
    row = _row(kind)
    reason = f"{row.reason} (instance-action {n.instance_action})" if n.instance_action else row.reason
    return table.outcome_of(row, instance=n.instance_id, reason=reason, event_id=env.id)


def _capacity_notice(env: Envelope, kind: str) -> changes.EventOutcome:
    c: CapacityDetail = _validate(CapacityDetail, env.detail, "detail", kind)
    row = _row(kind)
    reservation = c.capacity_reservation_id or next((r.rpartition("/")[2] for r in env.resources), None)
    reason = f"{env.detail_type} {reservation}: {row.reason}" if reservation else row.reason
    return table.outcome_of(row, reason=reason, time=env.time, event_id=env.id)


def _tag_change(env: Envelope, kind: str) -> changes.EventOutcome:
    t: TagChangeDetail = _validate(TagChangeDetail, env.detail, "detail", kind)
    if (t.service, t.resource_type) != ("ec2", "instance"):
        return changes.Ignored(
            kind,
            f"tag change of a {t.service} {t.resource_type}: {_row(table.aws_kind(table.TAG, '*')).reason}",
            env.id,
        )
    ids = [m["id"] for r in env.resources if (m := _INSTANCE_ARN.match(r))]
    if len(ids) != 1:
        raise changes.MalformedEvent(
            f"{kind} event: resources: expected one EC2 instance ARN, got {env.resources[:3]!r}"
        )
    # the changed keys ride along: the provider ignores a change of keys that do not decide membership
    facts = {**_detail(region=env.region), "changed-tag-keys": ",".join(sorted(t.changed_tag_keys))}
    return table.outcome_of(_row(kind), instance=ids[0], time=env.time, event_id=env.id, detail=facts)


def _object_created(env: Envelope, kind: str, uploads: str | None) -> changes.EventOutcome:
    o: ObjectCreatedDetail = _validate(ObjectCreatedDetail, env.detail, "detail", kind)
    if not _under(uploads, o.bucket.name, o.object.key):
        return changes.Ignored(kind, f"s3://{o.bucket.name}/{o.object.key} is outside the uploads ({uploads})", env.id)
    reason = f"upload s3://{o.bucket.name}/{o.object.key}"
    return table.outcome_of(_row(kind), reason=reason, time=env.time, event_id=env.id)


def parse_event(body: dict[str, Any] | str | bytes, *, uploads: str | None = None) -> changes.EventOutcome:
    """Parse one SQS message body (dict, JSON text, or the text ``reconcile``) into its outcome.

    ``uploads`` (``s3://bucket/prefix``): objects created outside it are ignored, not a reconcile.
    Every failure is a :class:`MalformedEvent`, so the caller dead-letters this record with its
    reason and the rest of the batch goes on; a shape no validator foresaw (TypeError,
    RecursionError...) included.
    """
    return changes.as_malformed("event body", lambda: _parse_event(body, uploads))


def _parse_event(body: dict[str, Any] | str | bytes, uploads: str | None) -> changes.EventOutcome:
    if _is_reconcile_text(body):
        return table.outcome_of(_row(table.TEXT_RECONCILE))
    data = _load(body)
    if "detail-type" not in data:
        if data.get("Event") == "s3:TestEvent":
            return table.outcome_of(_row(table.S3_TEST))
        if "Records" in data:
            return _s3_records(data, uploads)
        if not {"source", "detail"} & data.keys():
            return _scheduler_input(data)
    env: Envelope = _validate(Envelope, data, "", "EventBridge")
    kind = f"{env.source}/{env.detail_type}"
    if env.source == table.EC2 and env.detail_type == table.STATE_CHANGE:
        d: StateChangeDetail = _validate(StateChangeDetail, env.detail, "detail", kind)
        facts = _detail(state=d.state, region=env.region)
        return table.outcome_of(
            _row(table.state_kind(d.state)),
            instance=d.instance_id,
            time=env.time,
            event_id=env.id,
            detail=facts,
        )
    if env.source == table.AUTOSCALING and env.detail_type in _ASG_MEMBERSHIP:
        return _autoscaling(env, kind)
    if env.source == table.EC2 and env.detail_type in table.INSTANCE_NOTICES:
        return _instance_notice(env, kind)
    if env.source == table.EC2 and env.detail_type in table.CAPACITY_NOTICES:
        return _capacity_notice(env, kind)
    if env.source == table.TAG and env.detail_type == table.TAG_CHANGE_TYPE:
        return _tag_change(env, kind)
    if env.source == table.S3 and env.detail_type == table.OBJECT_CREATED:
        return _object_created(env, kind, uploads)
    if env.source == table.SCHEDULE and env.detail_type == table.SCHEDULED:
        rule = env.resources[0] if env.resources else None
        reason = f"schedule {rule}" if rule else "schedule"
        return table.outcome_of(_row(kind), reason=reason, time=env.time, event_id=env.id)
    if env.source == table.TOPOCAST and env.detail_type == table.RECHECK:
        rc: RecheckDetail = _validate(RecheckDetail, env.detail, "detail", kind)
        pairs = tuple((f.instance, f.kind) for f in rc.instances)
        return changes.Recheck(kind, pairs, rc.attempt, rc.cluster, env.id)
    if env.source == table.TOPOCAST and env.detail_type == table.RECONCILE:
        r = _validate(ReconcileDetail, env.detail, "detail", kind)
        return table.outcome_of(
            _row(kind), reason=r.reason or "requested", cluster=r.cluster, time=env.time, event_id=env.id
        )
    if env.source == table.AUTOSCALING and env.detail_type in table.ASG_FAILURES:
        return _autoscaling_failure(env, kind)
    if env.source in table.AWS_RULES.values():  # a subscribed source: an event it sends is never dead-lettered
        return changes.Ignored(kind, f"{env.detail_type}: {_row(f'{env.source}/*').reason}", env.id)
    sources = sorted({k.kind.partition("/")[0] for k in table.TABLE if k.cloud == "aws" and k.kind.startswith("aws.")})
    raise changes.UnsupportedEvent(
        f"unsupported event source={env.source!r} detail-type={env.detail_type!r}; docs/events.md lists the "
        f"kinds topocast handles (sources {', '.join(sources)} and {table.aws_kind(table.TOPOCAST, table.RECONCILE)})"
    )
