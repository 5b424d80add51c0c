"""Every event kind of the event table, fed in the shape the clouds document, through the real parsers
and through ``topocast events explain`` (the samples are written from the AWS / Google Cloud docs'
examples and other projects' fixtures, with concrete values where the docs show placeholders)."""

from __future__ import annotations

import base64
import copy
import json
import subprocess
import sys
from typing import Any

import pytest

from topocast.aws.events import parse_event
from topocast.cli.events import explain_delivery
from topocast.gcp.events import parse_cloud_event
from topocast.model import changes

IID = "i-0b662ef9931388ba0"


def envelope(detail_type: str, detail: dict[str, Any], source: str = "aws.ec2", **extra: Any) -> dict[str, Any]:
    return {
        "version": "0",
        "id": "1e5527d7-bb36-4607-3370-4164db56a40e",
        "detail-type": detail_type,
        "source": source,
        "account": "123456789012",
        "time": "2026-11-30T10:00:00Z",
        "region": "us-east-1",
        "resources": [f"arn:aws:ec2:us-east-1:123456789012:instance/{IID}"],
        "detail": detail,
        **extra,
    }


SPOT_WARNING = envelope("EC2 Spot Instance Interruption Warning", {"instance-id": IID, "instance-action": "terminate"})
REBALANCE = envelope("EC2 Instance Rebalance Recommendation", {"instance-id": IID})
# the interruptible-reservation sample in the EC2 docs carries `resources` as one string
CR_INTERRUPTION = {
    **envelope(
        "EC2 Capacity Reservation Instance Interruption Warning",
        {
            "instance-id": IID,
            "instance-action": "terminate",
            "instance-termination-time": "2026-11-30T10:02:00Z",
            "azId": "use1-az4",
        },
    ),
    "resources": f"arn:aws:ec2:us-east-1:123456789012:instance/{IID}",
}
CB_DETAIL = {"capacity-reservation-id": "cr-0123456789abcdef0", "end-date": "2026-12-07T11:30:00Z"}
CB_DELIVERED = envelope("Capacity Block Delivered", CB_DETAIL)
CB_EXPIRING = envelope("Capacity Block Expiration Warning", CB_DETAIL)
# as the Capacity Blocks monitoring page prints it: detail_type, customer_event_id, no id/region
CB_DELIVERED_AS_DOCUMENTED = {
    "customer_event_id": "cr-0123456789abcdef0-delivered",
    "detail_type": "Capacity Block Reservation Delivered",
    "source": "aws.ec2",
    "account": "123456789012",
    "time": "2026-11-30T11:30:00Z",
    "resources": ["arn:aws:ec2:us-east-1:123456789012:capacity-reservation/cr-0123456789abcdef0"],
    "detail": CB_DETAIL,
}
ASG_DETAIL = {
    "LifecycleActionToken": "71514b9d-6a40-4b26-8523-05e7eEXAMPLE",
    "AutoScalingGroupName": "my-asg",
    "LifecycleHookName": "my-lifecycle-hook",
    "EC2InstanceId": IID,
    "NotificationMetadata": "additional-info",
}
LAUNCH_HOOK_WARM = envelope(
    "EC2 Instance-launch Lifecycle Action",
    {
        **ASG_DETAIL,
        "LifecycleTransition": "autoscaling:EC2_INSTANCE_LAUNCHING",
        "Origin": "EC2",
        "Destination": "WarmPool",
    },
    source="aws.autoscaling",
)
TERMINATE_HOOK = envelope(  # aws-node-termination-handler's SQS sample
    "EC2 Instance-terminate Lifecycle Action",
    {**ASG_DETAIL, "LifecycleTransition": "autoscaling:EC2_INSTANCE_TERMINATING"},
    source="aws.autoscaling",
)
REPLACE_ROOT_VOLUME = envelope(
    "EC2 Instance-terminate Lifecycle Action",
    {
        **ASG_DETAIL,
        "LifecycleTransition": "autoscaling:EC2_INSTANCE_TERMINATING",
        "Origin": "AutoScalingGroup",
        "Destination": "AutoScalingGroup",
        "Action": "ReplaceRootVolume",
    },
    source="aws.autoscaling",
)
LAUNCH_DETAIL = {
    "StatusCode": "InProgress",
    "AutoScalingGroupName": "my-asg",
    "ActivityId": "87654321-4321-4321-4321-210987654321",
    "EC2InstanceId": IID,
    "Cause": "description-text",
}
LAUNCH_INTO_WARM_POOL = envelope(
    "EC2 Instance Launch Successful", {**LAUNCH_DETAIL, "Origin": "EC2", "Destination": "WarmPool"}, "aws.autoscaling"
)
LAUNCH_OUT_OF_WARM_POOL = envelope(
    "EC2 Instance Launch Successful",
    {**LAUNCH_DETAIL, "Origin": "WarmPool", "Destination": "AutoScalingGroup"},
    "aws.autoscaling",
)
S3_OBJECT_CREATED = {
    "version": "0",
    "id": "17793124-05d4-b198-2fde-7ededc63b103",
    "detail-type": "Object Created",
    "source": "aws.s3",
    "account": "111122223333",
    "time": "2021-11-12T00:00:00Z",
    "region": "ca-central-1",
    "resources": ["arn:aws:s3:::b1"],
    "detail": {
        "version": "0",
        "bucket": {"name": "b1"},
        "object": {"key": "topocast/c1/uploads/h1/ibnetdiscover.out", "size": 5, "etag": "b1946ac9"},
        "request-id": "N4N7GDK58NMKJ12R",
        "requester": "123456789012",
        "reason": "PutObject",
    },
}
UPLOADS = "s3://b1/topocast/c1/uploads"


