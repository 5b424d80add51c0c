"""One naming rule for every cloud (topocast.providers.naming): contested names, the previous holder,
and a waiting machine taking its name once it is free, in whichever order the events arrive."""

from __future__ import annotations

from typing import Any

import pytest
from gce_fake_server import FakeCompute, compute_for

from topocast.model.graph import Node, TopologyGraph
from topocast.providers.gcp.api import InstanceRef
from topocast.providers.gcp.provider import GcpDiscoveryConfig, discover_full, discover_instances
from topocast.providers.naming import WANTED_NAME_LABEL, NameRequest, assign_names, claim_freed_names, name_listing
from topocast_sim.gce import Placement, instance_json

LABEL = {"topocast-cluster": "c1"}
WHERE = Placement(cluster="cl", block="blk-a", subblock="sub-a", host="h1")


def names(requests: list[NameRequest], held: dict[str, str] | None = None, previous: dict[str, str] | None = None):
    return assign_names(requests, held=held or {}, previous=previous or {}, noun="instance(s)", source="test")


def test_a_name_held_outside_the_batch_stays_with_its_holder() -> None:
    out = names([NameRequest("i-2", "gpu-1")], held={"gpu-1": "i-1"})
    assert out.names == {"i-2": "i-2"} and out.wanted == {"i-2": "gpu-1"}
    assert "share their name" in out.warnings[0] and "i-2" in out.warnings[0]


def test_the_previous_holder_keeps_a_contested_name_and_new_claimants_wait() -> None:
    out = names([NameRequest("i-1", "gpu-1"), NameRequest("i-2", "gpu-1")], previous={"i-1": "gpu-1"})
    assert out.names == {"i-1": "gpu-1", "i-2": "i-2"} and out.wanted == {"i-2": "gpu-1"}


def test_nobody_gets_a_name_two_new_machines_claim() -> None:
    out = names([NameRequest("i-1", "gpu-1"), NameRequest("i-2", "gpu-1"), NameRequest("i-3", "gpu-3")])
    assert out.names == {"i-1": "i-1", "i-2": "i-2", "i-3": "gpu-3"}
    assert out.wanted == {"i-1": "gpu-1", "i-2": "gpu-1"}


def test_an_unusable_name_takes_the_fallback_then_the_key() -> None:
    out = names(
        [NameRequest("1", None, "have no label x", "vm-a", "z/vm-a"), NameRequest("2", None, "have no label x")]
    )
    assert out.names == {"1": "vm-a", "2": "2"} and out.wanted == {}
    assert out.warnings == ["2 instance(s) have no label x (test): 2, z/vm-a"]


def node(name: str, key: str, wanted: str | None = None) -> Node:
    return Node(name=name, id=key, fabric=["l1", "s1"], labels={WANTED_NAME_LABEL: wanted} if wanted else {})


def test_a_freed_name_goes_to_its_only_waiting_machine_and_the_label_is_gone() -> None:
    nodes = {"i-2": node("i-2", "i-2", "gpu-1"), "i-3": node("gpu-3", "i-3")}
    warnings = claim_freed_names(nodes, "instance(s)")
    assert nodes["i-2"].name == "gpu-1" and WANTED_NAME_LABEL not in nodes["i-2"].labels
    assert warnings == ["1 instance(s) named by ID took their name once its holder left: i-2"]


def test_a_name_still_held_or_wanted_by_two_is_not_taken() -> None:
    nodes = {"i-1": node("gpu-1", "i-1"), "i-2": node("i-2", "i-2", "gpu-1")}
    assert claim_freed_names(nodes, "instance(s)") == [] and nodes["i-2"].name == "i-2"
    nodes = {"i-2": node("i-2", "i-2", "gpu-1"), "i-3": node("i-3", "i-3", "gpu-1")}
    assert claim_freed_names(nodes, "instance(s)") == [] and {n.name for n in nodes.values()} == {"i-2", "i-3"}


def test_a_full_listing_names_by_key_and_leaves_what_the_rule_cannot_decide_to_place_nodes() -> None:
    listed = [
        ("k1", "gpu-1"), ("k2", "gpu-1"),  # two new claimants: neither gets it
        ("k3", None), ("bad key", ""),  # no name: the key, unless the key is no safe node name
        ("k5", "gpu 5;x"),  # an unsafe name stays, for place_nodes to set aside
        ("k6", "gpu-6"), ("k6", "gpu-6b"), ("", "gpu-7"),  # a key listed twice, no key: as the source says
        ("k9", "gpu-9"),
    ]  # fmt: skip
    out = name_listing(listed, None, "name")
    assert out.names == ["k1", "k2", "k3", None, "gpu 5;x", "gpu-6", "gpu-6b", "gpu-7", "gpu-9"]
    wanted = {WANTED_NAME_LABEL: "gpu-1"}
    assert out.labels == [wanted, wanted, {}, {}, {}, {}, {}, {}, {}]
    assert out.warnings == [
        "1 instance(s) have no name (name_from=name): k3",
        "2 instance(s) share their name with another machine; named by ID until it is free (name_from=name): k1, k2",
    ]
    previous = TopologyGraph(cluster="c", provider="oci", nodes=[Node(name="gpu-1", id="k2")])
    assert name_listing(listed[:2], previous, "name").names == ["k1", "gpu-1"]


