"""GCP discovery: google-cloud-compute's real REST transport and pager against the local Compute endpoint."""

from __future__ import annotations

import math
from typing import Any

import pytest
import yaml
from gce_fake_server import FakeCompute, compute_for, generate_cluster

from topocast.errors import ProviderError
from topocast.providers.gcp.api import InstanceRef
from topocast.providers.gcp.provider import GcpDiscoveryConfig, discover_full, discover_instances
from topocast.providers.gcp.retry import RetryPolicy
from topocast.renderers import RenderOptions, render
from topocast_sim.gce import instance_json, placement

LABEL = ("topocast-cluster", "c1")


def config(**kw: Any) -> GcpDiscoveryConfig:
    base: dict[str, Any] = {"cluster": "c1", "project": "demo-project", "labels": [f"{LABEL[0]}={LABEL[1]}"]}
    return GcpDiscoveryConfig.from_data({**base, **kw})


def fast_retry() -> RetryPolicy:
    return RetryPolicy(initial=0.01, maximum=0.05, timeout=20)


def test_full_discovery_pages_filters_and_maps_topology(fake_compute: FakeCompute) -> None:
    gen = generate_cluster(
        40, label=LABEL, zones=("us-central1-a", "us-central1-b"), hosts_per_subblock=4, subblocks_per_block=2,
        without_topology=2, physical_host_only=3, extra=5,
    )  # fmt: skip
    fake_compute.add(gen.instances)
    result = discover_full(compute_for(fake_compute), config(page_size=7))
    graph = result.graph

    # the server-side filter and page size went out, and the pager followed every token
    filters = {q.get("filter") for _, q in fake_compute.requests}
    assert filters == {f'(labels.{LABEL[0]} = "{LABEL[1]}") AND (status = "RUNNING")'}
    assert {q["maxResults"] for _, q in fake_compute.requests} == {"7"}
    assert result.api_calls == {"compute.instances.aggregatedList": math.ceil(40 / 7)}

    assert graph.node_names() == sorted(gen.placements)  # the 5 foreign VMs are not in the graph
    by_name = {n.name: n for n in graph.nodes}
    for name, where in gen.placements.items():
        node = by_name[name]
        if where is None:
            assert node.fabric == [] and node.accelerator is None
        else:  # closest first, the sub-block is the NVLink domain; physicalHost-only VMs included
            assert node.fabric == [where.subblock, where.block, where.cluster]
            assert node.accelerator == where.subblock
        assert node.id == next(i["id"] for i in gen.instances if i["name"] == name)
    assert graph.nodes_without_topology() == ["gpu-038", "gpu-039"]
    assert any("gpu-038" in w and "no physicalHostTopology" in w for w in result.warnings)


def test_zone_listing_uses_instances_list_and_accepts_the_project_number(fake_compute: FakeCompute) -> None:
    gen = generate_cluster(12, label=LABEL, zones=("us-central1-a", "us-central1-b"))
    fake_compute.add(gen.instances)
    cfg = config(project="123456789012", zones=["us-central1-b"], page_size=2, domain_tier="block")
    result = discover_full(compute_for(fake_compute), cfg)
    assert result.graph.node_names() == [f"gpu-{i:03d}" for i in range(1, 12, 2)]  # only zone b
    assert result.api_calls == {"compute.instances.list": 3}
    assert all(n.accelerator == n.fabric[1] for n in result.graph.nodes)  # block as the domain


@pytest.mark.parametrize("status", [429, 500, 503])
def test_a_third_of_the_calls_failing_still_gives_the_right_graph(fake_compute: FakeCompute, status: int) -> None:
    gen = generate_cluster(60, label=LABEL)
    fake_compute.add(gen.instances)
    client = compute_for(fake_compute)
    clean = discover_full(client, config(page_size=10), retry=fast_retry())
    fake_compute.reset_counts()
    fake_compute.inject_faults(1 / 3, status=status)
    faulty = discover_full(client, config(page_size=10), retry=fast_retry())
    assert sum(fake_compute.injected.values()) >= 2 and faulty.retries == sum(fake_compute.injected.values())
    assert faulty.graph == clean.graph


