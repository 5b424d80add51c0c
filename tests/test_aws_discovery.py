"""AWS discovery against moto in server mode, with topocast's DescribeInstanceTopology simulator.

Expected values come from the instances' simulator tags (read back with
DescribeInstances), never from the code under test.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest
from aws_fixtures import set_ec2_state
from botocore.exceptions import ClientError

from topocast.aws.events import parse_event
from topocast.errors import ProviderError
from topocast.model.changes import Ignored, InstanceChange, MalformedEvent, Reconcile, UnsupportedEvent
from topocast.model.graph import Node, TopologyGraph
from topocast.providers.aws.provider import AwsDiscoveryConfig, discover_full, discover_instances, parse_filter
from topocast.providers.aws.sdk import USER_AGENT_EXTRA, ec2_client
from topocast_sim import ec2 as sim

REGION = "us-east-1"
CLUSTER_FILTER = "tag:topocast:cluster=demo"


# ----- helpers ---------------------------------------------------------------------------------
@pytest.fixture
def ec2(aws_env: str) -> Any:
    return ec2_client(REGION)


def tags_by_id(ec2: Any) -> dict[str, dict[str, str]]:
    out = {}
    for page in ec2.get_paginator("describe_instances").paginate():
        for res in page["Reservations"]:
            for inst in res["Instances"]:
                out[inst["InstanceId"]] = {t["Key"]: t["Value"] for t in inst.get("Tags", [])} | {
                    "@dns": inst.get("PrivateDnsName", ""),
                    "@zone": inst["Placement"]["AvailabilityZone"],
                    "@type": inst["InstanceType"],
                }
    return out


def expected_fabric(tags: dict[str, str]) -> list[str]:
    """AWS lists network nodes root-first; the graph stores them closest-first."""
    return list(reversed(tags[sim.NETWORK_NODES_TAG].split(",")))


def config(**kw: Any) -> AwsDiscoveryConfig:
    return AwsDiscoveryConfig(**{"cluster": "demo", "region": REGION, "filters": [CLUSTER_FILTER], **kw})


def launch(ec2: Any, itype: str, count: int = 1, tags: dict[str, str] | None = None, **kw: Any) -> list[str]:
    tags = {"topocast:cluster": "demo", **(tags or {})}
    resp = ec2.run_instances(
        ImageId="ami-12c6146b",
        InstanceType=itype,
        MinCount=count,
        MaxCount=count,
        TagSpecifications=[{"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}],
        **kw,
    )
    return [i["InstanceId"] for i in resp["Instances"]]


class CallLog:
    """botocore event hook: every API call's parameters, as boto3 was asked to send them."""

    def __init__(self, client: Any) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        client.meta.events.register("provide-client-params.ec2.*", self._record)

    def _record(self, params: dict[str, Any], model: Any, **_: Any) -> None:
        self.calls.append((model.name, copy.deepcopy(params)))

    def of(self, op: str) -> list[dict[str, Any]]:
        return [p for name, p in self.calls if name == op]


# ----- the simulator, through boto3 -----------------------------------------------------------
def test_simulated_topology_pages_through_boto3_paginator(ec2: Any) -> None:
    ids = sim.generate_cluster(ec2, 45, name_prefix=None)
    launch(ec2, "m5.large", 2)  # no topology for this type
    stopped = launch(ec2, "p5.48xlarge")
    ec2.stop_instances(InstanceIds=stopped)
    pages = list(ec2.get_paginator("describe_instance_topology").paginate(PaginationConfig={"PageSize": 20}))
    assert [len(p["Instances"]) for p in pages] == [20, 20, 5]
    got = {i["InstanceId"]: i for p in pages for i in p["Instances"]}
    assert set(got) == set(ids)  # the m5s and the stopped p5 are not listed
    tags = tags_by_id(ec2)
    for iid, item in got.items():
        assert item["NetworkNodes"] == tags[iid][sim.NETWORK_NODES_TAG].split(",")
        assert item["CapacityBlockId"] == tags[iid][sim.CAPACITY_BLOCK_TAG]
        assert item["AvailabilityZone"] == tags[iid]["@zone"]
        assert item["ZoneId"].startswith("use1-az")
    # default page size is 20, and explicit IDs come back in one response
    assert len(ec2.describe_instance_topology()["Instances"]) == 20
    one = ec2.describe_instance_topology(InstanceIds=ids[:30])
    assert len(one["Instances"]) == 30 and "NextToken" not in one