def s3_records(event_name: str, key: str = "topocast/c1/uploads/h1/ibnetdiscover.out") -> dict[str, Any]:
    return {
        "Records": [
            {
                "eventVersion": "2.1",
                "eventSource": "aws:s3",
                "awsRegion": "us-east-1",
                "eventTime": "2026-11-30T10:00:00.000Z",
                "eventName": event_name,
                "userIdentity": {"principalId": "EXAMPLE"},
                "s3": {
                    "s3SchemaVersion": "1.0",
                    "configurationId": "topocast-uploads",
                    "bucket": {"name": "b1", "arn": "arn:aws:s3:::b1"},
                    "object": {"key": key, "size": 1024, "sequencer": "0A1B2C3D4E5F678901"},
                },
            }
        ]
    }


# ----- AWS ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("event", "kind"),
    [
        (SPOT_WARNING, "aws.ec2/EC2 Spot Instance Interruption Warning"),
        (REBALANCE, "aws.ec2/EC2 Instance Rebalance Recommendation"),
        (CR_INTERRUPTION, "aws.ec2/EC2 Capacity Reservation Instance Interruption Warning"),
    ],
)
def test_interruption_warnings_are_noted_with_their_instance(event: dict[str, Any], kind: str) -> None:
    out = parse_event(json.dumps(event))
    assert out == changes.Noted(kind, out.reason, (IID,), event["id"])  # type: ignore[union-attr]


def test_capacity_block_delivered_reconciles_and_expiry_is_noted() -> None:
    delivered = parse_event(CB_DELIVERED)
    assert isinstance(delivered, changes.Reconcile) and "cr-0123456789abcdef0" in delivered.reason
    documented = parse_event(CB_DELIVERED_AS_DOCUMENTED)
    assert isinstance(documented, changes.Reconcile)
    assert documented.kind == "aws.ec2/Capacity Block Reservation Delivered"
    assert documented.event_id == "cr-0123456789abcdef0-delivered"
    expiring = parse_event(CB_EXPIRING)
    assert (
        isinstance(expiring, changes.Noted) and expiring.instances == () and "cr-0123456789abcdef0" in expiring.reason
    )


