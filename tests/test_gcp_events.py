"""Parsing the CloudEvents that drive the GCP functions: Eventarc audit logs, Pub/Sub, topocast's own tasks."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from cloudevents.http import CloudEvent

from topocast.gcp import events as ev
from topocast.model import changes
from topocast_sim.eventarc import audit_log_event, insert_pair, pubsub_event

VM = {"project": "demo-project", "project_number": "123456789012", "zone": "us-central1-a", "name": "gpu-007"}

#: an Admin Activity entry written by hand after the documented LogEntry / AuditLog shape (not by our builder)
DOCUMENTED_LAST_ENTRY: dict[str, Any] = {
    "protoPayload": {
        "@type": "type.googleapis.com/google.cloud.audit.AuditLog",
        "status": {},
        "authenticationInfo": {"principalEmail": "123456789012@cloudservices.gserviceaccount.com"},
        "requestMetadata": {"callerIp": "35.1.2.3", "callerSuppliedUserAgent": "GCE Managed Instance Group"},
        "serviceName": "compute.googleapis.com",
        "methodName": "v1.compute.instances.insert",
        "resourceName": "projects/123456789012/zones/europe-west4-b/instances/a4-pool-x7k2",
        "request": {"@type": "type.googleapis.com/compute.instances.insert"},
    },
    "insertId": "-abc123def",
    "resource": {
        "type": "gce_instance",
        "labels": {"instance_id": "4849290215838427105", "project_id": "ml-prod", "zone": "europe-west4-b"},
    },
    "timestamp": "2026-11-29T10:00:03.123456Z",
    "severity": "NOTICE",
    "logName": "projects/ml-prod/logs/cloudaudit.googleapis.com%2Factivity",
    "operation": {"id": "operation-1764410400000-5f0e", "producer": "compute.googleapis.com", "last": True},
    "receiveTimestamp": "2026-11-29T10:00:04.000000Z",
}
ATTRS = {
    "specversion": "1.0",
    "id": "abc123",
    "source": "//cloudaudit.googleapis.com/projects/ml-prod/logs/activity",
    "type": ev.AUDIT_LOG,
    "subject": "compute.googleapis.com/projects/123456789012/zones/europe-west4-b/instances/a4-pool-x7k2",
}


def test_documented_last_entry_of_a_mig_create() -> None:
    change = ev.parse_cloud_event(CloudEvent(ATTRS, DOCUMENTED_LAST_ENTRY))
    assert change == changes.InstanceChange(
        instance="123456789012/europe-west4-b/a4-pool-x7k2",
        action="upsert",
        kind="v1.compute.instances.insert",
        event_id="abc123",
        time=change.time,
    )
    assert isinstance(change, changes.InstanceChange)
    assert change.detail == {
        "project": "123456789012",
        "zone": "europe-west4-b",
        "name": "a4-pool-x7k2",
        "method": "v1.compute.instances.insert",
        "instance_id": "4849290215838427105",
        "origin": "mig",
    }
    assert change.time is not None and change.time.year == 2026


def test_only_the_last_entry_of_an_operation_counts() -> None:
    first, last = insert_pair(instance_id="42", **VM)
    ignored = ev.parse_cloud_event(first)
    assert isinstance(ignored, changes.Ignored) and "first entry" in ignored.reason and "last entry" in ignored.reason
    change = ev.parse_cloud_event(last)
    assert isinstance(change, changes.InstanceChange) and change.instance.startswith("123456789012/")
    middle = audit_log_event(instance_id="42", **VM)
    middle[1]["operation"] = {"id": "op-1", "producer": "compute.googleapis.com"}
    assert "intermediate entry" in ev.parse_cloud_event(middle).reason


@pytest.mark.parametrize(
    ("method", "action"),
    [
        ("v1.compute.instances.insert", "upsert"),
        ("beta.compute.instances.insert", "upsert"),
        ("compute.instances.insert", "upsert"),
        ("v1.compute.instances.delete", "remove"),
        ("beta.compute.instances.delete", "remove"),
        ("v1.compute.instances.stop", "remove"),
        ("compute.instances.preempted", "remove"),
        ("compute.instances.hostError", "upsert"),
    ],
)
def test_methods_map_to_actions(method: str, action: str) -> None:
    change = ev.parse_cloud_event(audit_log_event(method=method, instance_id="42", **VM))
    assert isinstance(change, changes.InstanceChange) and change.action == action and change.kind == method


def test_bulk_insert_asks_for_a_reconcile() -> None:
    cmd = ev.parse_cloud_event(audit_log_event(method="v1.compute.instances.bulkInsert", instance_id=None, **VM))
    assert isinstance(cmd, changes.Reconcile) and "bulkInsert" in cmd.reason


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"protoPayload.methodName": "v1.compute.instances.setMetadata"}, "does not change cluster membership"),
        ({"protoPayload.serviceName": "storage.googleapis.com"}, "not compute.googleapis.com"),
        ({"protoPayload.status": {"code": 8, "message": "ZONE_RESOURCE_POOL_EXHAUSTED"}}, "failed (code 8"),
    ],
)
def test_well_formed_events_with_nothing_to_do_are_ignored_with_a_reason(change: dict[str, Any], reason: str) -> None:
    attrs, data = audit_log_event(instance_id="42", **VM)
    for path, value in change.items():
        outer, inner = path.split(".")
        data[outer][inner] = value
    result = ev.parse_cloud_event((attrs, data))
    assert isinstance(result, changes.Ignored) and reason in result.reason


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda d: d["protoPayload"].pop("methodName"), "data.protoPayload.methodName: is required"),
        (lambda d: d["protoPayload"].update(resourceName="projects/p/global/networks/n"), "resourceName"),
        (lambda d: d["resource"]["labels"].update(instance_id="abc"), "data.resource.labels.instance_id"),
        (lambda d: d.pop("protoPayload"), "data.protoPayload: is required"),
        (lambda d: d["operation"].update(last="maybe"), "data.operation.last"),
    ],
)
def test_malformed_audit_logs_name_the_field(mutate: Any, field: str) -> None:
    attrs, data = audit_log_event(instance_id="42", **VM)
    mutate(data)
    with pytest.raises(changes.MalformedEvent, match=field.replace(".", r"\.")):
        ev.parse_cloud_event((attrs, data))


def test_data_that_is_not_json_or_not_an_object() -> None:
    attrs, _ = audit_log_event(instance_id="42", **VM)
    with pytest.raises(changes.MalformedEvent, match="data: not JSON"):
        ev.parse_cloud_event((attrs, b"{not json"))
    with pytest.raises(changes.MalformedEvent, match="must be a JSON object, got list"):
        ev.parse_cloud_event((attrs, "[1, 2]"))


def test_unknown_type_is_unsupported_and_says_what_is_handled() -> None:
    with pytest.raises(changes.UnsupportedEvent, match=r"unsupported CloudEvent type 'com\.example\.thing'.*audit"):
        ev.parse_cloud_event({"specversion": "1.0", "id": "1", "source": "x", "type": "com.example.thing"})
    with pytest.raises(changes.MalformedEvent, match="type: is required"):
        ev.parse_cloud_event({"specversion": "1.0", "id": "1", "source": "x"})


def test_scheduler_messages_through_pubsub() -> None:
    cmd = ev.parse_cloud_event(pubsub_event("p", "topocast-reconcile", {"cluster": "c1"}))
    assert cmd == changes.Reconcile(ev.PUBSUB, "schedule", "c1", event_id=cmd.event_id)
    empty = ev.parse_cloud_event(pubsub_event("p", "topocast-reconcile"))
    assert isinstance(empty, changes.Reconcile) and empty.cluster is None
    other = ev.parse_cloud_event(pubsub_event("p", "t", {"kind": "billing.alert"}))
    assert isinstance(other, changes.Ignored) and "billing.alert" in other.reason
    attrs, data = pubsub_event("p", "t", {})
    data["message"]["data"] = "%%%not-base64"
    with pytest.raises(changes.MalformedEvent, match=r"data\.message\.data: not base64"):
        ev.parse_cloud_event((attrs, data))
    data["message"]["data"] = base64.b64encode(b"[]").decode()
    with pytest.raises(changes.MalformedEvent, match="expected a JSON object"):
        ev.parse_cloud_event((attrs, data))


def test_topocast_task_events_and_storage_events() -> None:
    def event(ce_type: str, data: Any) -> dict[str, Any]:
        return {"specversion": "1.0", "id": "t1", "source": "//topocast.dev/tasks", "type": ce_type, "data": data}

    assert ev.parse_cloud_event(event(ev.DISCOVER_WINDOW, {"cluster": "c1", "window": 7})) == ev.DiscoverWindow(
        "c1", 7, "t1"
    )
    timer = {"kind": "topocast.debounce.timer", "cluster": "c1", "timer_id": "x"}
    assert ev.parse_cloud_event(event(ev.DEBOUNCE_TIMER, json.dumps(timer))).body == timer
    assert ev.parse_cloud_event(event(ev.PUBLISH, {"cluster": "c1", "generation": 3})) == ev.PublishRequest(
        "c1", 3, "rendered", "t1"
    )
    with pytest.raises(changes.MalformedEvent, match=r"data\.generation"):
        ev.parse_cloud_event(event(ev.PUBLISH, {"cluster": "c1", "generation": 0}))
    written = ev.parse_cloud_event(event(ev.GCS_FINALIZED, {"bucket": "b", "name": "x/y.json", "generation": "17"}))
    assert written == ev.ObjectWritten("b", "x/y.json", "17", "t1")


def test_structured_mode_dict_and_sdk_object_parse_the_same() -> None:
    attrs, data = audit_log_event(instance_id="42", **VM)
    from_sdk = ev.parse_cloud_event(CloudEvent(attrs, data))
    from_dict = ev.parse_cloud_event({**attrs, "data": data})
    from_b64 = ev.parse_cloud_event({**attrs, "data_base64": base64.b64encode(json.dumps(data).encode()).decode()})
    assert from_sdk == from_dict == from_b64
