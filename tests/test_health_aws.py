"""AWS capacity block health: DescribeCapacityBlockStatus (the simulator inside moto, on the wire in the
botocore model's shape) becomes health records; the nodes of an impaired block are its blast radius.

Cluster: gpu-[0-3] run in capacity block cb-a (reservations cr-a1 = gpu-[0-1], cr-a2 = gpu-[2-3]), gpu-[4-5] in
cb-b (cr-b1), and two UltraServer instances whose CapacityBlockId cb-u is their NVLink domain.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError
from cli_runner import invoke

from topocast.model.changes import InstanceChange
from topocast.model.graph import TopologyGraph, dump_graph
from topocast.model.health import node_health
from topocast.providers.aws.provider import AwsDiscoveryConfig, discover_full, discover_instances
from topocast.providers.aws.sdk import ec2_client
from topocast_sim import ec2 as sim

REGION = "us-east-1"
PATH = ["nn-top", "nn-spine", "nn-leaf"]


@pytest.fixture
def blocks(aws_env: str) -> Iterator[Any]:
    """The account's capacity blocks, no instance."""
    sim.clear_capacity_blocks()
    sim.add_capacity_block("cb-a", {"cr-a1": 2, "cr-a2": 2})
    sim.add_capacity_block("cb-b", {"cr-b1": 2})
    sim.add_capacity_block("cb-u", {"cr-u1": 2})
    sim.add_capacity_block("cb-elsewhere", {"cr-x": 8}, interconnect="impaired")  # another team's block
    yield ec2_client(REGION)
    sim.clear_capacity_blocks()


@pytest.fixture
def ec2(blocks: Any) -> Any:
    """The blocks and the cluster's eight instances running in them."""
    common: dict[str, Any] = {"cluster_tag": ("topocast:cluster", "c1"), "name_prefix": None, "block_size": None}
    ids = sim.generate_cluster(blocks, 6, **common) + sim.generate_cluster(
        blocks, 2, instance_type="p6e-gb200.36xlarge", **common
    )
    reservations = ["cr-a1", "cr-a1", "cr-a2", "cr-a2", "cr-b1", "cr-b1", "cr-u1", "cr-u1"]
    for i, (iid, cr) in enumerate(zip(ids, reservations, strict=True)):
        tags = {"Name": f"gpu-{i}", sim.NETWORK_NODES_TAG: ",".join(PATH), sim.CAPACITY_RESERVATION_TAG: cr}
        if i >= 6:
            tags[sim.CAPACITY_BLOCK_TAG] = "cb-u"
        blocks.create_tags(Resources=[iid], Tags=[{"Key": k, "Value": v} for k, v in tags.items()])
    return blocks


def config(**kw: Any) -> AwsDiscoveryConfig:
    kw.setdefault("capacity_block_health", True)
    return AwsDiscoveryConfig(cluster="c1", filters=["tag:topocast:cluster=c1"], name_from="tag:Name", **kw)


def radius(graph: TopologyGraph) -> dict[str, str]:
    rows = [(n.name, n.fabric, n.accelerator, n.labels) for n in graph.nodes]
    return {name: f"{h.state} {h.blame}" for name, h in node_health(rows, graph.health).items()}


def test_an_impaired_block_reaches_its_nodes_and_healing_clears_it(ec2: Any) -> None:
    healthy = discover_full(ec2, config())
    assert healthy.graph.health == []
    assert healthy.api_calls["DescribeCapacityBlockStatus"] == 1
    labels = {n.name: n.labels.get("capacity-block") for n in healthy.graph.nodes}
    # the UltraServers' block is their accelerator domain already: no label
    assert labels == {**{f"gpu-{i}": "cb-a" for i in range(4)}, "gpu-4": "cb-b", "gpu-5": "cb-b",
                      "gpu-6": None, "gpu-7": None}  # fmt: skip

    sim.set_capacity_block_status("cb-a", "impaired", unavailable={"cr-a2": 1})
    sim.set_capacity_block_status("cb-u", "insufficient-data")
    broken = discover_full(ec2, config(), healthy.graph).graph
    assert [(r.kind, r.id, r.state, r.reason) for r in broken.health] == [
        ("capacity_block", "cb-a", "impaired", "interconnect impaired; 1 of 4 instance(s) unavailable"),
        ("capacity_block", "cb-u", "unknown", "interconnect insufficient-data; 0 of 2 instance(s) unavailable"),
    ]  # cb-elsewhere is impaired too, but no node of this cluster is in it
    assert radius(broken) == {
        **{f"gpu-{i}": "impaired capacity_block cb-a" for i in range(4)},
        "gpu-6": "unknown capacity_block cb-u",
        "gpu-7": "unknown capacity_block cb-u",
    }

    # an instance event re-reads one node: the block's record stays, with the time it was first seen
    gpu0 = next(n.id for n in broken.nodes if n.name == "gpu-0")
    assert gpu0 is not None
    again = discover_instances(ec2, config(), broken, [InstanceChange(gpu0, "upsert", "test")]).graph
    assert again.health == broken.health
    assert radius(again) == radius(broken)

    sim.set_capacity_block_status("cb-a", "ok", unavailable={})
    sim.set_capacity_block_status("cb-u", "ok")
    assert discover_full(ec2, config(), again).graph.health == []