def test_permission_denied_names_the_permission_and_role(fake_compute: FakeCompute) -> None:
    fake_compute.add(generate_cluster(3, label=LABEL).instances)
    fake_compute.inject_faults(1, status=403)
    with pytest.raises(ProviderError, match=r"compute\.instances\.list.*roles/compute\.viewer"):
        discover_full(compute_for(fake_compute), config(), retry=fast_retry())


def test_retries_give_up_with_a_clear_error(fake_compute: FakeCompute) -> None:
    fake_compute.add(generate_cluster(3, label=LABEL).instances)
    fake_compute.inject_faults(1, status=503)
    with pytest.raises(ProviderError, match="kept failing after retries"):
        discover_full(compute_for(fake_compute), config(), retry=RetryPolicy(initial=0.01, maximum=0.02, timeout=0.3))


def test_incremental_update_rechecks_only_the_named_vms(fake_compute: FakeCompute) -> None:
    gen = generate_cluster(8, label=LABEL, zones=("us-central1-a",))
    fake_compute.add(gen.instances[:6])
    client = compute_for(fake_compute)
    before = discover_full(client, config()).graph
    fake_compute.add(gen.instances[6:])  # two new VMs
    fake_compute.remove("us-central1-a", "gpu-000")  # deleted (404 on get)
    fake_compute.set_status("us-central1-a", "gpu-001", "TERMINATED")  # stopped
    fake_compute.instances[("us-central1-a", "gpu-002")]["labels"] = {LABEL[0]: "other"}  # relabelled
    fake_compute.reset_counts()
    refs = [InstanceRef("us-central1-a", f"gpu-{i:03d}") for i in (0, 1, 2, 6, 7)]
    result = discover_instances(client, config(), before, refs)
    assert fake_compute.calls == {"get": 5}
    assert result.graph.node_names() == ["gpu-003", "gpu-004", "gpu-005", "gpu-006", "gpu-007"]
    assert result.removed == ["gpu-000", "gpu-001", "gpu-002"] and result.upserted == ["gpu-006", "gpu-007"]


def test_node_names_from_labels_fall_back_on_duplicates(fake_compute: FakeCompute) -> None:
    gen = generate_cluster(3, label=LABEL)
    for inst, host in zip(gen.instances, ["a1", "a1", "b1"], strict=True):
        inst["labels"]["slurm-name"] = host
    fake_compute.add(gen.instances)
    result = discover_full(compute_for(fake_compute), config(name_from="label:slurm-name"))
    names = result.graph.node_names()
    assert "b1" in names and "a1" not in names  # the shared name is not used for either VM
    assert sorted(set(names) - {"b1"}) == sorted(i["id"] for i in gen.instances[:2])
    assert any("share their name" in w for w in result.warnings)


@pytest.mark.parametrize(
    ("physical_host", "expect_cluster"),
    [("/blk-a/sub-a/h1", "cl-1"), ("blk-a/sub-a/h1", "cl-1"), ("/cl-9/blk-z/sub-z/h1", "cl-9")],
)
def test_physical_host_fallback(fake_compute: FakeCompute, physical_host: str, expect_cluster: str) -> None:
    full = instance_json(
        "demo-project", "us-central1-a", "full", iid="1",
        where=placement(0, seed="x", hosts_per_subblock=1, subblocks_per_block=1, blocks_per_cluster=1),
        labels=dict([LABEL]),
    )  # fmt: skip
    full["resourceStatus"]["physicalHostTopology"].update(cluster="cl-1", block="blk-a", subblock="sub-0")
    bare = instance_json("demo-project", "us-central1-a", "bare", iid="2", where=None, labels=dict([LABEL]))
    bare["resourceStatus"] = {"physicalHost": physical_host}
    fake_compute.add([full, bare])
    node = next(n for n in discover_full(compute_for(fake_compute), config()).graph.nodes if n.name == "bare")
    block = physical_host.strip("/").split("/")[-3]
    assert node.fabric == [physical_host.strip("/").split("/")[-2], block, expect_cluster]


