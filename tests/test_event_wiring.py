"""The event table against what the Terraform modules deliver and what docs/events.md says.

A kind the parser acts on must be delivered, and nothing may be delivered that it rejects: the
EventBridge patterns are generated from the table (``event-patterns.json``), the GCP triggers and
the system-event Logging sink name the table's methods (read with python-hcl2; the GCP module
cannot be ``terraform validate``d here). ``TOPOCAST_REGENERATE=1`` rewrites the generated files.
"""

from __future__ import annotations

import base64
import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from topocast.app import event_table as table
from topocast.aws.events import parse_event
from topocast.gcp.events import parse_cloud_event
from topocast.model import changes

hcl2 = pytest.importorskip("hcl2", reason="python-hcl2 is needed to read the Terraform (pip install -e .[dev])")

REPO = Path(__file__).resolve().parent.parent
AWS_MODULE = REPO / "infra" / "terraform" / "modules" / "aws"
GCP_MODULE = REPO / "infra" / "terraform" / "modules" / "gcp"
PATTERNS = AWS_MODULE / "event-patterns.json"
DOC = REPO / "docs" / "events.md"
REGENERATE = os.environ.get("TOPOCAST_REGENERATE") == "1"
#: kinds the parsers accept but the modules deliberately do not route (operators may)
UNROUTED_BY_DESIGN = {
    "aws.events/Scheduled Event",  # a schedule rule of your own; the module sends the Reconcile envelope
    "scheduler/input",  # an EventBridge Scheduler target of your own
    "text/reconcile",
    "aws.s3/Object Created",  # the module uses the bucket notification, not S3 -> EventBridge
}


def tf_blocks(module: Path) -> dict[str, Any]:
    opts = hcl2.SerializationOptions(strip_string_quotes=True, explicit_blocks=False, with_comments=False)
    out: dict[str, Any] = {"resource": {}, "locals": {}, "variable": {}}
    for tf in sorted(module.glob("*.tf")):
        with tf.open() as f:
            doc = hcl2.load(f, serialization_options=opts)
        for block in doc.get("resource", []):
            for rtype, named in block.items():
                out["resource"].setdefault(rtype, {}).update(named)
        for block in doc.get("locals", []):
            out["locals"].update(block)
        for block in doc.get("variable", []):
            out["variable"].update(block)
    return out


def matches(pattern: dict[str, Any], event: dict[str, Any]) -> bool:
    """EventBridge matching for the pattern forms the table generates (lists of exact values, nested; an
    array in the event matches when any of its values is listed)."""
    for key, want in pattern.items():
        have = event.get(key)
        if isinstance(want, dict):
            if not isinstance(have, dict) or not matches(want, have):
                return False
        elif isinstance(have, list):
            if not set(have) & set(want):
                return False
        elif have not in want:
            return False
    return True


# ----- AWS ------------------------------------------------------------------------------------------------
def test_eventbridge_patterns_file_is_generated_from_the_table() -> None:
    generated = json.dumps(table.aws_rule_patterns(), indent=2) + "\n"
    if REGENERATE:
        PATTERNS.write_text(generated)
    assert PATTERNS.read_text() == generated, "event-patterns.json is stale: TOPOCAST_REGENERATE=1 pytest this file"
    rules = tf_blocks(AWS_MODULE)["locals"]["event_rules"]
    text = str(rules)
    assert 'file("${path.module}/event-patterns.json")' in tf_blocks(AWS_MODULE)["locals"]["event_patterns"]
    for name in table.AWS_RULES:
        assert f'local.event_patterns["{name}"]' in text, f"events.tf does not use the {name} pattern"