@pytest.mark.parametrize(
    ("kwargs", "code", "needle"),
    [
        ({"InstanceIds": [f"i-{n:017x}" for n in range(101)]}, "InvalidParameterValue", "over 100"),
        ({"InstanceIds": ["i-00000000000000001"], "MaxResults": 5}, "InvalidParameterCombination", "maxResults"),
        ({"MaxResults": 101}, "InvalidParameterValue", "1-100"),
        ({"Filters": [{"Name": "tag:x", "Values": ["y"]}]}, "InvalidParameterValue", "tag:x"),
        ({"NextToken": "garbage"}, "InvalidParameterValue", "token"),
    ],
)
def test_simulator_rejects_what_ec2_rejects(ec2: Any, kwargs: dict[str, Any], code: str, needle: str) -> None:
    with pytest.raises(ClientError) as err:
        ec2.describe_instance_topology(**kwargs)
    assert err.value.response["Error"]["Code"] == code
    assert needle in err.value.response["Error"]["Message"]


def test_simulator_filters(ec2: Any) -> None:
    p5 = launch(ec2, "p5.48xlarge", 2, Placement={"AvailabilityZone": "us-east-1b"})
    p5en = launch(ec2, "p5en.48xlarge", 1, Placement={"AvailabilityZone": "us-east-1a"})
    p4d = launch(ec2, "p4d.24xlarge", 1, Placement={"AvailabilityZone": "us-east-1a"})
    zone_b = ec2.describe_availability_zones(ZoneNames=["us-east-1b"])["AvailabilityZones"][0]["ZoneId"]

    def listed(*filters: tuple[str, list[str]]) -> set[str]:
        resp = ec2.describe_instance_topology(Filters=[{"Name": n, "Values": v} for n, v in filters])
        return {i["InstanceId"] for i in resp["Instances"]}

    assert listed(("instance-type", ["p5*"])) == set(p5 + p5en)
    assert listed(("instance-type", ["p5?.48xlarge"])) == set(p5)  # '?' is zero or one character
    assert listed(("instance-type", ["p4d.24xlarge", "p5en*"])) == set(p4d + p5en)
    assert listed(("availability-zone", ["us-east-1a"])) == set(p5en + p4d)
    assert listed(("zone-id", [zone_b])) == set(p5)
    assert listed(("instance-type", ["p5*"]), ("availability-zone", ["us-east-1a"])) == set(p5en)


def test_fault_injector_answers_like_ec2_throttling(aws_env: str) -> None:
    client = ec2_client(REGION, max_attempts=1)
    sim.inject_faults(1.0, actions=["DescribeInstances"])
    with pytest.raises(ClientError) as err:
        client.describe_instances()
    assert err.value.response["Error"]["Code"] == "RequestLimitExceeded"
    assert err.value.response["ResponseMetadata"]["HTTPStatusCode"] == 503
    ec2_client(REGION, max_attempts=1).describe_availability_zones()  # other actions are untouched
    assert sim.injected_counts() == {"DescribeInstances": 1}


# ----- full discovery ------------------------------------------------------------------------------
@pytest.mark.parametrize(("levels", "itype"), [(3, "p5.48xlarge"), (3, "p6e-gb200.36xlarge"), (4, "p6-b200.48xlarge")])
def test_fabric_is_stored_closest_first(ec2: Any, levels: int, itype: str) -> None:
    ids = sim.generate_cluster(ec2, 40, levels=levels, instance_type=itype, nodes_per_leaf=8, leaves_per_spine=2)
    result = discover_full(ec2, config(name_from="tag:Name"))
    tags = tags_by_id(ec2)
    nodes = {n.id: n for n in result.graph.nodes}
    assert set(nodes) == set(ids)
    for iid, node in nodes.items():
        assert len(node.fabric) == levels
        assert node.fabric == expected_fabric(tags[iid])
        # EC2 reports a CapacityBlockId for UltraServer instances only (botocore's model): p5 and p6-b200 get none
        ultra = itype.startswith("p6e-gb200.")
        assert node.accelerator == (tags[iid][sim.CAPACITY_BLOCK_TAG] if ultra else None)
        assert node.name == tags[iid]["Name"]
        assert (node.zone, node.instance_type) == (tags[iid]["@zone"], itype)
    assert result.warnings == []
    # 40 nodes in leaves of 8: five leaves, and nodes of one leaf share the whole path
    assert len({n.fabric[0] for n in nodes.values()}) == 5