def test_without_the_option_no_status_is_read(ec2: Any) -> None:
    sim.set_capacity_block_status("cb-a", "impaired")
    result = discover_full(ec2, config(capacity_block_health=False))
    assert "DescribeCapacityBlockStatus" not in result.api_calls
    assert result.graph.health == []


def test_the_graph_drives_the_drain_plan(ec2: Any, tmp_path: Path) -> None:
    sim.set_capacity_block_status("cb-b", "impaired")
    graph = discover_full(ec2, config()).graph
    path = tmp_path / "g.json"
    path.write_text(dump_graph(graph))
    shown = invoke(["health", "show", path])
    assert shown.exit_code == 0
    assert "impaired  capacity_block cb-b (interconnect impaired; 0 of 2 instance(s) unavailable)" in shown.stdout
    assert "2 node(s): gpu-[4-5]" in shown.stdout
    data = json.loads(invoke(["health", "show", "--json", path]).stdout)
    assert sorted(data["nodes"]) == ["gpu-4", "gpu-5"]


@pytest.mark.parametrize(
    ("kwargs", "code"),
    [
        ({"MaxResults": 0}, "InvalidParameterValue"),
        ({"MaxResults": 1001}, "InvalidParameterValue"),
        ({"Filters": [{"Name": "instance-type", "Values": ["p5.48xlarge"]}]}, "InvalidParameterValue"),
        ({"CapacityBlockIds": ["cb-nope"]}, "InvalidCapacityBlockId.NotFound"),
        ({"DryRun": True}, "DryRunOperation"),
    ],
)
def test_the_simulator_refuses_what_ec2_refuses(blocks: Any, kwargs: dict[str, Any], code: str) -> None:
    import boto3
    from botocore.config import Config

    raw = boto3.client("ec2", region_name=REGION, config=Config(parameter_validation=False))  # reach the server
    with pytest.raises(ClientError) as err:
        raw.describe_capacity_block_status(**kwargs)
    assert err.value.response["Error"]["Code"] == code


def test_the_simulator_pages_and_filters_in_the_models_shape(blocks: Any) -> None:
    ec2 = blocks
    sim.set_capacity_block_status("cb-b", "impaired")
    first = ec2.describe_capacity_block_status(MaxResults=2)
    assert [s["CapacityBlockId"] for s in first["CapacityBlockStatuses"]] == ["cb-a", "cb-b"]
    rest = ec2.describe_capacity_block_status(MaxResults=2, NextToken=first["NextToken"])
    assert [s["CapacityBlockId"] for s in rest["CapacityBlockStatuses"]] == ["cb-elsewhere", "cb-u"]
    assert "NextToken" not in rest
    bad = ec2.describe_capacity_block_status(Filters=[{"Name": "interconnect-status", "Values": ["impaired"]}])
    assert [s["CapacityBlockId"] for s in bad["CapacityBlockStatuses"]] == ["cb-b", "cb-elsewhere"]
    one = ec2.describe_capacity_block_status(CapacityBlockIds=["cb-a"])["CapacityBlockStatuses"][0]
    assert one["TotalCapacity"] == 4 and one["TotalUnavailableCapacity"] == 0
    assert [r["CapacityReservationId"] for r in one["CapacityReservationStatuses"]] == ["cr-a1", "cr-a2"]


def test_from_the_command_line_the_option_reads_the_status(ec2: Any, tmp_path: Path) -> None:
    sim.set_capacity_block_status("cb-a", "impaired")
    first, second = tmp_path / "g0.json", tmp_path / "g1.json"
    args = ["discover", "--provider", "aws", "--cluster", "c1", "--filter", "tag:topocast:cluster=c1",
            "--name-from", "tag:Name", "--option", "capacity_block_health=true"]  # fmt: skip
    assert invoke([*args, "--out", first]).exit_code == 0
    assert invoke([*args, "--previous", first, "--out", second]).exit_code == 0
    data = json.loads(invoke(["health", "show", "--json", second]).stdout)
    assert sorted(data["nodes"]) == [f"gpu-{i}" for i in range(4)]
    # seen twice: the record keeps the time it was first seen, so the graph is the same
    assert first.read_text() == second.read_text()
