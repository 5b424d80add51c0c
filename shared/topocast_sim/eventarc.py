"""CloudEvents shaped like Eventarc's deliveries, and a way to POST them to a function.

:func:`audit_log_event` builds what Eventarc delivers for a Compute Engine
Admin Activity audit log entry (type ``google.cloud.audit.log.v1.written``):
the CloudEvent attributes Eventarc sets (``source``
``//cloudaudit.googleapis.com/projects/P/logs/activity``, ``subject``,
``methodname``, ``servicename``, ``resourcename``, ``dataschema``) and a
``LogEntryData`` body. A long-running operation such as ``instances.insert``
writes two entries, the first (``operation.first``, with the request) when it
starts and the last (``operation.last``) when it completes; ``resourceName``
carries the project **number**, ``resource.labels.project_id`` the ID, as real
entries often do. ``origin="mig"`` makes the entry a managed instance group's
(the Google APIs service agent ``<number>@cloudservices.gserviceaccount.com``).

:func:`post` sends an event over HTTP in binary or structured content mode
with the ``cloudevents`` SDK, as Eventarc (binary) or a test client would.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
import uuid
from datetime import UTC, datetime
from typing import Any, Literal

from topocast.gcp.events import AUDIT_LOG, PUBSUB

AUDIT_SCHEMA = (
    "https://googleapis.github.io/google-cloudevents/jsonschema/google/events/cloud/audit/v1/LogEntryData.json"
)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def audit_log_event(
    *,
    project: str,
    project_number: str,
    zone: str,
    name: str,
    instance_id: str | None,
    method: str = "v1.compute.instances.insert",
    phase: Literal["first", "last", "none"] = "last",
    operation_id: str | None = None,
    origin: Literal["api", "mig"] = "api",
    status_code: int = 0,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(attributes, data) of one audit-log CloudEvent (see the module docstring)."""
    resource = f"projects/{project_number}/zones/{zone}/instances/{name}"
    insert_id = uuid.uuid4().hex[:12]
    principal = f"{project_number}@cloudservices.gserviceaccount.com" if origin == "mig" else "ops@example.com"
    agent = "GCE Managed Instance Group" if origin == "mig" else "google-cloud-sdk gcloud/500.0.0"
    payload: dict[str, Any] = {
        "@type": "type.googleapis.com/google.cloud.audit.AuditLog",
        "status": {} if status_code == 0 else {"code": status_code, "message": "QUOTA_EXCEEDED"},
        "authenticationInfo": {"principalEmail": principal},
        "requestMetadata": {"callerIp": "10.1.2.3", "callerSuppliedUserAgent": agent},
        "serviceName": "compute.googleapis.com",
        "methodName": method,
        "resourceName": resource,
        "resourceLocation": {"currentLocations": [zone]},
    }
    if phase == "first":
        payload["request"] = {"@type": "type.googleapis.com/compute.instances.insert", "name": name}
        payload["response"] = {"@type": "type.googleapis.com/operation", "status": "RUNNING"}
    labels = {"project_id": project, "zone": zone}
    if instance_id:
        labels["instance_id"] = instance_id
    timestamp = _now()
    data: dict[str, Any] = {
        "protoPayload": payload,
        "insertId": insert_id,
        "resource": {"type": "gce_instance", "labels": labels},
        "timestamp": timestamp,
        "severity": "NOTICE",
        "logName": f"projects/{project}/logs/cloudaudit.googleapis.com%2Factivity",
        "receiveTimestamp": timestamp,
    }
    if phase != "none":
        data["operation"] = {
            "id": operation_id or f"operation-{int(time.time() * 1000)}-{uuid.uuid4().hex[:8]}",
            "producer": "compute.googleapis.com",
            phase: True,
        }
    attrs = {
        "specversion": "1.0",
        "id": f"{insert_id}{int(time.time() * 1e6)}",
        "source": f"//cloudaudit.googleapis.com/projects/{project}/logs/activity",
        "type": AUDIT_LOG,
        "subject": f"compute.googleapis.com/{resource}",
        "time": timestamp,
        "datacontenttype": "application/json; charset=utf-8",
        "dataschema": AUDIT_SCHEMA,
        "methodname": method,
        "servicename": "compute.googleapis.com",
        "resourcename": resource,
        "recordedtime": timestamp,
    }
    return attrs, data