def test_auto_scaling_lifecycle_actions_and_warm_pool() -> None:
    assert isinstance(parse_event(LAUNCH_HOOK_WARM), changes.Ignored)
    leaving = parse_event(TERMINATE_HOOK)
    assert isinstance(leaving, changes.InstanceChange) and (leaving.instance, leaving.action) == (IID, "remove")
    root = parse_event(REPLACE_ROOT_VOLUME)
    assert isinstance(root, changes.Ignored) and "root volume" in root.reason
    warm = parse_event(LAUNCH_INTO_WARM_POOL)
    assert isinstance(warm, changes.Ignored) and "warm pool" in warm.reason
    assert warm.kind == "aws.autoscaling/EC2 Instance Launch Successful#WarmPool"
    into_service = parse_event(LAUNCH_OUT_OF_WARM_POOL)
    assert isinstance(into_service, changes.InstanceChange) and into_service.action == "upsert"


def test_s3_uploads_reconcile_only_under_the_uploads_prefix() -> None:
    assert isinstance(parse_event(S3_OBJECT_CREATED, uploads=UPLOADS), changes.Reconcile)
    outside = copy.deepcopy(S3_OBJECT_CREATED)
    outside["detail"]["object"]["key"] = "topocast/c1/graphs/000000000001.json"
    assert isinstance(parse_event(outside, uploads=UPLOADS), changes.Ignored)
    created = parse_event(json.dumps(s3_records("ObjectCreated:Put")), uploads=UPLOADS)
    assert isinstance(created, changes.Reconcile) and "ibnetdiscover.out" in created.reason
    assert isinstance(parse_event(s3_records("ObjectCreated:Put", "other/x"), uploads=UPLOADS), changes.Ignored)
    removed = parse_event(s3_records("ObjectRemoved:Delete"), uploads=UPLOADS)
    assert isinstance(removed, changes.Ignored) and removed.kind == "s3/ObjectRemoved"
    test_event = {"Service": "Amazon S3", "Event": "s3:TestEvent", "Time": "2026-11-30T10:00:00.000Z", "Bucket": "b1"}
    assert isinstance(parse_event(test_event), changes.Ignored)


@pytest.mark.parametrize(
    ("body", "cluster"),
    [
        ("reconcile", None),
        (b"Reconcile\n", None),
        (json.dumps({"cluster": "c1", "reason": "nightly"}), "c1"),  # a Scheduler target's own Input
        (json.dumps({"hello": "world"}), None),
        (json.dumps({"source": "topocast", "detail-type": "Reconcile", "detail": {"cluster": "c2"}}), "c2"),
    ],
)
def test_scheduler_inputs_and_plain_text_reconcile(body: Any, cluster: str | None) -> None:
    out = parse_event(body)
    assert isinstance(out, changes.Reconcile) and out.cluster == cluster


def test_a_placeholder_time_does_not_dead_letter_a_documented_sample() -> None:
    # the EC2 docs print the Spot and rebalance samples with "time": "yyyy-mm-ddThh:mm:ssZ"
    out = parse_event({**REBALANCE, "time": "yyyy-mm-ddThh:mm:ssZ"})
    assert isinstance(out, changes.Noted) and out.instances == (IID,)
    change = parse_event(envelope("EC2 Instance State-change Notification", {"instance-id": IID, "state": "stopped"},
                                  time="yesterday"))  # fmt: skip
    assert isinstance(change, changes.InstanceChange) and change.time is None and change.action == "remove"


def test_unknown_and_broken_aws_events_are_rejected() -> None:
    with pytest.raises(changes.UnsupportedEvent, match=r"docs/events\.md"):
        parse_event(envelope("RDS DB Instance Event", {}, source="aws.rds"))
    with pytest.raises(changes.MalformedEvent, match=r"detail\.instance-id"):
        parse_event(envelope("EC2 Spot Instance Interruption Warning", {"instance-action": "terminate"}))
    with pytest.raises(changes.MalformedEvent, match="not JSON"):
        parse_event("please reconcile")
    with pytest.raises(changes.MalformedEvent, match="SQS batch"):
        parse_event({"Records": [{"messageId": "m", "eventSource": "aws:sqs", "body": "{}"}]})