def test_more_than_100_instances_are_batched(ec2: Any) -> None:
    ids = sim.generate_cluster(ec2, 250, name_prefix=None)
    log = CallLog(ec2)
    result = discover_full(ec2, config(name_from="instance-id"))
    assert len(result.graph.nodes) == 250 and all(n.fabric for n in result.graph.nodes)
    assert result.api_calls == {"DescribeInstances": 1, "DescribeInstanceTopology": 3}
    topo = log.of("DescribeInstanceTopology")
    assert len(topo) == 3
    assert all(len(p["InstanceIds"]) <= 100 and "MaxResults" not in p for p in topo)
    assert sorted(i for p in topo for i in p["InstanceIds"]) == sorted(ids)
    assert log.of("DescribeInstances")[0]["MaxResults"] == 1000
    assert sim.call_counts()["DescribeInstanceTopology"] == 3  # what the server saw


def test_listing_strategy_gives_the_same_graph(ec2: Any) -> None:
    sim.generate_cluster(ec2, 150, name_prefix=None)
    sim.generate_cluster(ec2, 30, name_prefix=None, cluster_tag=("topocast:cluster", "other"))
    by_ids = discover_full(ec2, config())
    log = CallLog(ec2)
    listing = discover_full(ec2, config(topology_strategy="listing"))
    assert listing.graph == by_ids.graph
    pages = log.of("DescribeInstanceTopology")
    assert all(p.get("MaxResults") == 100 and "InstanceIds" not in p for p in pages)
    assert listing.api_calls["DescribeInstanceTopology"] == 2  # 180 listed, 30 of them filtered out


def test_filters_instance_types_and_zones(ec2: Any) -> None:
    a = launch(ec2, "p5.48xlarge", 2, Placement={"AvailabilityZone": "us-east-1a"})
    b = launch(ec2, "p5.48xlarge", 1, Placement={"AvailabilityZone": "us-east-1b"})
    c = launch(ec2, "trn1.32xlarge", 1, Placement={"AvailabilityZone": "us-east-1a"})
    launch(ec2, "p5.48xlarge", 2, tags={"topocast:cluster": "other"})

    def ids(**kw: Any) -> set[str]:
        return {n.id for n in discover_full(ec2, config(**kw)).graph.nodes}

    assert ids() == set(a + b + c)
    assert ids(filters=["tag:topocast:cluster=demo,other"]) == set(tags_by_id(ec2))
    assert ids(instance_types=["p5.48xlarge"]) == set(a + b)
    assert ids(zones=["us-east-1a"]) == set(a + c)
    assert ids(filters=[CLUSTER_FILTER, {"Name": "instance-type", "Values": ["trn1.32xlarge"]}]) == set(c)


def test_name_sources_and_fallbacks(ec2: Any) -> None:
    named = launch(ec2, "p5.48xlarge", 1, tags={"Name": "gpu-a", "rack": "r7"})
    twins = launch(ec2, "p5.48xlarge", 2, tags={"Name": "twin", "rack": "r7"})
    unnamed = launch(ec2, "p5.48xlarge", 1)
    unsafe = launch(ec2, "p5.48xlarge", 1, tags={"Name": "bad name", "rack": "r8"})
    tags = tags_by_id(ec2)

    def names(name_from: str) -> tuple[dict[str, str], list[str]]:
        res = discover_full(ec2, config(name_from=name_from))
        return {n.id: n.name for n in res.graph.nodes}, res.warnings  # type: ignore[misc]

    got, warnings = names("tag:Name")
    assert got[named[0]] == "gpu-a"
    fallback = twins + unnamed + unsafe
    assert all(got[i] == i for i in fallback)  # reported and named by instance ID, not dropped
    text = "\n".join(warnings)
    assert all(i in text for i in fallback) and "tag 'Name'" in text and "share their name" in text

    got, warnings = names("private-dns")
    assert all(got[i] == tags[i]["@dns"].split(".")[0] for i in tags) and warnings == []
    got, _ = names("private-dns-fqdn")
    assert all(got[i] == tags[i]["@dns"] for i in tags)
    got, _ = names("instance-id")
    assert all(got[i] == i for i in tags)
    got, warnings = names("template:{tag[rack]}-{instance_id}")
    assert got[named[0]] == f"r7-{named[0]}" and got[unsafe[0]] == f"r8-{unsafe[0]}"
    assert got[unnamed[0]] == unnamed[0] and "{tag[rack]}" in "\n".join(warnings)