def insert_pair(**kwargs: Any) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """The two entries (first, last) of one long-running operation, sharing an operation ID."""
    op = kwargs.pop("operation_id", None) or f"operation-{uuid.uuid4().hex[:16]}"
    return [
        audit_log_event(phase="first", operation_id=op, **kwargs),
        audit_log_event(phase="last", operation_id=op, **kwargs),
    ]


def pubsub_event(project: str, topic: str, body: dict[str, Any] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """A Pub/Sub ``messagePublished`` CloudEvent, as Eventarc delivers a Cloud Scheduler message."""
    import base64

    message: dict[str, Any] = {"messageId": uuid.uuid4().hex[:16], "publishTime": _now(), "attributes": {}}
    if body is not None:
        message["data"] = base64.b64encode(json.dumps(body).encode()).decode()
    attrs = {
        "specversion": "1.0",
        "id": message["messageId"],
        "source": f"//pubsub.googleapis.com/projects/{project}/topics/{topic}",
        "type": PUBSUB,
        "time": message["publishTime"],
        "datacontenttype": "application/json",
    }
    data = {"message": message, "subscription": f"projects/{project}/subscriptions/eventarc-{topic}"}
    return attrs, data


def system_event(
    *, project: str, zone: str, name: str, instance_id: str, method: str, topic: str = "topocast-events"
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A Compute Engine System Event audit-log entry (``compute.instances.hostError``, ...) as the Logging
    sink publishes it to the events topic and Eventarc's Pub/Sub trigger delivers it (``messagePublished``)."""
    import base64

    timestamp = _now()
    entry = {
        "protoPayload": {
            "@type": "type.googleapis.com/google.cloud.audit.AuditLog",
            "status": {},
            "authenticationInfo": {},
            "requestMetadata": {"requestAttributes": {}, "destinationAttributes": {}},
            "serviceName": "compute.googleapis.com",
            "methodName": method,
            "resourceName": f"projects/{project}/zones/{zone}/instances/{name}",
            "request": {"@type": f"type.googleapis.com/{method}"},
        },
        "insertId": uuid.uuid4().hex[:12],
        "resource": {
            "type": "gce_instance",
            "labels": {"instance_id": instance_id, "project_id": project, "zone": zone},
        },
        "timestamp": timestamp,
        "severity": "INFO",
        "logName": f"projects/{project}/logs/cloudaudit.googleapis.com%2Fsystem_event",
        "operation": {"id": f"systemevent-{int(time.time() * 1000)}", "producer": method, "first": True, "last": True},
        "receiveTimestamp": timestamp,
    }
    message = {
        "messageId": uuid.uuid4().hex[:16],
        "publishTime": timestamp,
        "attributes": {"logging.googleapis.com/timestamp": timestamp},
        "data": base64.b64encode(json.dumps(entry).encode()).decode(),
    }
    attrs = {
        "specversion": "1.0",
        "id": message["messageId"],
        "source": f"//pubsub.googleapis.com/projects/{project}/topics/{topic}",
        "type": PUBSUB,
        "time": timestamp,
        "datacontenttype": "application/json",
    }
    return attrs, {"message": message, "subscription": f"projects/{project}/subscriptions/eventarc-{topic}"}


def post(url: str, attrs: dict[str, Any], data: Any, *, mode: Literal["binary", "structured"] = "binary") -> int:
    """POST one CloudEvent; returns the HTTP status (no exception for 4xx/5xx)."""
    from cloudevents.conversion import to_binary, to_structured
    from cloudevents.http import CloudEvent

    event = CloudEvent(attrs, data)
    headers, body = to_binary(event) if mode == "binary" else to_structured(event)
    req = urllib.request.Request(url, data=body, headers=dict(headers), method="POST")
    try:
        with urllib.request.urlopen(req, timeout=120) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