# ----- GCP ---------------------------------------------------------------------------------------------
def log_entry(method: str, *, system: bool = True) -> dict[str, Any]:
    """A Compute Engine audit-log LogEntry as Cloud Logging writes it (IAP Desktop's system-event fixtures)."""
    log = "system_event" if system else "activity"
    return {
        "protoPayload": {
            "@type": "type.googleapis.com/google.cloud.audit.AuditLog",
            "status": {},
            "authenticationInfo": {},
            "requestMetadata": {"requestAttributes": {}, "destinationAttributes": {}},
            "serviceName": "compute.googleapis.com",
            "methodName": method,
            "resourceName": "projects/ml-prod/zones/us-central1-a/instances/a4-7",
            "request": {"@type": f"type.googleapis.com/{method}"},
        },
        "insertId": "n164j2e2uprm",
        "resource": {
            "type": "gce_instance",
            "labels": {"instance_id": "2162224123123123213", "project_id": "ml-prod", "zone": "us-central1-a"},
        },
        "timestamp": "2026-11-30T16:10:46.781Z",
        "severity": "INFO",
        "logName": f"projects/ml-prod/logs/cloudaudit.googleapis.com%2F{log}",
        "operation": {"id": "systemevent-1588781345487", "producer": method, "first": True, "last": True},
        "receiveTimestamp": "2026-11-30T16:10:47.109548606Z",
    }


def pubsub_push(payload: bytes) -> dict[str, Any]:
    """A raw Pub/Sub push body (what a push subscription POSTs)."""
    return {
        "message": {
            "data": base64.b64encode(payload).decode(),
            "attributes": {"logging.googleapis.com/timestamp": "2026-11-30T16:10:46.781Z"},
            "messageId": "2070443601311540",
            "publishTime": "2026-11-30T16:10:47.5Z",
        },
        "subscription": "projects/ml-prod/subscriptions/eventarc-us-central1-topocast-c1-events-sub-123",
    }


def messaged(payload: bytes) -> dict[str, Any]:
    """The CloudEvent Eventarc's Pub/Sub trigger delivers for that message."""
    return {
        "specversion": "1.0",
        "type": "google.cloud.pubsub.topic.v1.messagePublished",
        "source": "//pubsub.googleapis.com/projects/ml-prod/topics/topocast-c1-events",
        "id": "2070443601311540",
        "data": pubsub_push(payload),
    }


SYSTEM_EVENTS = [
    ("compute.instances.terminateOnHostMaintenance", "upsert", True),
    ("compute.instances.automaticRestart", "upsert", True),
    ("compute.instances.hostError", "upsert", True),
    ("compute.instances.migrateOnHostMaintenance", "upsert", True),
    ("compute.instances.guestTerminate", "upsert", True),
    ("compute.instances.preempted", "remove", False),
]


@pytest.mark.parametrize(("method", "action", "follow"), SYSTEM_EVENTS)
def test_system_events_through_the_logging_sink(method: str, action: str, follow: bool) -> None:
    out = parse_cloud_event(messaged(json.dumps(log_entry(method)).encode()))
    assert isinstance(out, changes.InstanceChange)
    assert (out.instance, out.action, out.kind, out.follow) == ("ml-prod/us-central1-a/a4-7", action, method, follow)
    assert out.detail["origin"] == "system" and out.detail["instance_id"] == "2162224123123123213"


@pytest.mark.parametrize(
    ("method", "action"),
    [
        ("v1.compute.instances.suspend", "remove"),
        ("beta.compute.instances.resume", "upsert"),
        ("beta.compute.instances.start", "upsert"),
        ("beta.compute.instances.stop", "remove"),
        ("compute.instances.delete", "remove"),
        ("compute.instances.repair.recreateInstance", "upsert"),
    ],
)
def test_admin_activity_methods_through_eventarc(method: str, action: str) -> None:
    attrs = {"specversion": "1.0", "id": "e1", "source": "//cloudaudit.googleapis.com/projects/ml-prod/logs/activity"}
    out = parse_cloud_event(
        {**attrs, "type": "google.cloud.audit.log.v1.written", "data": log_entry(method, system=False)}
    )
    assert isinstance(out, changes.InstanceChange) and out.action == action
    assert out.follow == (method == "compute.instances.repair.recreateInstance")