def test_instance_without_topology_is_kept_and_reported(ec2: Any) -> None:
    gpus = sim.generate_cluster(ec2, 3, name_prefix=None)
    cpu = launch(ec2, "m5.large")
    result = discover_full(ec2, config(name_from="instance-id"))
    nodes = {n.id: n for n in result.graph.nodes}
    assert nodes[cpu[0]].fabric == [] and nodes[cpu[0]].instance_type == "m5.large"
    assert all(nodes[i].fabric for i in gpus)
    assert result.graph.nodes_without_topology() == [cpu[0]]
    assert any(cpu[0] in w and "without topology" in w for w in result.warnings)


def test_null_capacity_block_keeps_the_node_and_its_previous_domain(ec2: Any) -> None:
    ids = sim.generate_cluster(
        ec2, 18, instance_type="p6e-gb200.36xlarge", block_size=18, capacity_block_lag=2, name_prefix=None
    )
    block = tags_by_id(ec2)[ids[0]][sim.CAPACITY_BLOCK_TAG]
    cfg = config(name_from="instance-id")

    first = discover_full(ec2, cfg)  # right after launch: AWS has no CapacityBlockId yet
    assert len(first.graph.nodes) == 18
    assert all(n.fabric and n.accelerator is None and n.accelerator_pending for n in first.graph.nodes)
    assert any("CapacityBlockId" in w for w in first.warnings)

    previous = first.graph.model_copy(
        update={"nodes": [n.model_copy(update={"accelerator": "cr-previous"}) for n in first.graph.nodes]}
    )
    second = discover_full(ec2, cfg, previous)  # still null: the domain we knew stays
    assert all(n.accelerator == "cr-previous" and n.accelerator_pending for n in second.graph.nodes)

    third = discover_full(ec2, cfg, second.graph)  # reported now
    assert all(n.accelerator == block and not n.accelerator_pending for n in third.graph.nodes)


def test_null_capacity_block_of_an_ordinary_instance_with_a_known_domain_is_pending(ec2: Any) -> None:
    ids = launch(ec2, "p5.48xlarge", 1)
    previous = TopologyGraph(
        cluster="demo", provider="aws", nodes=[Node(name=ids[0], id=ids[0], accelerator="cr-known")]
    )
    result = discover_full(ec2, config(name_from="instance-id"), previous)
    (node,) = result.graph.nodes
    assert node.accelerator == "cr-known" and node.accelerator_pending
    fresh = discover_full(ec2, config(name_from="instance-id"))  # without history: simply no domain
    assert fresh.graph.nodes[0].accelerator is None and not fresh.graph.nodes[0].accelerator_pending