def test_a_subblock_id_under_two_blocks_is_qualified(fake_compute: FakeCompute) -> None:
    insts = []
    for i, block in enumerate(["b1", "b2"]):
        inst = instance_json("demo-project", "us-central1-a", f"n{i}", iid=str(i + 1), where=None, labels=dict([LABEL]))
        topo = {"cluster": "c", "block": block, "subblock": "s1", "host": f"h{i}"}
        inst["resourceStatus"] = {"physicalHostTopology": topo}
        insts.append(inst)
    fake_compute.add(insts)
    result = discover_full(compute_for(fake_compute), config())
    f0, f1 = (n.fabric for n in result.graph.nodes)
    assert f0[1:] == ["b1", "c"] and f1[1:] == ["b2", "c"] and f0[0] != f1[0]
    assert any("qualified" in w for w in result.warnings)


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"labels": ["Bad Key=x"]}, "labels"),
        ({"name_from": "tag:Name"}, "name_from"),
        ({"fabric_levels": ["cluster", "block"]}, "fabric_levels"),
        ({"page_size": 501}, "page_size"),
    ],
)
def test_bad_configuration_names_the_field(data: dict[str, Any], field: str) -> None:
    with pytest.raises(ProviderError, match=field):
        config(**data)


# ----- Topograph's gcp-sim conformance cases -----------------------------------------------------
def _model_instances(model: dict[str, Any], names: dict[str, str]) -> list[dict[str, Any]]:
    """GCE VMs for a Topograph model: leaf switch = sub-block, its parent the block, then the cluster."""
    parent = {child: sw for sw, spec in model["switches"].items() for child in (spec or {}).get("switches", [])}
    placed: dict[str, tuple[str, str, str]] = {}
    for block in model["blocks"]:
        sub = block["switch"]
        for host in block["nodes"]:
            placed[str(host)] = (sub, parent[sub], parent[parent[sub]])
    out = []
    for iid, name in names.items():
        inst = instance_json("demo-project", "zone", name, iid=iid, where=None, labels=dict([LABEL]))
        if iid in placed:
            sub, blk, cl = placed[iid]
            inst["resourceStatus"] = {
                "physicalHostTopology": {"cluster": cl, "block": blk, "subblock": sub, "host": iid}
            }
        out.append(inst)
    return out


@pytest.mark.parametrize(
    ("model", "names", "fmt", "expected"),
    [
        ("sim-cluster-numeric", {i: f"node{i}" for i in ("11", "12", "21", "22", "31")}, "slurm-tree",
         "sim-cluster-numeric__gcp-sim__slurm-tree.conf"),
        ("sim-cluster-numeric", {i: f"node{i}" for i in ("11", "12", "21", "22", "31")}, "slurm-block",
         "sim-cluster-numeric__gcp-sim__slurm-block.conf"),
        ("sim-node-numeric", {"11": "node11", "12": "nodeCPU"}, "slurm-tree",
         "sim-node-numeric__gcp-sim__slurm-tree.conf"),
    ],
)  # fmt: skip
def test_topograph_gcp_sim_conformance(
    conformance_dir: Any, fake_compute: FakeCompute, model: str, names: dict[str, str], fmt: str, expected: str
) -> None:
    data = yaml.safe_load((conformance_dir / "models-inline" / f"{model}.yaml").read_text())
    fake_compute.add(_model_instances(data, names))
    graph = discover_full(compute_for(fake_compute), config(page_size=3)).graph
    # Topograph's expected files: its block numbering and no-topology switch (topocast's own names differ)
    compat = RenderOptions(topograph_compat=True)
    assert render(graph, fmt, compat).content == (conformance_dir / "expected" / expected).read_text()


def test_one_shot_discovery_uses_the_endpoint_override(
    fake_compute: FakeCompute, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``topocast discover --provider gcp``'s own path: its flags, the registry, the Compute endpoint override."""
    from topocast.cli.discover import discover_args, provider_inputs
    from topocast.providers import build_provider

    fake_compute.add(generate_cluster(5, label=LABEL, extra=2).instances)
    monkeypatch.setenv("TOPOCAST_COMPUTE_ENDPOINT", fake_compute.url)  # what the CLI documents for tests

    def discover(label: str) -> Any:
        args = discover_args({"provider": "gcp", "cluster": "default", "project": "demo-project", "label": [label]})
        return build_provider("gcp", provider_inputs(args)).discover_full(None)

    result = discover("=".join(LABEL))
    assert result.graph.cluster == "c1" and len(result.graph.nodes) == 5  # the cluster: the only label's value
    with pytest.raises(ProviderError, match="labels"):
        discover("nope")