def test_upcoming_maintenance_is_noted() -> None:
    out = parse_cloud_event(messaged(json.dumps(log_entry("compute.instances.upcomingMaintenance")).encode()))
    assert isinstance(out, changes.Noted) and out.instances == ("ml-prod/us-central1-a/a4-7",)


def test_plain_text_and_empty_pubsub_messages_reconcile() -> None:
    out = parse_cloud_event(messaged(b"reconcile"))
    assert isinstance(out, changes.Reconcile) and out.kind == "google.cloud.pubsub.topic.v1.messagePublished"
    with pytest.raises(changes.MalformedEvent, match="neither JSON nor the text 'reconcile'"):
        parse_cloud_event(messaged(b"please do something"))


# ----- topocast events explain --------------------------------------------------------------------------
def test_explain_an_sqs_batch_one_line_per_record_and_exit_2_when_one_is_dead_lettered() -> None:
    batch = {
        "Records": [
            {"messageId": "m1", "receiptHandle": "r1", "body": json.dumps(SPOT_WARNING), "eventSource": "aws:sqs"},
            {"messageId": "m2", "receiptHandle": "r2", "eventSource": "aws:sqs",
             "body": json.dumps(envelope("RDS DB Instance Event", {}, source="aws.rds"))},
        ]
    }  # fmt: skip
    lines, code = explain_delivery(json.dumps(batch))
    assert [(line["kind"], line["action"]) for line in lines] == [
        ("aws.ec2/EC2 Spot Instance Interruption Warning", "noted"),
        ("aws.rds/RDS DB Instance Event", "rejected"),
    ]
    assert lines[0]["instances"] == [IID] and code == 2
    lines, code = explain_delivery(json.dumps({"Records": batch["Records"][:1]}))
    assert code == 0 and set(lines[0]) == {"cloud", "kind", "action", "instances", "reason"}


def test_explain_binary_mode_cloud_event_and_raw_pubsub_push() -> None:
    body = json.dumps(log_entry("compute.instances.hostError"))
    http = (
        "POST / HTTP/1.1\r\nce-specversion: 1.0\r\nce-type: google.cloud.audit.log.v1.written\r\n"
        "ce-id: x1\r\nce-source: //cloudaudit.googleapis.com/projects/ml-prod/logs/system_event\r\n"
        f"Content-Type: application/json\r\n\r\n{body}"
    )
    lines, code = explain_delivery(http)
    assert code == 0 and lines == [
        {
            "cloud": "gcp",
            "kind": "compute.instances.hostError",
            "action": "upsert",
            "instances": ["ml-prod/us-central1-a/a4-7"],
            "reason": lines[0]["reason"],
        }
    ]
    assert "re-read until it runs again" in lines[0]["reason"]
    pushed, code = explain_delivery(json.dumps(pubsub_push(b"reconcile")))
    assert code == 0 and pushed[0]["action"] == "reconcile" and pushed[0]["cloud"] == "gcp"