def sample(kind: str) -> dict[str, Any]:
    """A minimal event of an ``eventbridge`` row, shaped as EventBridge delivers it."""
    base, _, variant = kind.partition("#")
    source, _, detail_type = base.partition("/")
    detail: dict[str, Any] = {"instance-id": "i-0123456789abcdef0"}
    resources: list[str] = []
    if detail_type == "EC2 Instance State-change Notification":
        detail["state"] = variant
    elif source == "aws.autoscaling":
        detail = {"EC2InstanceId": "i-0123456789abcdef0", "AutoScalingGroupName": "c1-p5"}
        if variant == "WarmPool":
            detail |= {"Origin": "EC2", "Destination": "WarmPool"}
        elif variant:
            detail["Action"] = variant
    elif source == "aws.tag":  # the Tag Editor user guide's sample, on the membership key
        detail = {"changed-tag-keys": ["topocast:cluster"], "service": "ec2", "resource-type": "instance",
                  "version": 3, "tags": {"topocast:cluster": "c1"}}  # fmt: skip
        resources = ["arn:aws:ec2:us-east-1:123456789012:instance/i-0123456789abcdef0"]
    elif detail_type.startswith("Capacity Block"):
        detail = {"capacity-reservation-id": "cr-0123456789abcdef0", "end-date": "2026-12-07T11:30:00Z"}
    return {"version": "0", "id": "e1", "source": source, "detail-type": detail_type, "account": "123456789012",
            "time": "2026-11-30T10:00:00Z", "region": "us-east-1", "resources": resources,
            "detail": detail}  # fmt: skip


@pytest.mark.parametrize(
    "row", [k for k in table.TABLE if k.cloud == "aws" and k.route == "eventbridge"], ids=lambda k: k.kind
)
def test_every_routed_aws_kind_is_delivered_and_parsed_to_its_action(row: table.EventKind) -> None:
    event = sample(row.kind)
    patterns = table.aws_rule_patterns()
    assert any(matches(p, event) for p in patterns.values()), f"no EventBridge rule delivers {row.kind}"
    out = parse_event(json.dumps(event))
    action = out.action if isinstance(out, changes.InstanceChange) else type(out).__name__.lower()
    assert (out.kind, action) == (row.kind, row.action)


def test_nothing_delivered_is_rejected_and_every_acted_on_kind_is_routed() -> None:
    patterns = table.aws_rule_patterns()
    for name, pattern in patterns.items():
        for detail_type in pattern["detail-type"]:
            kinds = [k for k in table.TABLE if k.kind.partition("#")[0] == f"{pattern['source'][0]}/{detail_type}"]
            assert kinds and all(k.action != "rejected" for k in kinds), f"rule {name} delivers {detail_type}"
    for state in patterns["ec2-state"]["detail"]["state"]:
        assert table.lookup("aws", f"{table.STATE}#{state}") is not None
    acted = {k.kind for k in table.TABLE if k.action not in ("ignored", "rejected") and k.route is None}
    assert acted <= UNROUTED_BY_DESIGN, f"acted on but never delivered: {sorted(acted - UNROUTED_BY_DESIGN)}"


def test_s3_notification_and_reconcile_schedule_deliver_their_rows() -> None:
    module = tf_blocks(AWS_MODULE)
    queue = module["resource"]["aws_s3_bucket_notification"]["this"]["queue"][0]
    assert queue["events"] == ["s3:ObjectCreated:*"] and queue["filter_prefix"] == "${local.uploads_key}"
    assert table.lookup("aws", "s3/ObjectCreated").route == "s3-notification"  # type: ignore[union-attr]
    # the merge() of event_rules stays an expression string in python-hcl2: the schedule's input is in it
    assert '"detail-type" = "Reconcile"' in str(module["locals"]["event_rules"])
    assert isinstance(parse_event({"source": "topocast", "detail-type": "Reconcile", "detail": {"cluster": "c1"}}),
                      changes.Reconcile)  # fmt: skip


# ----- GCP ------------------------------------------------------------------------------------------------
def test_gcp_trigger_and_sink_methods_are_the_tables() -> None:
    module = tf_blocks(GCP_MODULE)
    audit = module["variable"]["audit_log_methods"]["default"]
    system = module["variable"]["system_event_methods"]["default"]
    assert audit == table.gcp_methods("eventarc-audit-log")
    assert system == table.gcp_methods("log-sink")
    assert not set(audit) & set(system), "a method both triggered by Eventarc and sunk would arrive twice"
    for method in audit + system:
        row = table.lookup("gcp", method)
        assert row is not None and row.action in ("upsert", "remove", "reconcile", "noted"), method


