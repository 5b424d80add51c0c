"""CloudEvents that drive the GCP functions, parsed into small commands.

:func:`parse_cloud_event` accepts what functions-framework hands a
``@cloud_event`` function (a ``cloudevents`` ``CloudEvent``), a structured-mode
dict (``{"specversion", "type", ..., "data"}``) or ``(attributes, data)``, and
returns one of:

* :class:`~topocast.model.changes.InstanceChange` - Eventarc *Cloud Audit Log* event
  ``google.cloud.audit.log.v1.written`` for Compute Engine whose
  ``protoPayload.methodName`` is in :data:`METHOD_ACTIONS` (``insert`` /
  ``delete`` in their ``v1.``/``beta.`` forms, the unversioned
  ``compute.instances.insert`` of MIG- and system-driven creates, start/stop,
  preemption, host errors). Only the **completing** entry of a long-running
  operation counts (``operation.last``); the first entry is :class:`Ignored`,
  as is a failed operation (``protoPayload.status.code != 0``). The project in
  ``resourceName`` may be an ID or a number (audit logs use either).
* :class:`Reconcile` - a Cloud Scheduler run, delivered as a Pub/Sub message
  (``google.cloud.pubsub.topic.v1.messagePublished``; optional JSON body
  ``{"cluster", "reason"}``) or as a direct ``dev.topocast.reconcile.v1``
  CloudEvent; also ``bulkInsert``, which creates many VMs at once.
* :class:`DiscoverWindow`, :class:`DebounceTimer`, :class:`PublishRequest` -
  topocast's own Cloud Tasks deliveries (``dev.topocast.*.v1``); ``dev.topocast.recheck.v1`` is
  discover's delayed re-read of followed VMs (:class:`~topocast.model.changes.Recheck`, in the event table).
* :class:`ObjectWritten` - ``google.cloud.storage.object.v1.finalized`` (a graph
  generation landing in the bucket).
* :class:`Ignored` - well-formed, but nothing to do (with the reason).

A malformed event raises :class:`MalformedEvent` naming the field
(``data.protoPayload.resourceName: ...``); an event type topocast does not
know raises its subclass :class:`UnsupportedEvent`. Only pydantic is imported.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from topocast.app import event_table as table
from topocast.model import changes
from topocast.model.changes import Ignored, MalformedEvent, Recheck, Reconcile, UnsupportedEvent
from topocast.safeio.validation import load_json, validate

AUDIT_LOG = "google.cloud.audit.log.v1.written"
PUBSUB = table.GCP_PUBSUB
GCS_FINALIZED = "google.cloud.storage.object.v1.finalized"
RECONCILE = table.GCP_RECONCILE
DISCOVER_WINDOW = "dev.topocast.discover.window.v1"
DEBOUNCE_TIMER = "dev.topocast.debounce.timer.v1"
PUBLISH = "dev.topocast.publish.v1"
RECHECK = table.GCP_RECHECK
COMPUTE = "compute.googleapis.com"

#: audit-log methodName -> what discovery does with the VM (from the event table)
METHOD_ACTIONS: dict[str, changes.EventAction] = {
    k.kind: k.action
    for k in table.TABLE
    if k.cloud == "gcp" and k.route in ("eventarc-audit-log", "log-sink") and "*" not in k.kind
}
_RESOURCE = re.compile(r"^projects/(?P<project>[^/]+)/zones/(?P<zone>[^/]+)/instances/(?P<name>[^/]+)$")
#: System Event audit logs (written by Compute Engine itself; delivered through the Logging sink)
_SYSTEM_METHODS = frozenset(table.gcp_methods("log-sink"))
_MIG_AGENT = re.compile(r"^\d+@cloudservices\.gserviceaccount\.com$")


@dataclass(frozen=True)
class DiscoverWindow:
    cluster: str
    window: int
    event_id: str | None = None


@dataclass(frozen=True)
class DebounceTimer:
    body: dict[str, Any]
    event_id: str | None = None


@dataclass(frozen=True)
class PublishRequest:
    cluster: str
    generation: int
    reason: str = "rendered"
    event_id: str | None = None


@dataclass(frozen=True)
class ObjectWritten:
    bucket: str
    name: str
    generation: str | None = None
    event_id: str | None = None


Command = changes.EventOutcome | DiscoverWindow | DebounceTimer | PublishRequest | ObjectWritten


# ----- pydantic models of the payloads (aliases are the wire names, so errors read like the JSON) ------
class _Model(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="ignore", frozen=True)


class _Status(_Model):
    code: int = 0
    message: str = ""


class _AuthInfo(_Model):
    principal_email: str = Field("", alias="principalEmail")


class _RequestMetadata(_Model):
    caller_supplied_user_agent: str = Field("", alias="callerSuppliedUserAgent")


class AuditLog(_Model):
    service_name: str = Field(alias="serviceName", min_length=1)
    method_name: str = Field(alias="methodName", min_length=1)
    resource_name: str = Field(alias="resourceName", min_length=1)
    status: _Status = Field(default_factory=_Status)
    authentication_info: _AuthInfo = Field(default_factory=_AuthInfo, alias="authenticationInfo")
    request_metadata: _RequestMetadata = Field(default_factory=_RequestMetadata, alias="requestMetadata")


class _Operation(_Model):
    id: str = ""
    producer: str = ""
    first: bool = False
    last: bool = False


class _Resource(_Model):
    type: str = ""
    labels: dict[str, str] = Field(default_factory=dict)


class LogEntryData(_Model):
    """The ``data`` of an Eventarc audit-log CloudEvent (a Cloud Logging ``LogEntry``)."""

    log_name: str = Field("", alias="logName")
    proto_payload: AuditLog = Field(alias="protoPayload")
    resource: _Resource = Field(default_factory=_Resource)
    operation: _Operation | None = None
    insert_id: str = Field("", alias="insertId")
    timestamp: datetime | None = None


class _PubsubMessage(_Model):
    data: str = ""
    attributes: dict[str, str] = Field(default_factory=dict)
    message_id: str = Field("", alias="messageId")


class PubsubData(_Model):
    message: _PubsubMessage


class _TopocastReconcile(_Model):
    cluster: str | None = None
    reason: str = "requested"


class _Window(_Model):
    cluster: str = Field(min_length=1)
    window: int = Field(ge=0)


class _Followed(_Model):
    instance: str = Field(pattern=r"^[^/]+/[^/]+/[^/]+$")  # project/zone/name
    kind: str = Field(min_length=1, max_length=200)


class _Recheck(_Model):
    cluster: str = Field(min_length=1)
    attempt: int = Field(ge=1)
    instances: list[_Followed] = Field(min_length=1)


class _Publish(_Model):
    cluster: str = Field(min_length=1)
    generation: int = Field(ge=1)
    reason: str = "rendered"


class _StorageObject(_Model):
    bucket: str = Field(min_length=1)
    name: str = Field(min_length=1)
    generation: str | None = None


def _validate(model: type[_Model], data: Any, prefix: str, kind: str) -> Any:
    return validate(model, data, f"{kind} event", MalformedEvent, prefix)


# ----- getting at attributes and data -----------------------------------------------------------
def _split(event: Any) -> tuple[dict[str, Any], Any]:
    """(attributes, data) of a CloudEvent object, a structured-mode dict, or an (attributes, data) pair."""
    if isinstance(event, tuple) and len(event) == 2:
        attrs, data = event
        return dict(attrs), data
    if isinstance(event, Mapping):
        attrs = {k: v for k, v in event.items() if k not in ("data", "data_base64")}
        data = event.get("data")
        if data is None and "data_base64" in event:
            data = base64.b64decode(event["data_base64"])
        return attrs, data
    get_attributes = getattr(event, "get_attributes", None)
    if callable(get_attributes):
        return dict(get_attributes()), getattr(event, "data", None)
    raise MalformedEvent(f"not a CloudEvent: {type(event).__name__}")


def _json(data: Any, what: str) -> Any:
    return load_json(data, what, MalformedEvent)


def _object(data: Any, what: str) -> dict[str, Any]:
    value = _json(data, what)
    if not isinstance(value, dict):
        raise MalformedEvent(f"{what}: must be a JSON object, got {type(value).__name__}")
    return value


# ----- per type --------------------------------------------------------------------------------
def _audit(attrs: dict[str, Any], data: Any, where: str = "data") -> Command:
    """One audit-log LogEntry: from Eventarc (``data``) or from the Logging sink via Pub/Sub."""
    event_id = attrs.get("id")
    entry: LogEntryData = _validate(LogEntryData, _object(data, where), where, "audit log")
    log = entry.proto_payload
    if log.service_name != COMPUTE:
        return Ignored(log.method_name, f"audit log of {log.service_name}, not {COMPUTE}", event_id)
    row = table.lookup("gcp", log.method_name)
    if row is None or row.action not in ("upsert", "remove", "reconcile", "noted"):
        return Ignored(log.method_name, f"method {log.method_name} does not change cluster membership", event_id)
    op = entry.operation
    if op is not None and not op.last:
        step = "first" if op.first else "intermediate"
        return Ignored(
            log.method_name,
            f"{step} entry of operation {op.id or '?'} ({log.method_name}); acting on its last entry",
            event_id,
        )
    if log.status.code != 0:
        return Ignored(
            log.method_name, f"{log.method_name} failed (code {log.status.code}: {log.status.message})", event_id
        )
    if row.action == "reconcile":
        return table.outcome_of(row, reason=f"{log.method_name} {row.reason}", event_id=event_id)
    m = _RESOURCE.match(log.resource_name)
    if not m:
        raise MalformedEvent(
            f"audit log event: {where}.protoPayload.resourceName: expected projects/<project>/zones/<zone>/instances/"
            f"<name>, got {log.resource_name[:120]!r}"
        )
    instance_id = entry.resource.labels.get("instance_id") or None
    if instance_id is not None and not instance_id.isdigit():
        raise MalformedEvent(
            f"audit log event: {where}.resource.labels.instance_id: not numeric ({instance_id[:40]!r})"
        )
    principal = log.authentication_info.principal_email
    agent = log.request_metadata.caller_supplied_user_agent
    if "%2Fsystem_event" in entry.log_name or log.method_name in _SYSTEM_METHODS:
        origin = "system"
    elif (
        _MIG_AGENT.match(principal)
        or "managed instance group" in agent.lower()
        or not log.method_name.startswith(table.API_VERSIONS)
    ):
        origin = "mig"  # a MIG (or autohealing) acts as the Google APIs service agent, unversioned method
    else:
        origin = "api"
    facts = {"project": m.group("project"), "zone": m.group("zone"), "name": m.group("name")}
    return table.outcome_of(
        row,
        instance=f"{facts['project']}/{facts['zone']}/{facts['name']}",
        time=entry.timestamp,
        event_id=event_id,
        detail={**facts, "method": log.method_name, "origin": origin}
        | ({"instance_id": instance_id} if instance_id else {}),
    )


def _pubsub(attrs: dict[str, Any], data: Any) -> Command:
    """A Pub/Sub message: a reconcile request (JSON, the text ``reconcile``, or empty), or an audit-log
    entry routed by the Logging sink (System Event logs: preemption, host errors, maintenance)."""
    msg = _validate(PubsubData, _object(data, "data"), "data", "Pub/Sub").message
    event_id = attrs.get("id") or msg.message_id or None
    body: Any = None
    if msg.data:
        try:
            raw = base64.b64decode(msg.data, validate=True)
        except (binascii.Error, ValueError):
            raise MalformedEvent("Pub/Sub event: data.message.data: not base64") from None
        if raw.strip().lower() == b"reconcile":  # gcloud pubsub topics publish --message=reconcile
            return Reconcile(
                PUBSUB, msg.attributes.get("reason", "requested"), msg.attributes.get("cluster"), None, event_id
            )
        try:
            body = _json(raw, "Pub/Sub event: data.message.data")
        except MalformedEvent:
            raise MalformedEvent(
                "Pub/Sub event: data.message.data: neither JSON nor the text 'reconcile'"
                f" ({raw[:40].decode('utf-8', 'replace')!r})"
            ) from None
    if body is None:
        return Reconcile(
            PUBSUB, msg.attributes.get("reason", "schedule"), msg.attributes.get("cluster"), event_id=event_id
        )
    if not isinstance(body, dict):
        raise MalformedEvent("Pub/Sub event: data.message.data: expected a JSON object (or nothing)")
    if "protoPayload" in body and "logName" in body:  # a LogEntry from the system-event Logging sink
        return _audit({**attrs, "id": event_id}, body, "data.message.data")
    kind = body.get("kind", table.RECONCILE_MESSAGE)
    if kind != table.RECONCILE_MESSAGE:
        return Ignored(PUBSUB, f"Pub/Sub message of kind {kind!r}; only {table.RECONCILE_MESSAGE} is handled", event_id)
    r = _validate(_TopocastReconcile, body, "data.message.data", "Pub/Sub")
    return Reconcile(PUBSUB, r.reason if "reason" in body else "schedule", r.cluster, event_id=event_id)


def parse_cloud_event(event: Any) -> Command:
    """Parse one CloudEvent (see the module docstring).

    Every failure is a :class:`MalformedEvent` (answered 200, never redelivered):
    a shape no validator foresaw (TypeError, RecursionError...) is this event's
    fault, not a transient one.
    """
    return changes.as_malformed("CloudEvent", lambda: _parse_cloud_event(event))


def _parse_cloud_event(event: Any) -> Command:
    attrs, data = _split(event)
    ce_type = attrs.get("type")
    if not isinstance(ce_type, str) or not ce_type:
        raise MalformedEvent("CloudEvent attribute type: is required")
    event_id = attrs.get("id")
    if ce_type == AUDIT_LOG:
        return _audit(attrs, data)
    if ce_type == PUBSUB:
        return _pubsub(attrs, data)
    if ce_type == RECONCILE:
        body = _json(data, "data") or {}
        r = _validate(_TopocastReconcile, body, "data", "reconcile")
        return Reconcile(RECONCILE, r.reason, r.cluster, event_id=event_id)
    if ce_type == DISCOVER_WINDOW:
        w = _validate(_Window, _object(data, "data"), "data", "discover window")
        return DiscoverWindow(w.cluster, w.window, event_id)
    if ce_type == RECHECK:
        rc = _validate(_Recheck, _object(data, "data"), "data", "recheck")
        return Recheck(RECHECK, tuple((f.instance, f.kind) for f in rc.instances), rc.attempt, rc.cluster, event_id)
    if ce_type == DEBOUNCE_TIMER:
        return DebounceTimer(_object(data, "data"), event_id)
    if ce_type == PUBLISH:
        p = _validate(_Publish, _object(data, "data"), "data", "publish")
        return PublishRequest(p.cluster, p.generation, p.reason, event_id)
    if ce_type == GCS_FINALIZED:
        o = _validate(_StorageObject, _object(data, "data"), "data", "storage")
        return ObjectWritten(o.bucket, o.name, o.generation, event_id)
    raise UnsupportedEvent(
        f"unsupported CloudEvent type {ce_type!r} (source {attrs.get('source')!r}); topocast handles "
        f"{AUDIT_LOG}, {PUBSUB}, {GCS_FINALIZED} and its own dev.topocast.* events"
    )