# ----- GCP end to end: google-cloud-compute against the local Compute endpoint -----------------------
def config() -> GcpDiscoveryConfig:
    return GcpDiscoveryConfig.from_data({"cluster": "c1", "project": "demo-project", "labels": ["topocast-cluster=c1"]})


def vm(zone: str, name: str, iid: str) -> dict[str, Any]:
    return instance_json("demo-project", zone, name, iid=iid, where=WHERE, labels=LABEL)


@pytest.mark.parametrize("order", ["creation first", "deletion first", "one batch"])
def test_a_name_reused_in_another_zone_reaches_the_new_vm_whatever_the_order(
    fake_compute: FakeCompute, order: str
) -> None:
    fake_compute.add([vm("us-central1-a", "gpu-1", "111"), vm("us-central1-a", "gpu-2", "112")])
    client = compute_for(fake_compute)
    graph = discover_full(client, config()).graph
    # gpu-1 is deleted in zone a and created again in zone b (a new VM, a new ID)
    fake_compute.remove("us-central1-a", "gpu-1")
    fake_compute.add([vm("us-central1-b", "gpu-1", "222")])
    created, deleted = InstanceRef("us-central1-b", "gpu-1"), InstanceRef("us-central1-a", "gpu-1", "111")
    batches = {"creation first": [[created], [deleted]], "deletion first": [[deleted], [created]]}
    for refs in batches.get(order, [[created, deleted]]):
        graph = discover_instances(client, config(), graph, refs).graph
    by_name = {n.name: n for n in graph.nodes}
    assert sorted(by_name) == ["gpu-1", "gpu-2"]
    assert by_name["gpu-1"].id == "222" and by_name["gpu-1"].zone == "us-central1-b"
    assert WANTED_NAME_LABEL not in by_name["gpu-1"].labels
    # and a fresh full discovery agrees
    assert discover_full(client, config()).graph.node_names() == ["gpu-1", "gpu-2"]


def test_while_the_old_vm_is_applied_the_new_one_waits_under_its_id(fake_compute: FakeCompute) -> None:
    fake_compute.add([vm("us-central1-a", "gpu-1", "111")])
    client = compute_for(fake_compute)
    graph = discover_full(client, config()).graph
    fake_compute.add([vm("us-central1-b", "gpu-1", "222")])  # the old one is not deleted yet
    result = discover_instances(client, config(), graph, [InstanceRef("us-central1-b", "gpu-1")])
    by_id = {n.id: n for n in result.graph.nodes}
    assert by_id["111"].name == "gpu-1" and by_id["222"].name == "222"
    assert by_id["222"].labels[WANTED_NAME_LABEL] == "gpu-1"
    assert any("share their name" in w and "us-central1-b/gpu-1" in w for w in result.warnings)


def test_a_full_discovery_keeps_a_contested_name_with_its_previous_holder(fake_compute: FakeCompute) -> None:
    fake_compute.add([vm("us-central1-a", "gpu-1", "111")])
    client = compute_for(fake_compute)
    before = discover_full(client, config()).graph
    fake_compute.add([vm("us-central1-b", "gpu-1", "222")])  # two live VMs named gpu-1
    after = discover_full(client, config(), before).graph
    assert {n.id: n.name for n in after.nodes} == {"111": "gpu-1", "222": "222"}


def test_aws_and_gcp_machines_are_named_by_the_one_loop_each_warning_naming_its_source() -> None:
    """``name_machines``: what both clouds' ``_names`` call (a missing name, an unsafe one, a fallback)."""
    from topocast.providers.naming import Machine, name_machines

    machines = [
        Machine("i-1", "gpu-1", "tag 'Name'"),
        Machine("i-2", None, "tag 'Name'"),
        Machine("i-3", "bad name", "tag 'Name'"),
        Machine("42", "x;y", "label slurm", shown="z1/vm-a", fallback="vm-a"),
        Machine("43", None, "label slurm", shown="z1/vm b", fallback="vm b"),  # the fallback is unsafe too
        Machine("i-4", "gpu-1", "tag 'Name'"),  # claims i-1's name: i-1 had it in the previous graph
    ]
    previous = TopologyGraph(cluster="c1", provider="aws", nodes=[Node(name="gpu-1", id="i-1")])
    out = name_machines(machines, kind="instance", name_from="tag:Name", taken={}, previous=previous)
    assert out.names == {"i-1": "gpu-1", "i-2": "i-2", "i-3": "i-3", "42": "vm-a", "43": "43", "i-4": "i-4"}
    assert out.wanted == {"i-4": "gpu-1"}
    assert out.warnings == [
        "1 instance(s) have no tag 'Name' (name_from=tag:Name): i-2",
        "1 instance(s) have an unsafe name from tag 'Name' (name_from=tag:Name): i-3",
        "1 instance(s) have an unsafe name from label slurm (name_from=tag:Name): z1/vm-a",
        "1 instance(s) have no label slurm (name_from=tag:Name): z1/vm b",
        "1 instance(s) share their name with another machine; named by ID until it is free (name_from=tag:Name): i-4",
    ]