def test_throttling_on_a_third_of_calls_still_yields_the_right_graph(ec2: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import botocore.endpoint

    backoffs: list[float] = []  # botocore's retry backoff, recorded instead of slept (its only sleep)
    monkeypatch.setattr(botocore.endpoint, "time", SimpleNamespace(sleep=backoffs.append))
    sim.generate_cluster(ec2, 120, name_prefix=None)
    clean = discover_full(ec2, config())
    sim.reset_counts()
    sim.inject_faults(1 / 3)
    throttled = discover_full(ec2, config())
    assert throttled.graph == clean.graph
    assert throttled.api_calls == clean.api_calls  # retries happen inside botocore
    injected = sum(sim.injected_counts().values())
    assert injected >= 1 and throttled.retries == injected == len(backoffs)  # each retry backed off first


@pytest.mark.parametrize(
    ("op", "code", "status", "needles"),
    [
        ("DescribeInstanceTopology", "UnauthorizedOperation", 403, ["ec2:DescribeInstanceTopology", REGION]),
        ("DescribeInstances", "UnauthorizedOperation", 403, ["ec2:DescribeInstances", REGION]),
        ("DescribeInstanceTopology", "UnsupportedOperation", 400, ["not supported", REGION]),
        ("DescribeInstanceTopology", "RequestLimitExceeded", 503, ["throttled", "2 attempts", REGION]),
    ],
)
def test_api_errors_become_clear_provider_errors(
    aws_env: str, op: str, code: str, status: int, needles: list[str]
) -> None:
    client = ec2_client(REGION, max_attempts=2)
    sim.generate_cluster(client, 3, name_prefix=None)
    sim.inject_faults(1.0, actions=[op], code=code, status=status)
    with pytest.raises(ProviderError) as err:
        discover_full(client, config())
    message = str(err.value)
    assert op in message and all(n in message for n in needles), message


def test_unreachable_endpoint_is_a_clear_provider_error(aws_env: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # discard port: connection refused
    client = ec2_client(REGION, max_attempts=1)
    with pytest.raises(ProviderError) as err:
        discover_full(client, config())
    assert "cannot reach endpoint http://127.0.0.1:9" in str(err.value)
    assert "DescribeInstances" in str(err.value)


def test_service_specific_endpoint_variable_is_honoured(aws_env: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("AWS_ENDPOINT_URL_EC2", aws_env)
    client = ec2_client(REGION)
    assert client.meta.endpoint_url == aws_env
    assert USER_AGENT_EXTRA in client.meta.config.user_agent_extra
    assert client.meta.config.retries["mode"] == "adaptive"
    launch(client, "p5.48xlarge")
    assert len(discover_full(client, config()).graph.nodes) == 1


def test_config_region_must_match_the_client(ec2: Any) -> None:
    with pytest.raises(ProviderError, match="us-west-2"):
        discover_full(ec2, config(region="us-west-2"))


# ----- incremental updates --------------------------------------------------------------------------
def test_one_launch_event_costs_at_most_two_calls(ec2: Any) -> None:
    sim.generate_cluster(ec2, 20, name_prefix=None)
    base = discover_full(ec2, config()).graph
    new = sim.generate_cluster(ec2, 1, name_prefix=None, cluster_tag=("topocast:cluster", "demo"))
    sim.reset_counts()
    change = parse_event(state_change(new[0], "running"))
    assert isinstance(change, InstanceChange)
    result = discover_instances(ec2, config(), base, [change])
    assert sum(result.api_calls.values()) <= 2 and sum(sim.call_counts().values()) <= 2
    assert {n.id for n in result.graph.nodes} == {n.id for n in base.nodes} | set(new)
    assert result.graph == discover_full(ec2, config()).graph  # same as rediscovering everything


def test_incremental_removes_and_ignores(ec2: Any) -> None:
    ids = sim.generate_cluster(ec2, 6, name_prefix=None)
    outsider = launch(ec2, "p5.48xlarge", 1, tags={"topocast:cluster": "other"})
    ghost = "i-0123456789abcdef0"  # in the old graph, unknown to EC2
    base = discover_full(ec2, config()).graph
    base = base.model_copy(update={"nodes": [*base.nodes, Node(name="ghost", id=ghost, fabric=[])]})
    ec2.terminate_instances(InstanceIds=[ids[1]])
    ec2.stop_instances(InstanceIds=[ids[2]])
    changes = [
        InstanceChange(ids[0], "remove", "test"),  # a stale stop: ids[0] still runs, so it stays
        InstanceChange(ids[1], "upsert", "test"),  # stale upsert: EC2 says terminated
        InstanceChange(ids[2], "upsert", "test"),  # stopped
        InstanceChange(outsider[0], "upsert", "test"),
        InstanceChange(ghost, "upsert", "test"),
    ]
    result = discover_instances(ec2, config(), base, changes)
    assert {n.id for n in result.graph.nodes} == {ids[0], *ids[3:]}
    assert any(outsider[0] in w and "not matching" in w for w in result.warnings)
    assert any(ids[0] in w and "removal event(s) older than the instance's state" in w for w in result.warnings)

    ec2.terminate_instances(InstanceIds=[ids[4]])
    removal_only = discover_instances(ec2, config(), base, [InstanceChange(ids[4], "remove", "test")])
    assert removal_only.api_calls == {"DescribeInstances": 1}  # the removal is confirmed by one read
    assert ids[4] not in {n.id for n in removal_only.graph.nodes}
    unknown = discover_instances(ec2, config(), base, [InstanceChange(outsider[0], "remove", "test")])
    assert unknown.api_calls == {}  # not in the graph: nothing to confirm


def test_a_stop_delivered_after_the_newer_running_never_removes_the_instance(ec2: Any) -> None:
    """Late delivery across batches: stop, start (running, batch 1), then the old `stopped` (batch 2)."""
    ids = sim.generate_cluster(ec2, 4, name_prefix=None)
    base = discover_full(ec2, config()).graph
    ec2.stop_instances(InstanceIds=[ids[0]])
    ec2.start_instances(InstanceIds=[ids[0]])
    first = discover_instances(ec2, config(), base, [InstanceChange(ids[0], "upsert", "test")])
    late = [InstanceChange(ids[0], "remove", "test"), InstanceChange(ids[0], "remove", "test")]  # duplicated
    second = discover_instances(ec2, config(), first.graph, late)
    assert sorted(n.id for n in second.graph.nodes) == sorted(ids)
    node = next(n for n in second.graph.nodes if n.id == ids[0])
    assert node.fabric and node.fabric == next(n for n in base.nodes if n.id == ids[0]).fabric


def test_a_terminate_lifecycle_hook_takes_out_a_running_instance_without_a_read(ec2: Any) -> None:
    ids = sim.generate_cluster(ec2, 3, name_prefix=None)
    base = discover_full(ec2, config()).graph
    hook = InstanceChange(ids[0], "remove", "aws.autoscaling/EC2 Instance-terminate Lifecycle Action")
    result = discover_instances(ec2, config(), base, [hook])
    assert sorted(n.id for n in result.graph.nodes) == sorted(ids[1:]) and result.api_calls == {}


def test_a_name_held_by_a_terminated_instance_goes_to_its_replacement_when_the_termination_lands(ec2: Any) -> None:
    old = launch(ec2, "p5.48xlarge", 1, tags={"Name": "gpu-7"})
    base = discover_full(ec2, config(name_from="tag:Name")).graph
    new = launch(ec2, "p5.48xlarge", 1, tags={"Name": "gpu-7"})
    ec2.terminate_instances(InstanceIds=old)
    launched = discover_instances(ec2, config(name_from="tag:Name"), base, [InstanceChange(new[0], "upsert", "test")])
    assert {n.name: n.id for n in launched.graph.nodes} == {"gpu-7": old[0], new[0]: new[0]}  # named by ID for now
    landed = discover_instances(
        ec2, config(name_from="tag:Name"), launched.graph, [InstanceChange(old[0], "remove", "test")]
    )
    assert {n.name: n.id for n in landed.graph.nodes} == {"gpu-7": new[0]}
    assert landed.graph.nodes[0].labels.get("topocast/wanted-name") is None
    assert any("took their name once its holder left" in w for w in landed.warnings)


def test_a_name_tag_equal_to_a_switch_id_names_that_instance_by_id_and_places_the_rest(ec2: Any) -> None:
    ids = sim.generate_cluster(ec2, 4, name_prefix=None)
    leaf = discover_full(ec2, config(name_from="tag:Name")).graph.nodes[0].fabric[0]
    odd = launch(ec2, "p5.48xlarge", 1, tags={"Name": leaf})
    result = discover_full(ec2, config(name_from="tag:Name"))
    assert {n.id: n.name for n in result.graph.nodes}[odd[0]] == odd[0]
    assert all(n.fabric for n in result.graph.nodes if n.id in ids)
    assert any(odd[0] in w and "named like a switch of the fabric" in w for w in result.warnings)


def test_incremental_name_clash_with_an_existing_node_falls_back(ec2: Any) -> None:
    first = launch(ec2, "p5.48xlarge", 1, tags={"Name": "gpu-1"})
    base = discover_full(ec2, config(name_from="tag:Name")).graph
    second = launch(ec2, "p5.48xlarge", 1, tags={"Name": "gpu-1"})
    result = discover_instances(ec2, config(name_from="tag:Name"), base, [InstanceChange(second[0], "upsert", "t")])
    names = {n.id: n.name for n in result.graph.nodes}
    assert names == {first[0]: "gpu-1", second[0]: second[0]}
    assert any(second[0] in w for w in result.warnings)


# ----- events ------------------------------------------------------------------------------------
# Samples from the AWS documentation (ecosystem-formats.md §1.6), verbatim.
STATE_CHANGE = {
    "id": "7bf73129-1428-4cd3-a780-95db273d1602",
    "detail-type": "EC2 Instance State-change Notification",
    "source": "aws.ec2",
    "account": "123456789012",
    "time": "2021-11-11T21:29:54Z",
    "region": "us-east-1",
    "resources": ["arn:aws:ec2:us-east-1:123456789012:instance/i-1234567890abcdef0"],
    "detail": {"instance-id": "i-1234567890abcdef0", "state": "pending"},
}
ASG_LAUNCH = {
    "version": "0",
    "id": "12345678-1234-1234-1234-123456789012",
    "detail-type": "EC2 Instance Launch Successful",
    "source": "aws.autoscaling",
    "account": "123456789012",
    "time": "1970-01-01T00:00:00Z",
    "region": "us-west-2",
    "resources": ["auto-scaling-group-arn", "instance-arn"],
    "detail": {
        "StatusCode": "InProgress",
        "Description": "Launching a new EC2 instance: i-12345678",
        "AutoScalingGroupName": "my-auto-scaling-group",
        "ActivityId": "87654321-4321-4321-4321-210987654321",
        "Details": {"Availability Zone": "us-west-2b", "Subnet ID": "subnet-12345678"},
        "RequestId": "12345678-1234-1234-1234-123456789012",
        "StatusMessage": "",
        "EndTime": "1970-01-01T00:00:00Z",
        "EC2InstanceId": "i-1234567890abcdef0",
        "StartTime": "1970-01-01T00:00:00Z",
        "Cause": "description-text",
    },
}
ASG_TERMINATE = {
    **ASG_LAUNCH,
    "detail-type": "EC2 Instance Terminate Successful",
    "detail": {**ASG_LAUNCH["detail"], "Description": "Terminating EC2 instance: i-12345678"},
}
# EventBridge "Scheduled Event" as documented in the EventBridge user guide.
SCHEDULED = {
    "version": "0",
    "id": "89d1a02d-5ec7-412e-82f5-13505f849b41",
    "detail-type": "Scheduled Event",
    "source": "aws.events",
    "account": "123456789012",
    "time": "2016-12-30T18:44:49Z",
    "region": "us-east-1",
    "resources": ["arn:aws:events:us-east-1:123456789012:rule/SampleRule"],
    "detail": {},
}


def state_change(instance_id: str, state: str) -> dict[str, Any]:
    event = copy.deepcopy(STATE_CHANGE)
    event["detail"] = {"instance-id": instance_id, "state": state}
    return event


@pytest.mark.parametrize(
    ("state", "action"),
    [("running", "upsert"), ("stopping", "remove"), ("stopped", "remove"),
     ("shutting-down", "remove"), ("terminated", "remove")],
)  # fmt: skip
def test_state_change_event(state: str, action: str) -> None:
    change = parse_event(json.dumps(state_change("i-1234567890abcdef0", state)))  # as an SQS body
    assert change == InstanceChange(
        "i-1234567890abcdef0",
        action,  # type: ignore[arg-type]
        f"aws.ec2/EC2 Instance State-change Notification#{state}",
        datetime(2021, 11, 11, 21, 29, 54, tzinfo=UTC),
        "7bf73129-1428-4cd3-a780-95db273d1602",
    )
    assert isinstance(change, InstanceChange) and change.detail == {"state": state, "region": "us-east-1"}


def test_documented_samples_parse() -> None:
    pending = parse_event(STATE_CHANGE)  # no topology before running: the running event re-reads it
    assert isinstance(pending, Ignored) and "running" in pending.reason
    launch_ = parse_event(ASG_LAUNCH)
    terminate = parse_event(json.dumps(ASG_TERMINATE).encode())
    assert isinstance(launch_, InstanceChange) and isinstance(terminate, InstanceChange)
    assert (launch_.instance, launch_.action) == ("i-1234567890abcdef0", "upsert")
    assert launch_.detail["region"] == "us-west-2"
    assert (terminate.instance, terminate.action) == ("i-1234567890abcdef0", "remove")
    sched = parse_event(SCHEDULED)
    assert isinstance(sched, Reconcile)
    assert sched.reason == "schedule arn:aws:events:us-east-1:123456789012:rule/SampleRule"
    custom = parse_event({"source": "topocast", "detail-type": "Reconcile"})
    assert isinstance(custom, Reconcile) and custom.cluster is None and custom.time is None
    targeted = parse_event({"source": "topocast", "detail-type": "Reconcile", "detail": {"cluster": "c1"}})
    assert isinstance(targeted, Reconcile) and targeted.cluster == "c1"


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ("{not json", "not JSON"),
        ("[1, 2]", "JSON object"),
        ({"source": "aws.ec2", "detail": {}}, "detail-type: is required"),
        ({**STATE_CHANGE, "detail": {"state": "running"}}, "detail.instance-id: is required"),
        ({**STATE_CHANGE, "detail": {"instance-id": "i-1234567890abcdef0", "state": "exploded"}}, "detail.state"),
        ({**STATE_CHANGE, "detail": {"instance-id": "vm-1", "state": "running"}}, "detail.instance-id"),
        ({**STATE_CHANGE, "detail": "running"}, "detail:"),
        ({**ASG_LAUNCH, "detail": {"StatusCode": "InProgress"}}, "detail.EC2InstanceId: is required"),
        ({"messageId": "m1", "receiptHandle": "r", "body": json.dumps(STATE_CHANGE)}, "record['body']"),
    ],
)
def test_malformed_events_say_what_and_where(body: Any, needle: str) -> None:
    with pytest.raises(MalformedEvent) as err:
        parse_event(body)
    assert needle in str(err.value), str(err.value)


def test_unsupported_event_is_a_distinct_error() -> None:
    with pytest.raises(UnsupportedEvent, match="RDS DB Instance Event"):  # a source the module does not subscribe to
        parse_event({**STATE_CHANGE, "source": "aws.rds", "detail-type": "RDS DB Instance Event"})


# ----- configuration --------------------------------------------------------------------------
def test_parse_filter() -> None:
    assert parse_filter("tag:topocast:cluster=c1") == {"Name": "tag:topocast:cluster", "Values": ["c1"]}
    assert parse_filter("instance-type=p5.48xlarge, p4d.24xlarge") == {
        "Name": "instance-type",
        "Values": ["p5.48xlarge", "p4d.24xlarge"],
    }
    assert parse_filter(r"tag:note=a\,b,c") == {"Name": "tag:note", "Values": ["a,b", "c"]}
    for bad in ("no-equals", "=v", "k=", "k=a,,b"):
        with pytest.raises(ValueError, match="filter"):
            parse_filter(bad)


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        ({"name_from": "hostname"}, "name_from"),
        ({"name_from": "template:{tag[Name]}-{nope}"}, "unknown placeholder {nope}"),
        ({"name_from": "template:{tag}"}, "tag[Key]"),
        ({"name_from": "template:gpu-{instance_id"}, "brace"),
        ({"name_from": "template:fixed"}, "no placeholder"),
        ({"filters": ["instance-state-name=running"]}, "instance-state-name"),
        ({"filters": ["oops"]}, "NAME=VALUE"),
        ({"cluster": "bad cluster"}, "cluster"),
    ],
)
def test_bad_config_is_a_clear_error(data: dict[str, Any], needle: str) -> None:
    with pytest.raises(ProviderError) as err:
        AwsDiscoveryConfig.from_data({"cluster": "demo", **data})
    assert needle in str(err.value)