def test_system_event_sink_routes_to_the_events_topic_and_discover() -> None:
    module = tf_blocks(GCP_MODULE)
    res = module["resource"]
    sink = res["google_logging_project_sink"]["system_events"]
    assert sink["destination"] == "pubsub.googleapis.com/${google_pubsub_topic.events.id}"
    assert sink["filter"] == "${local.system_event_filter}" and sink["unique_writer_identity"] is True
    flt = module["locals"]["system_event_filter"]
    assert "cloudaudit.googleapis.com%2Fsystem_event" in flt and "var.system_event_methods" in flt
    assert 'protoPayload.serviceName=\\"compute.googleapis.com\\"' in flt
    grant = res["google_pubsub_topic_iam_member"]["sink_publishes"]
    assert grant["role"] == "roles/pubsub.publisher" and "writer_identity" in grant["member"]
    trigger = res["google_eventarc_trigger"]["events_topic"]
    criteria = {c["attribute"]: c["value"] for c in trigger["matching_criteria"]}
    assert criteria == {"type": "google.cloud.pubsub.topic.v1.messagePublished"}
    assert trigger["transport"][0]["pubsub"][0]["topic"] == "${google_pubsub_topic.events.id}"
    service = trigger["destination"][0]["cloud_run_service"][0]["service"]
    assert 'this["discover"]' in service


@pytest.mark.parametrize("method", table.gcp_methods("log-sink"))
def test_a_sunk_entry_reaches_the_parser_as_its_row_says(method: str) -> None:
    entry = {
        "protoPayload": {"serviceName": "compute.googleapis.com", "methodName": method,
                         "resourceName": "projects/p/zones/z/instances/vm-1"},
        "logName": "projects/p/logs/cloudaudit.googleapis.com%2Fsystem_event",
        "resource": {"type": "gce_instance", "labels": {"instance_id": "1"}},
        "operation": {"id": "systemevent-1", "first": True, "last": True},
    }  # fmt: skip
    data = {"message": {"data": base64.b64encode(json.dumps(entry).encode()).decode(), "messageId": "1"}}
    out = parse_cloud_event({"specversion": "1.0", "id": "1", "source": "//pubsub",
                             "type": "google.cloud.pubsub.topic.v1.messagePublished", "data": data})  # fmt: skip
    row = table.lookup("gcp", method)
    assert row is not None
    if row.action == "noted":
        assert isinstance(out, changes.Noted) and out.instances == ("p/z/vm-1",)
    else:
        assert isinstance(out, changes.InstanceChange) and (out.action, out.follow) == (row.action, row.follow)


# ----- docs -----------------------------------------------------------------------------------------------
def test_docs_carry_the_code_table() -> None:
    text = DOC.read_text()
    m = re.search(r"<!-- event-table:begin -->\n(.*?)<!-- event-table:end -->", text, re.DOTALL)
    assert m, "docs/events.md lost its event-table markers"
    if REGENERATE:
        DOC.write_text(text.replace(m.group(1), table.markdown_table()))
        text = DOC.read_text()
        m = re.search(r"<!-- event-table:begin -->\n(.*?)<!-- event-table:end -->", text, re.DOTALL)
        assert m
    assert m.group(1) == table.markdown_table(), "docs/events.md table is stale: TOPOCAST_REGENERATE=1 pytest this file"
    gcp_doc = (REPO / "docs" / "gcp.md").read_text()
    for method in table.gcp_methods("log-sink"):
        assert method.rpartition(".")[2] in gcp_doc, f"docs/gcp.md does not mention {method}"


@pytest.mark.parametrize("method", table.gcp_methods("eventarc-audit-log"))
def test_every_eventarc_method_explains_as_its_row(method: str) -> None:
    from topocast.cli.events import explain_delivery

    entry = {
        "protoPayload": {"serviceName": "compute.googleapis.com", "methodName": method,
                         "resourceName": "projects/p/zones/z/instances/vm-1"},
        "logName": "projects/p/logs/cloudaudit.googleapis.com%2Factivity",
        "resource": {"type": "gce_instance", "labels": {"instance_id": "1"}},
        "operation": {"id": "operation-1", "last": True},
    }  # fmt: skip
    event = {"specversion": "1.0", "id": "1", "source": "//cloudaudit.googleapis.com/projects/p/logs/activity",
             "type": "google.cloud.audit.log.v1.written", "data": entry}  # fmt: skip
    lines, code = explain_delivery(json.dumps(event))
    row = table.lookup("gcp", method)
    assert row is not None and code == 0
    assert [(line["kind"], line["action"]) for line in lines] == [(method, row.action)]
