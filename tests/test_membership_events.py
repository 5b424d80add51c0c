"""Issue 28: membership changes are events.

On AWS membership is a tag (``TOPOCAST_FILTERS tag:topocast:cluster=c1``): EventBridge's ``aws.tag``
"Tag Change on Resource" of an EC2 instance re-reads that instance when the changed keys include a
membership key. On GCP it is a label (``TOPOCAST_GCP_LABEL``): the ``setLabels`` audit entry re-reads
the VM. The event shapes are the clouds' own samples (the Tag Editor user guide, "Monitor tag changes
with serverless workflows and Amazon EventBridge"; Compute Engine's Admin Activity audit entries).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cli_runner import invoke
from gcp_pipeline_helpers import cluster, names
from test_event_wiring import AWS_MODULE, matches, tf_blocks

from topocast.app import event_table as table
from topocast.aws.events import parse_event
from topocast.gcp.events import parse_cloud_event
from topocast.model import changes
from topocast.providers.aws.provider import AwsProvider
from topocast.providers.base import ProviderInputs
from topocast_sim.eventarc import audit_log_event
from topocast_sim.gcp_pipeline import LocalGcpPipeline

ARN = "arn:aws:ec2:us-east-1:123456789012:instance/{}"
VM = {"project": "p1", "project_number": "123456789012", "zone": "us-central1-a", "name": "gpu-007"}


def tag_change(keys: list[str], instance: str = "i-0000000aaaaaaaaaa", **detail: Any) -> dict[str, Any]:
    """The Tag Editor user guide's sample event, with ``keys`` changed."""
    return {
        "version": "0",
        "id": "bddcf1d6-0251-35a1-aab0-adc1fb47c11c",
        "detail-type": "Tag Change on Resource",
        "source": "aws.tag",
        "account": "123456789012",
        "time": "2018-09-18T20:41:38Z",
        "region": "us-east-1",
        "resources": [ARN.format(instance)],
        "detail": {
            "changed-tag-keys": keys,
            "service": "ec2",
            "resource-type": "instance",
            "version": 3,
            "tags": {"an-unchanged-key": "tag-value-still-the-same"},
            **detail,
        },
    }


def aws_provider(*filters: str) -> AwsProvider:
    options = {"region": "us-east-1", "filters": list(filters)}
    return AwsProvider(ProviderInputs("c1", options, sdk_client=lambda name: None))


# ----- AWS: the parser, the scope, the rule -------------------------------------------------------------------
def test_the_documented_tag_change_sample_re_reads_its_instance() -> None:
    sample = tag_change(["a-new-key", "an-updated-key", "a-deleted-key"])
    out = parse_event(json.dumps(sample))
    assert isinstance(out, changes.InstanceChange)
    assert (out.instance, out.action, out.kind) == ("i-0000000aaaaaaaaaa", "upsert", "aws.tag/Tag Change on Resource")
    assert out.detail["changed-tag-keys"] == "a-deleted-key,a-new-key,an-updated-key"


def test_a_tag_change_of_another_resource_is_ignored_and_a_missing_arn_is_malformed() -> None:
    bucket = tag_change(["k"], service="s3", **{"resource-type": "bucket"})
    bucket["resources"] = ["arn:aws:s3:::my-bucket"]
    out = parse_event(bucket)
    assert isinstance(out, changes.Ignored) and "s3 bucket" in out.reason
    no_arn = tag_change(["topocast:cluster"])
    no_arn["resources"] = []
    with pytest.raises(changes.MalformedEvent, match="resources: expected one EC2 instance ARN"):
        parse_event(no_arn)
    policy = {**tag_change([]), "detail-type": "Invalid Effective Tag Policy", "detail": {}}
    assert isinstance(parse_event(policy), changes.Ignored)  # a subscribed source: never dead-lettered


def test_only_a_change_of_a_membership_key_is_read() -> None:
    provider = aws_provider("tag:topocast:cluster=c1", "instance-type=p5.48xlarge")
    member = parse_event(tag_change(["Owner", "topocast:cluster"]))
    other = parse_event(tag_change(["Owner"]))
    assert isinstance(member, changes.InstanceChange) and isinstance(other, changes.InstanceChange)
    assert provider.scope(member) is None
    assert provider.scope(other) == "tag change of Owner: not a membership tag (topocast:cluster)"
    state = parse_event({"source": "aws.ec2", "detail-type": "EC2 Instance State-change Notification",
                         "detail": {"instance-id": "i-0123456789abcdef0", "state": "running"}})  # fmt: skip
    assert isinstance(state, changes.InstanceChange) and provider.scope(state) is None


def test_terraform_delivers_tag_changes_of_the_membership_keys_only() -> None:
    rules = str(tf_blocks(AWS_MODULE)["locals"]["event_rules"])
    assert 'local.event_patterns["tag-change"]' in rules
    assert '"changed-tag-keys" = local.membership_tag_keys' in rules
    # the pattern Terraform builds for the default filters (tag:topocast:cluster=<cluster>)
    pattern = table.aws_rule_patterns()["tag-change"]
    pattern = {**pattern, "detail": {**pattern["detail"], "changed-tag-keys": ["topocast:cluster"]}}
    assert matches(pattern, tag_change(["Owner", "topocast:cluster"]))
    assert not matches(pattern, tag_change(["Owner"]))
    assert not matches(pattern, tag_change(["topocast:cluster"], service="rds", **{"resource-type": "db"}))


