"""Topology before launch: DescribeCapacityReservationTopology (the simulator inside moto, wire format
from the botocore model) places reserved, not-yet-launched Slurm nodes; launched, they take their own."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError

from topocast.errors import ProviderError
from topocast.model.changes import InstanceChange
from topocast.providers.aws.capacity import parse_reserved_nodes
from topocast.providers.aws.ec2_calls import Ec2Calls
from topocast.providers.aws.provider import AwsDiscoveryConfig, discover_full, discover_instances
from topocast.providers.aws.sdk import ec2_client
from topocast.renderers import RenderOptions, render
from topocast_sim import ec2 as sim

REGION = "us-east-1"
CR = "cr-0123456789abcdef0"
#: root first, as EC2 returns them
RESERVED_PATH = ["nn-top-1", "nn-spine-7", "nn-leaf-reserved"]
REAL_PATH = ["nn-top-1", "nn-spine-9", "nn-leaf-real"]
BLOCK = "cb-0a1b2c3d4e5f60718"


@pytest.fixture
def ec2(aws_env: str) -> Iterator[Any]:
    sim.clear_capacity_reservations()
    yield ec2_client(REGION)
    sim.clear_capacity_reservations()


def config(**kw: Any) -> AwsDiscoveryConfig:
    return AwsDiscoveryConfig(cluster="c1", filters=["tag:topocast:cluster=c1"], name_from="tag:Name", **kw)


def launch(ec2: Any, name: str, path: list[str], block: str | None = None) -> str:
    # an UltraServer type: EC2 reports a CapacityBlockId for UltraServer instances only (botocore's model)
    [iid] = sim.generate_cluster(ec2, 1, cluster_tag=("topocast:cluster", "c1"), name_prefix=None, block_size=None,
                                 instance_type=sim.ULTRASERVER_TYPE)  # fmt: skip
    tags = {"Name": name, sim.NETWORK_NODES_TAG: ",".join(path), **({sim.CAPACITY_BLOCK_TAG: block} if block else {})}
    ec2.create_tags(Resources=[iid], Tags=[{"Key": k, "Value": v} for k, v in tags.items()])
    return iid


def test_reserved_nodes_are_placed_before_launch_then_launched_with_their_real_topology(ec2: Any) -> None:
    sim.add_capacity_reservation(CR, instance_type=sim.ULTRASERVER_TYPE, network_nodes=RESERVED_PATH,
                                 capacity_block_id=BLOCK)  # fmt: skip
    first = launch(ec2, "gpu-000", RESERVED_PATH, BLOCK)  # the first instance already runs in the block
    cfg = config(reserved_nodes={CR: "gpu-[000-003]"})

    result = discover_full(ec2, cfg)
    by_name = {n.name: n for n in result.graph.nodes}
    assert sorted(by_name) == ["gpu-000", "gpu-001", "gpu-002", "gpu-003"]
    assert by_name["gpu-000"].id == first  # launched: its own instance, not a placeholder
    for name in ("gpu-001", "gpu-002", "gpu-003"):
        node = by_name[name]
        assert node.id is None and node.fabric == ["nn-leaf-reserved", "nn-spine-7", "nn-top-1"]
        assert node.accelerator == BLOCK and node.labels["capacity-reservation"] == CR
    assert result.api_calls["DescribeCapacityReservationTopology"] == 1

    tree = render(result.graph, "slurm-tree").content
    leaf_line = next(line for line in tree.splitlines() if "Nodes=" in line)
    assert "gpu-[000-003]" in leaf_line  # all four under the reservation's leaf, before three exist
    blocks = render(result.graph, "slurm-block", RenderOptions(block_sizes=[4])).content
    assert "Nodes=gpu-[000-003]" in blocks

    # gpu-002 launches somewhere else in the fabric: the event's re-read gives it its real place
    second = launch(ec2, "gpu-002", REAL_PATH)
    after = discover_instances(ec2, cfg, result.graph, [InstanceChange(second, "upsert", "test")]).graph
    placed = {n.name: n for n in after.nodes}
    assert sorted(placed) == ["gpu-000", "gpu-001", "gpu-002", "gpu-003"]
    assert placed["gpu-002"].id == second and placed["gpu-002"].fabric == ["nn-leaf-real", "nn-spine-9", "nn-top-1"]
    assert placed["gpu-001"].id is None and placed["gpu-003"].id is None  # still waiting in the reservation
    again = discover_full(ec2, cfg, after).graph  # and a reconcile agrees
    assert {n.name: (n.id, n.fabric) for n in again.nodes} == {n.name: (n.id, n.fabric) for n in after.nodes}


def test_reservations_without_topology_or_unknown_place_nothing_and_say_so(ec2: Any) -> None:
    sim.add_capacity_reservation(CR, network_nodes=RESERVED_PATH, state="expired")
    ghost = "cr-0fedcba9876543210"
    result = discover_full(ec2, config(reserved_nodes={CR: ["gpu-010"], ghost: "gpu-[020-021]"}))
    assert result.graph.nodes == []
    text = " ".join(result.warnings)
    assert f"{CR} (expired, 1 node(s))" in text and ghost in text


def test_simulated_call_speaks_the_documented_wire_format(ec2: Any) -> None:
    ids = [f"cr-{i:017x}" for i in range(12)]
    for i, cr in enumerate(ids):
        sim.add_capacity_reservation(
            cr, instance_type="p5.48xlarge" if i % 2 else "m5.large", network_nodes=[f"nn-{i}"], zone="us-east-1a"
        )
    pages, token = [], None
    while True:
        kwargs: dict[str, Any] = {"MaxResults": 5, **({"NextToken": token} if token else {})}
        page = ec2.describe_capacity_reservation_topology(**kwargs)
        pages.append([c["CapacityReservationId"] for c in page["CapacityReservations"]])
        token = page.get("NextToken")
        if not token:
            break
    assert [len(p) for p in pages] == [5, 5, 2] and [c for p in pages for c in p] == ids
    one = ec2.describe_capacity_reservation_topology(CapacityReservationIds=[ids[1]])["CapacityReservations"][0]
    assert one["NetworkNodes"] == ["nn-1"] and one["AvailabilityZone"] == "us-east-1a" and one["State"] == "active"
    assert (
        "NetworkNodes"
        not in ec2.describe_capacity_reservation_topology(CapacityReservationIds=[ids[0]])["CapacityReservations"][0]
    )  # m5 reports no topology
    filtered = ec2.describe_capacity_reservation_topology(Filters=[{"Name": "instance-type", "Values": ["p5*"]}])
    assert len(filtered["CapacityReservations"]) == 6
    for kwargs, code in (
        ({"CapacityReservationIds": ids[:11]}, "InvalidParameterValue"),
        ({"CapacityReservationIds": ids[:2], "MaxResults": 5}, "InvalidParameterCombination"),
        ({"CapacityReservationIds": ["cr-0000000000000ffff"]}, "InvalidCapacityReservationId.NotFound"),
        ({"MaxResults": 11}, "InvalidParameterValue"),  # the model's range is 1..10
    ):
        with pytest.raises(ClientError) as err:
            ec2.describe_capacity_reservation_topology(**kwargs)
        assert err.value.response["Error"]["Code"] == code, kwargs

    api = Ec2Calls(ec2, "c1")
    found, missing = api.capacity_topology([*ids, "cr-0000000000000ffff"])  # 13 IDs: batches of 10
    assert set(found) == set(ids) and missing == {"cr-0000000000000ffff"}


def test_reserved_nodes_configuration_errors_name_what_is_wrong() -> None:
    assert parse_reserved_nodes(f"{CR}=gpu-[1-2];cr-0fedcba9876543210=x1") == {
        CR: ["gpu-1", "gpu-2"],
        "cr-0fedcba9876543210": ["x1"],
    }
    for value, needle in (
        ({"cb-123": "gpu-1"}, "not a capacity reservation ID"),
        ({CR: "gpu-[1-2]", "cr-0fedcba9876543210": "gpu-2"}, "gpu-2 is in both"),
        ({CR: "gpu-[1-"}, CR),
        ("gpu-1", "expected cr-ID=HOSTLIST"),
    ):
        with pytest.raises(ProviderError, match=needle.replace("[", r"\[")):
            AwsDiscoveryConfig.from_data({"cluster": "c1", "reserved_nodes": value})
