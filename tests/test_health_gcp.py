"""GCP sub-block health: ``reservationSubBlocks.get`` ``healthInfo`` (the local Compute endpoint, sub-blocks built
as google-cloud-compute's own ``ReservationSubBlock``, read through its real REST client) becomes health
records; a DEGRADED sub-block's VMs are the blast radius.

Cluster: 8 VMs, 4 per sub-block (hosts_per_subblock=4), so gpu-00[0-3] share the first sub-block and
gpu-00[4-7] the second; the expected sets come from the generator's own placements.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from gce_fake_server import FakeCompute, compute_for, generate_cluster

from topocast.model.changes import InstanceChange
from topocast.model.graph import TopologyGraph
from topocast.model.health import node_health
from topocast.providers.base import ProviderInputs
from topocast.providers.gcp.provider import GcpDiscoveryConfig, GcpProvider, discover_full
from topocast.providers.gcp.sdk import sub_blocks_client

LABEL = ("topocast-cluster", "c1")
ZONE = "us-central1-a"


def config(**kw: Any) -> GcpDiscoveryConfig:
    base: dict[str, Any] = {"cluster": "c1", "project": "demo-project", "labels": [f"{LABEL[0]}={LABEL[1]}"]}
    return GcpDiscoveryConfig.from_data({"sub_block_health": True, **base, **kw})


def cluster(fake: FakeCompute) -> dict[str, list[str]]:
    """The VMs and their sub-blocks; returns sub-block name (sb-0, sb-1) -> VM names."""
    gen = generate_cluster(8, label=LABEL, zones=(ZONE,), hosts_per_subblock=4, subblocks_per_block=2)
    fake.add(gen.instances)
    by_topology: dict[tuple[str, str, str], list[str]] = defaultdict(list)
    for name, where in gen.placements.items():
        assert where is not None
        by_topology[(where.cluster, where.block, where.subblock)].append(name)
    out = {}
    for i, (topology, vms) in enumerate(sorted(by_topology.items())):
        fake.add_sub_block(ZONE, "res-1", "blk-1", f"sb-{i}", topology=topology, vms=vms, hosts=(4, 0))
        out[f"sb-{i}"] = sorted(vms)
    return out


def radius(graph: TopologyGraph) -> dict[str, str]:
    rows = [(n.name, n.fabric, n.accelerator, n.labels) for n in graph.nodes]
    return {name: h.state for name, h in node_health(rows, graph.health).items()}


def test_a_degraded_sub_block_reaches_its_vms_and_healing_clears_it(fake_compute: FakeCompute) -> None:
    subs = cluster(fake_compute)
    compute, reader = compute_for(fake_compute), sub_blocks_client(fake_compute.url)
    healthy = discover_full(compute, config(), sub_blocks=reader)
    assert healthy.graph.health == []
    assert healthy.api_calls["compute.reservationSubBlocks.get"] == 2  # one per distinct sub-block

    fake_compute.set_sub_block_health(ZONE, "res-1", "blk-1", "sb-1", "DEGRADED", degraded_hosts=1, degraded_infra=1)
    broken = discover_full(compute, config(), healthy.graph, sub_blocks=reader).graph
    [rec] = broken.health
    sb1 = next(n.accelerator for n in broken.nodes if n.name == subs["sb-1"][0])
    assert (rec.kind, rec.id, rec.state, rec.source) == ("domain", sb1, "degraded", "gcp-sub-block")
    assert rec.reason == "sub-block sb-1 DEGRADED: 1 of 4 host(s), 1 of 1 infra degraded"
    assert radius(broken) == dict.fromkeys(subs["sb-1"], "degraded")

    # the same state seen again keeps the record (and its first time): the graph does not change
    again = discover_full(compute, config(), broken, sub_blocks=reader).graph
    assert again.content_hash() == broken.content_hash()

    fake_compute.set_sub_block_health(ZONE, "res-1", "blk-1", "sb-1", "HEALTHY")
    assert discover_full(compute, config(), again, sub_blocks=reader).graph.health == []


def test_the_detailed_states_map_and_a_block_tier_puts_it_on_the_switch(fake_compute: FakeCompute) -> None:
    subs = cluster(fake_compute)
    fake_compute.set_sub_block_health(ZONE, "res-1", "blk-1", "sb-0", "UNHEALTHY", degraded_hosts=4)
    graph = discover_full(
        compute_for(fake_compute), config(domain_tier="block"), sub_blocks=sub_blocks_client(fake_compute.url)
    ).graph
    [rec] = graph.health
    leaf = next(n.fabric[0] for n in graph.nodes if n.name == subs["sb-0"][0])
    assert (rec.kind, rec.id, rec.state) == ("switch", leaf, "impaired")
    assert radius(graph) == dict.fromkeys(subs["sb-0"], "impaired")


def test_the_provider_asks_its_shell_for_the_sub_block_client_and_events_keep_the_records(
    fake_compute: FakeCompute,
) -> None:
    subs = cluster(fake_compute)
    fake_compute.set_sub_block_health(ZONE, "res-1", "blk-1", "sb-0", "DEGRADED")
    asked: list[str] = []

    def clients(service: str) -> Any:
        asked.append(service)
        return compute_for(fake_compute) if service == "compute" else sub_blocks_client(fake_compute.url)

    options = {"project": "demo-project", "labels": [f"{LABEL[0]}={LABEL[1]}"], "sub_block_health": True,
               "read": "get"}  # fmt: skip
    provider = GcpProvider(ProviderInputs(cluster="c1", options=options, sdk_client=clients))
    full = provider.discover_full(None).graph
    assert sorted(set(asked)) == ["compute", "compute-sub-blocks"]
    vm = subs["sb-1"][0]
    one = provider.discover_changes(full, [InstanceChange(f"demo-project/{ZONE}/{vm}", "upsert", "test")]).graph
    assert one.health == full.health  # an event window reads no sub-block; the reconcile does


def test_without_the_option_no_sub_block_is_read(fake_compute: FakeCompute) -> None:
    cluster(fake_compute)
    fake_compute.set_sub_block_health(ZONE, "res-1", "blk-1", "sb-0", "DEGRADED")
    result = discover_full(
        compute_for(fake_compute), config(sub_block_health=False), sub_blocks=sub_blocks_client(fake_compute.url)
    )
    assert result.graph.health == []
    assert "compute.reservationSubBlocks.get" not in result.api_calls