# ----- GCP: the parser -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("method", ["v1.compute.instances.setLabels", "beta.compute.instances.setLabels"])
def test_set_labels_re_reads_the_vm(method: str) -> None:
    out = parse_cloud_event(audit_log_event(method=method, instance_id="42", **VM))
    assert isinstance(out, changes.InstanceChange)
    assert (out.instance, out.action, out.kind) == ("123456789012/us-central1-a/gpu-007", "upsert", method)


# ----- events explain --------------------------------------------------------------------------------------------
def test_events_explain_shows_both_membership_events(tmp_path: Path) -> None:
    (tmp_path / "tag.json").write_text(json.dumps(tag_change(["topocast:cluster"])))
    attrs, data = audit_log_event(method="v1.compute.instances.setLabels", instance_id="42", **VM)
    (tmp_path / "labels.json").write_text(json.dumps({**attrs, "data": data}))
    aws = invoke(["events", "explain", str(tmp_path / "tag.json")])
    gcp = invoke(["events", "explain", str(tmp_path / "labels.json")])
    assert (aws.exit_code, gcp.exit_code) == (0, 0), (aws.output, gcp.output)
    line, gline = json.loads(aws.stdout), json.loads(gcp.stdout)
    assert (line["action"], line["instances"]) == ("upsert", ["i-0000000aaaaaaaaaa"])
    assert "tag keys changed: topocast:cluster" in line["reason"]
    assert (gline["kind"], gline["action"], gline["instances"]) == (
        "v1.compute.instances.setLabels", "upsert", ["123456789012/us-central1-a/gpu-007"],
    )  # fmt: skip


# ----- the pipelines: tagged in and out without a reconcile ---------------------------------------------------
@pytest.mark.slow
def test_aws_tagging_an_instance_into_and_out_of_the_cluster(aws_env: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from topocast_sim import ec2 as ec2_sim
    from topocast_sim.aws_pipeline import LocalAwsPipeline

    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "true")
    pl = LocalAwsPipeline("c1", quiet=0.3, max_wait=2.0)
    members = ec2_sim.generate_cluster(pl.ec2, 20, cluster_tag=("topocast:cluster", "c1"))
    (outsider,) = ec2_sim.generate_cluster(pl.ec2, 1, cluster_tag=("topocast:cluster", "c2"), name_prefix="x-")
    pl.emit_state_changes([*members, outsider])
    assert pl.run_until_idle(timeout=60)

    def graph_ids() -> set[str]:
        return {n.id for n in pl.runtime.graphs.latest().graph.nodes}

    def tagged(iid: str, keys: list[str]) -> None:
        detail = tag_change(keys, iid)["detail"]
        pl.emit_event("aws.tag", "Tag Change on Resource", detail, resources=[ARN.format(iid)])
        assert pl.run_until_idle(timeout=60)

    before = graph_ids()
    pl.ec2.create_tags(Resources=[outsider], Tags=[{"Key": "topocast:cluster", "Value": "c1"}])
    tagged(outsider, ["topocast:cluster"])
    joined = graph_ids()
    pl.ec2.create_tags(Resources=[members[0]], Tags=[{"Key": "topocast:cluster", "Value": "c9"}])
    tagged(members[0], ["Owner"])  # the event names another key: ignored, the instance stays
    kept = graph_ids()
    tagged(members[0], ["topocast:cluster"])
    assert (before, joined - before, kept, before - graph_ids()) == (
        set(members), {outsider}, set(members) | {outsider}, {members[0]},
    )  # fmt: skip


@pytest.mark.slow
def test_gcp_labelling_a_vm_out_of_and_into_the_cluster() -> None:
    gen = cluster(20)
    with LocalGcpPipeline(gen, name="c1", quiet=0.3, window=0.2) as pl:
        pl.reconcile()
        assert pl.run_until_idle(timeout=60)
        vm = gen.instances[0]
        zone = str(vm["zone"]).rsplit("/", 1)[-1]

        def relabel(labels: dict[str, str]) -> list[str]:
            pl.compute.set_labels(zone, vm["name"], labels)
            entries = pl.insert_events([vm])[1::2]  # the completing entry of the operation
            for attrs, data in entries:
                data["protoPayload"]["methodName"] = attrs["methodname"] = "v1.compute.instances.setLabels"
            pl.emit(entries)
            assert pl.run_until_idle(timeout=60)
            return names(pl)

        before = names(pl)
        out = relabel({"topocast-cluster": "c2"})
        back = relabel({"topocast-cluster": "c1", "team": "ml"})
        assert (len(before), sorted(set(before) - set(out)), back) == (20, [vm["name"]], before)
