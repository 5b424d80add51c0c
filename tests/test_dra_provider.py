"""The ``dra`` provider: NVLink domains from DRA ResourceSlices, tiers from node labels, through the real
client against the fake API server (which serves resource.k8s.io ResourceSlices with paging).

Fixture (every expectation below is written by hand from it): nodes gb-0..gb-7 under leaf-a (0-3) /
leaf-b (4-7) and spine-1 (Topograph tier labels), cpu-0 under leaf-c. gpu.nvidia.com slices: gb-0..3
clique 1, gb-4/gb-5 clique 2, gb-6 with devices in cliques 2 and 3, gb-7 with no clique attribute
(today's NVIDIA driver) but the ``nvidia.com/gpu.clique`` label; gb-5's label disagrees (slices win).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cli_runner import invoke
from k8s_fake_apiserver import DEFAULT_CRDS, RESOURCE_SLICES, FakeKubeApiServer, ResourceType
from test_k8s_publish_cli import kubeconfig

from topocast.errors import ProviderError
from topocast.k8s.client import ClientSettings, K8sConnection, build_client
from topocast.k8s.resource_slices import dra_lister, list_resource_slices
from topocast.providers import ProviderInputs, build_provider
from topocast.renderers import RENDERERS, RenderOptions, render, render_many

U = "4f0c5b7e-1111-4c6a-9e55-0a1b2c3d4e5f"
TIER = "fabric.topograph.run/tier-"
CLIQUE = "nvidia.com/gpu.clique"


def gpu(i: int, clique: str | None) -> dict[str, Any]:
    attrs: dict[str, Any] = {"type": {"string": "gpu"}, "uuid": {"string": f"GPU-{i}"}, "index": {"int": i}}
    if clique is not None:
        attrs |= {"clusterUUID": {"string": U}, "gpu.nvidia.com/cliqueID": {"string": clique}}
    return {"name": f"gpu-{i}", "attributes": attrs}


def put_slice(
    fake: FakeKubeApiServer,
    name: str,
    node: str | None,
    devices: list[dict[str, Any]],
    driver: str = "gpu.nvidia.com",
    rtype: ResourceType = RESOURCE_SLICES,
) -> None:
    spec: dict[str, Any] = {
        "driver": driver,
        "pool": {"name": node or "shared", "generation": 1, "resourceSliceCount": 1},
        "devices": devices,
    }
    spec |= {"nodeName": node} if node else {"allNodes": True}
    fake.put(
        rtype, {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": name}, "spec": spec}
    )


def cluster(fake: FakeKubeApiServer) -> None:
    for i in range(8):
        labels = {f"{TIER}0": "leaf-a" if i < 4 else "leaf-b", f"{TIER}1": "spine-1"}
        if i == 7:
            labels[CLIQUE] = f"{U}.2"
        if i == 5:
            labels[CLIQUE] = f"{U}.9"
        fake.add_node(f"gb-{i}", labels, provider_id=f"aws:///us-east-1a/i-{i:05d}")
    fake.add_node("cpu-0", {f"{TIER}0": "leaf-c", f"{TIER}1": "spine-1"})
    for i in range(4):
        put_slice(fake, f"gb-{i}-gpu.nvidia.com-x", f"gb-{i}", [gpu(0, "1"), gpu(1, "1")])
    for i in (4, 5):
        put_slice(fake, f"gb-{i}-gpu.nvidia.com-x", f"gb-{i}", [gpu(0, "2"), gpu(1, "2")])
    put_slice(fake, "gb-6-gpu.nvidia.com-x", "gb-6", [gpu(0, "2"), gpu(1, "3")])
    put_slice(fake, "gb-7-gpu.nvidia.com-x", "gb-7", [gpu(0, None), gpu(1, None)])
    put_slice(fake, "ghost-gpu.nvidia.com-x", "ghost", [gpu(0, "1")])
    put_slice(fake, "shared-pool", None, [gpu(0, "5")])
    cd = [{"name": "channel-0", "attributes": {"type": {"string": "channel"}, "cliqueID": {"string": "7"}}}]
    put_slice(fake, "gb-0-compute-domain", "gb-0", cd, driver="compute-domain.nvidia.com")


@pytest.fixture
def fake() -> Iterator[FakeKubeApiServer]:
    with FakeKubeApiServer(crds=(*DEFAULT_CRDS, RESOURCE_SLICES), token="cli-token") as server:
        cluster(server)
        yield server


def discover(fake: FakeKubeApiServer, **options: Any) -> Any:
    lister = dra_lister(K8sConnection(endpoint=fake.url, token="cli-token"), ClientSettings(qps=0))
    return build_provider("dra", ProviderInputs("gb", options, lambda s: lister)).discover_full(None)


GOLDEN = {
    **{f"gb-{i}": (f"i-{i:05d}", ["leaf-a", "spine-1"], f"{U}.1") for i in range(4)},
    "gb-4": ("i-00004", ["leaf-b", "spine-1"], f"{U}.2"),
    "gb-5": ("i-00005", ["leaf-b", "spine-1"], f"{U}.2"),
    "gb-6": ("i-00006", ["leaf-b", "spine-1"], None),
    "gb-7": ("i-00007", ["leaf-b", "spine-1"], f"{U}.2"),
    "cpu-0": (None, ["leaf-c", "spine-1"], None),
}


def test_golden_graph_domains_from_slices_then_labels(fake: FakeKubeApiServer) -> None:
    result = discover(fake)
    assert {n.name: (n.id, n.fabric, n.accelerator) for n in result.graph.nodes} == GOLDEN
    assert list(result.graph.unplaced) == ["gb-6"]
    assert "report 2 NVLink domains" in result.graph.unplaced["gb-6"]
    text = "\n".join(result.warnings)
    assert "6 node(s) took their NVLink domain from ResourceSlices, 1 from the nvidia.com/gpu.clique label" in text
    assert "1 ResourceSlice node(s) not in the Node list: ghost" in text
    assert "1 gpu.nvidia.com slice(s) not local to one node" in text
    assert f"gb-5 ({U}.2 in its slices, {U}.9 in nvidia.com/gpu.clique)" in text
    assert result.api_calls == {"k8s_GET": 2}  # one Node LIST, one slice LIST
    slices = [r for r in fake.requests if r.resource == "resourceslices"]
    assert [(r.version, r.query.get("fieldSelector")) for r in slices] == [("v1", "spec.driver=gpu.nvidia.com")]


def test_slices_are_paged(fake: FakeKubeApiServer) -> None:
    kc = build_client(K8sConnection(endpoint=fake.url, token="cli-token"), ClientSettings(qps=0))
    try:
        got = list_resource_slices(kc, "gpu.nvidia.com", page_size=3)
    finally:
        kc.close()
    assert len(got) == 10 and len([r for r in fake.requests if r.resource == "resourceslices"]) == 4


def test_v1beta1_only_server_is_read_through_the_basic_wrapper() -> None:
    beta = ResourceType("resource.k8s.io", ("v1beta1",), "ResourceSlice", "resourceslices")
    with FakeKubeApiServer(crds=(beta,), token="cli-token") as server:
        server.add_node("gb-0", {f"{TIER}0": "leaf-a"})
        device = {"name": "gpu-0", "basic": {"attributes": {"clusterUUID": {"string": U}, "cliqueID": {"string": "4"}}}}
        put_slice(server, "gb-0-gpu", "gb-0", [device], rtype=beta)
        graph = discover(server).graph
        assert [(n.name, n.accelerator) for n in graph.nodes] == [("gb-0", f"{U}.4")]
        assert [r.version for r in server.requests if r.resource == "resourceslices"] == ["v1", "v1beta2", "v1beta1"]


def test_errors_are_one_line(fake: FakeKubeApiServer) -> None:
    lister = dra_lister(K8sConnection(endpoint=fake.url, token="wrong"), ClientSettings(qps=0))
    with pytest.raises(ProviderError, match=r"^listing Kubernetes nodes failed: 401") as info:
        build_provider("dra", ProviderInputs("gb", {}, lambda s: lister)).discover_full(None)
    assert "\n" not in str(info.value)
    no_dra = pytest.raises(ProviderError, match=r"serves no resource.k8s.io v1/v1beta2/v1beta1 ResourceSlices")
    with FakeKubeApiServer(token="cli-token") as bare, no_dra:
        discover(bare)
    with pytest.raises(ProviderError, match=r"^provider 'dra': option 'api_version' Input should be 'auto'"):
        build_provider("dra", ProviderInputs("gb", {"api_version": "v2"}))


def test_renders_to_every_format(fake: FakeKubeApiServer) -> None:
    graph = discover(fake).graph
    assert [a.format for a in render_many(graph, list(RENDERERS))] == list(RENDERERS)
    # blocks named after their NVLink domains; the 3-node one is below the base size 4: Slurm 26.05 keeps it
    assert render(graph, "slurm-block", RenderOptions(slurm_version="26.05")).content == (
        f"BlockName={U}.1 Nodes=gb-[0-3]\nBlockName={U}.2 Nodes=gb-[4-5,7]\nBlockSizes=4,8\n"
    )
    # for a Slurm not given, the file must load on 23.02-24.11 too: the undersized block is left out
    assert render(graph, "slurm-block").content == f"BlockName={U}.1 Nodes=gb-[0-3]\nBlockSizes=4\n"


@pytest.mark.slurm
def test_tree_is_loaded_by_slurmctld_22_05(fake: FakeKubeApiServer, slurm_controller_factory: Any) -> None:
    graph = discover(fake).graph
    ctl = slurm_controller_factory([n.name for n in graph.nodes], render(graph, "slurm-tree").content)
    leaves = {sw: sorted(i.nodes) for sw, i in ctl.show_topology().items() if i.level == 0}
    assert leaves == {
        "leaf-a": ["gb-0", "gb-1", "gb-2", "gb-3"],
        "leaf-b": ["gb-4", "gb-5", "gb-6", "gb-7"],
        "leaf-c": ["cpu-0"],
    }


@pytest.mark.slurm_current
def test_block_is_loaded_by_slurmctld_26_05(fake: FakeKubeApiServer, sid_controller_factory: Any) -> None:
    graph = discover(fake).graph
    block = render(graph, "slurm-block", RenderOptions(slurm_version="26.05")).content
    ctl = sid_controller_factory([n.name for n in graph.nodes], block, topology_plugin="topology/block")
    shown = sorted(sorted(b.nodes) for b in ctl.show_blocks().values() if b.nodes)
    assert shown == [["gb-0", "gb-1", "gb-2", "gb-3"], ["gb-4", "gb-5", "gb-7"]]


def test_cli_discover_against_the_fake(fake: FakeKubeApiServer, tmp_path: Path) -> None:
    kc = kubeconfig(tmp_path, fake.url)
    res = invoke(
        [
            "discover",
            "--provider",
            "dra",
            "--cluster",
            "gb",
            "--kubeconfig",
            kc,
            "--option",
            "driver=gpu.nvidia.com",
            "--option",
            'domain_attributes=["clusterUUID","cliqueID"]',
        ]
    )
    assert res.exit_code == 0, res.output
    graph = json.loads(res.stdout)
    assert len(graph["nodes"]) == 9 and list(graph["unplaced"]) == ["gb-6"]
    bad = invoke(["discover", "--provider", "dra", "--kubeconfig", kubeconfig(tmp_path, fake.url, "wrong")])
    assert bad.exit_code != 0 and "Traceback" not in bad.output and bad.stderr.strip().count("\n") == 0


def test_topograph_dra_slinky_block_case_through_the_real_provider(conformance_dir: Path) -> None:
    """Topograph's CI case ``dra -> slinky block``: KWOK nodes of ``large.yaml`` whose ``nvidia.com/gpu.clique``
    is the model's domain (its ``demos/dra-slinky/update-labels.sh``), discovered here by the real ``dra``
    provider from the fake API server (no slices: the label path), rendered with the case's options."""
    from topograph_fixtures import graph_from_test_provider, options_from_params

    model = graph_from_test_provider(conformance_dir / "models" / "large.yaml")
    with FakeKubeApiServer(crds=(*DEFAULT_CRDS, RESOURCE_SLICES), token="cli-token") as server:
        for n in model.nodes:
            server.add_node(n.name, {CLIQUE: n.accelerator} if n.accelerator else {})
        graph = discover(server).graph
    params = {"blockSizes": [8, 16, 32], "blockName": {"nodeNameRegexp": "^srv([0-9]{2})", "format": "rack${1}"}}
    got = render(graph, "slurm-block", options_from_params(params)).content
    assert got == (conformance_dir / "expected" / "large__dra__slinky-block-8-16-32-blockname.conf").read_text()