def test_explain_cli_exit_codes_and_stdin() -> None:
    cmd = [sys.executable, "-m", "topocast.cli", "events", "explain", "-"]
    ok = subprocess.run(cmd, input=json.dumps(LAUNCH_INTO_WARM_POOL), capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["action"] == "ignored"
    bad = subprocess.run(cmd, input="{not json", capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and json.loads(bad.stdout)["action"] == "rejected" and "Traceback" not in bad.stderr


# ----- events of subscribed sources topocast does not act on; odd deliveries -----------------------------
#: the aws_lambda_events fixture example-autoscaling-event-launch-unsuccessful.json (the AWS docs' sample)
LAUNCH_UNSUCCESSFUL = {
    **envelope(
        "EC2 Instance Launch Unsuccessful",
        {
            "StatusCode": "Failed",
            "AutoScalingGroupName": "my-auto-scaling-group",
            "ActivityId": "87654321-4321-4321-4321-210987654321",
            "Details": {"Availability Zone": "us-west-2b", "Subnet ID": "subnet-12345678"},
            "RequestId": "12345678-1234-1234-1234-123456789012",
            "StatusMessage": "message-text",
            "EndTime": "1970-01-01T00:00:00Z",
            "EC2InstanceId": "i-1234567890abcdef0",
            "StartTime": "1970-01-01T00:00:00Z",
            "Cause": "description-text",
        },
        source="aws.autoscaling",
    ),
    "resources": ["auto-scaling-group-arn", "instance-arn"],
}
TERMINATE_UNSUCCESSFUL = {**LAUNCH_UNSUCCESSFUL, "detail-type": "EC2 Instance Terminate Unsuccessful"}


@pytest.mark.parametrize(
    "event",
    [
        LAUNCH_UNSUCCESSFUL,
        TERMINATE_UNSUCCESSFUL,
        # a failed launch names no instance at all
        {**LAUNCH_UNSUCCESSFUL, "detail": {**LAUNCH_UNSUCCESSFUL["detail"], "EC2InstanceId": ""}},
        envelope("EC2 Auto Scaling Instance Refresh Started", {"InstanceRefreshId": "x"}, source="aws.autoscaling"),
        envelope("EC2 AMI State Change", {"ImageId": "ami-0123", "State": "available"}),
    ],
)
def test_events_of_subscribed_sources_topocast_does_not_act_on_are_ignored_not_rejected(event: dict) -> None:
    out = parse_event(event)
    assert isinstance(out, changes.Ignored) and out.kind == f"{event['source']}/{event['detail-type']}"
    lines, code = explain_delivery(json.dumps(event))
    assert code == 0 and lines[0]["action"] == "ignored" and lines[0]["reason"]


def test_a_failed_launch_says_why_it_is_ignored() -> None:
    (line,), code = explain_delivery(json.dumps(LAUNCH_UNSUCCESSFUL))
    assert code == 0 and "the launch failed" in line["reason"] and "my-auto-scaling-group" in line["reason"]


def test_explain_cli_empty_list_prints_0_events_and_an_unknown_object_is_flagged() -> None:
    cmd = [sys.executable, "-m", "topocast.cli", "events", "explain", "-"]
    for empty in ("[]", '{"Records": []}'):
        out = subprocess.run(cmd, input=empty, capture_output=True, text=True, timeout=60)
        assert out.returncode == 0 and out.stdout == "" and "0 events" in out.stderr, (empty, out)
    out = subprocess.run(cmd, input="{}", capture_output=True, text=True, timeout=60)
    line = json.loads(out.stdout)
    assert out.returncode == 0 and line["action"] == "reconcile" and "treated as a manual reconcile" in line["reason"]
    (plain,), _ = explain_delivery(json.dumps({"cluster": "c1", "reason": "nightly"}))
    assert "treated as" not in plain["reason"]  # the documented Scheduler Input is no surprise


@pytest.mark.parametrize("ce_type", [["a", "b"], {"x": 1}, None])
def test_explain_a_cloud_event_whose_type_is_no_string_is_one_rejected_line(ce_type: Any) -> None:
    event = {"specversion": "1.0", "type": ce_type, "id": "1", "source": "//x"}
    cmd = [sys.executable, "-m", "topocast.cli", "events", "explain", "-"]
    out = subprocess.run(cmd, input=json.dumps(event), capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    (line,) = [json.loads(x) for x in out.stdout.splitlines()]
    assert line["action"] == "rejected" and "type" in line["reason"]


@pytest.mark.parametrize("as_text", [True, False], ids=["body-text", "body-object"])
def test_explain_a_batch_with_one_too_deep_body_keeps_every_other_records_line(as_text: bool) -> None:
    deep = "[" * 100_000 + "]" * 100_000
    record = '{"messageId": "m%d", "receiptHandle": "r", "eventSource": "aws:sqs", "body": %s}'
    good = json.dumps(json.dumps(SPOT_WARNING))
    bad = json.dumps(deep) if as_text else deep
    text = '{"Records": [' + ", ".join([record % (1, good), record % (2, bad), record % (3, good)]) + "]}"
    lines, code = explain_delivery(text)
    assert [line["action"] for line in lines] == ["noted", "rejected", "noted"] and code == 2
    assert "nested deeper than" in lines[1]["reason"]