def test_importing_discovery_does_not_import_boto3() -> None:
    code = (
        "import sys, topocast.providers.aws.provider, topocast.aws.events, topocast.aws.clients;"
        "print(sorted(m for m in ('boto3', 'botocore') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_a_followed_instance_in_transition_keeps_its_node_and_is_reported_unsettled(ec2: Any) -> None:
    ids = sim.generate_cluster(ec2, 3, name_prefix=None)
    base = discover_full(ec2, config(name_from="tag:Name")).graph
    kept = next(n for n in base.nodes if n.id == ids[0])
    set_ec2_state(ids[0], "stopping", 64, REGION)
    set_ec2_state(ids[1], "stopping", 64, REGION)
    followed = InstanceChange(ids[0], "upsert", "test", follow=True)
    plain = InstanceChange(ids[1], "upsert", "test")  # not followed: stopping is out
    result = discover_instances(ec2, config(name_from="tag:Name"), base, [followed, plain])
    assert result.unsettled == [ids[0]]
    assert next(n for n in result.graph.nodes if n.id == ids[0]) == kept  # exactly as it was
    assert ids[1] not in {n.id for n in result.graph.nodes}

    set_ec2_state(ids[0], "stopped", 80, REGION)  # steady out: removed, follow over
    result = discover_instances(ec2, config(name_from="tag:Name"), result.graph, [followed])
    assert result.unsettled == [] and ids[0] not in {n.id for n in result.graph.nodes}
