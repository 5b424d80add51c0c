"""The ``k8s-labels`` provider: topology read from the labels clouds already put on Nodes, through the real
client against the fake API server, rendered to every format."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_runner import invoke
from k8s_fake_apiserver import NODES, FakeKubeApiServer
from test_k8s_publish_cli import kubeconfig

from topocast.k8s.client import ClientSettings, K8sConnection, build_client
from topocast.k8s.node_source import discover
from topocast.model.graph import TopologyGraph
from topocast.providers import PROVIDERS
from topocast.providers.k8s_labels.provider import ClusterNodeInfo, NodeLabelsConfig, graph_from_nodes
from topocast.renderers import RENDERERS, render

EKS = "topology.k8s.aws/network-node-layer-"
CLIQUE = "nvidia.com/gpu.clique"
GKE = "cloud.google.com/gce-topology-"


@pytest.fixture
def fake() -> Iterator[FakeKubeApiServer]:
    with FakeKubeApiServer(token="cli-token") as server:
        yield server


def eks_nodes(fake: FakeKubeApiServer) -> None:
    """Four p5 nodes (3 layers) under two leaves, two p6-b200 nodes (4 layers), one CPU node without labels."""
    for i in range(4):
        labels = {
            f"{EKS}1": "nn-top",
            f"{EKS}2": "nn-mid-a",
            f"{EKS}3": f"nn-leaf-{i // 2}",
            CLIQUE: f"uuid-1.{i // 2}",
        }
        fake.add_node(f"ip-10-0-0-{i}.ec2.internal", labels, provider_id=f"aws:///us-east-1a/i-0000{i}")
    for i in range(2):
        labels = {f"{EKS}1": "nn-top", f"{EKS}2": "nn-mid-b", f"{EKS}3": "nn-b-3", f"{EKS}4": "nn-b-leaf"}
        labels |= {"node.kubernetes.io/instance-type": "p6-b200.48xlarge", "topology.kubernetes.io/zone": "us-east-1a"}
        fake.add_node(f"ip-10-0-1-{i}.ec2.internal", labels, provider_id=f"aws:///us-east-1a/i-0001{i}")
    fake.add_node("ip-10-0-9-9.ec2.internal", {"kubernetes.io/os": "linux"}, provider_id="aws:///us-east-1a/i-cpu")


def from_fake(fake: FakeKubeApiServer, config: NodeLabelsConfig | None = None) -> TopologyGraph:
    kc = build_client(K8sConnection(endpoint=fake.url, token="cli-token"), ClientSettings(qps=0))
    try:
        return discover(config or NodeLabelsConfig(cluster="c1"), client=kc).graph
    finally:
        kc.close()


def node(graph: TopologyGraph, name: str) -> dict[str, object]:
    return next(n.model_dump() for n in graph.nodes if n.name == name)


def test_eks_layers_become_the_fabric_closest_first_and_cliques_the_nvlink_domain(fake: FakeKubeApiServer) -> None:
    eks_nodes(fake)

    graph = from_fake(fake)

    p5 = node(graph, "ip-10-0-0-3.ec2.internal")
    assert (p5["id"], p5["fabric"], p5["accelerator"]) == ("i-00003", ["nn-leaf-1", "nn-mid-a", "nn-top"], "uuid-1.1")
    b200 = node(graph, "ip-10-0-1-0.ec2.internal")
    assert b200["fabric"] == ["nn-b-leaf", "nn-b-3", "nn-mid-b", "nn-top"]  # layer 4 is the closest switch
    assert (b200["instance_type"], b200["zone"], b200["accelerator"]) == ("p6-b200.48xlarge", "us-east-1a", None)
    assert node(graph, "ip-10-0-9-9.ec2.internal")["fabric"] == []
    assert graph.provider == "k8s-labels" and len(graph.nodes) == 7


def test_gke_block_and_subblock_with_the_subblock_as_nvlink_domain_and_host_kept(fake: FakeKubeApiServer) -> None:
    for i in range(4):
        labels = {f"{GKE}block": "b-1", f"{GKE}subblock": f"sb-{i // 2}", f"{GKE}host": f"h-{i}"}
        fake.add_node(f"gke-a4x-pool-{i}", labels, provider_id=f"gce://proj/us-central1-a/gke-a4x-pool-{i}")

    graph = from_fake(fake)

    n = node(graph, "gke-a4x-pool-2")
    assert (n["id"], n["fabric"], n["accelerator"]) == ("gke-a4x-pool-2", ["sb-1", "b-1"], "sb-1")
    assert n["labels"] == {f"{GKE}host": "h-2"}


def test_a_clique_label_wins_over_the_gke_subblock_and_a_missing_layer_is_no_topology() -> None:
    nodes = [
        ClusterNodeInfo("g1", {f"{GKE}block": "b", f"{GKE}subblock": "sb", CLIQUE: "c-9"}),
        ClusterNodeInfo("e1", {f"{EKS}1": "top", f"{EKS}3": "leaf"}),  # layer 2 missing: no usable path
    ]

    result = graph_from_nodes(nodes, NodeLabelsConfig())

    assert node(result.graph, "g1")["accelerator"] == "c-9"
    assert node(result.graph, "e1")["fabric"] == []
    assert "1 node(s) carry only part of a topology label set" in result.warnings[0]


def test_topograph_keys_and_a_configured_key_list() -> None:
    nodes = [
        ClusterNodeInfo(
            "t1",
            {
                "fabric.topograph.run/tier-1": "sp",
                "fabric.topograph.run/tier-0": "lf",
                "accelerator.topograph.run/domain": "d",
            },
        ),
        ClusterNodeInfo("c1", {"example.com/rack": "r1", "example.com/row": "row-a", "example.com/nvl": "n1"}),
    ]
    config = NodeLabelsConfig(fabric_keys=["example.com/rack", "example.com/row"], accelerator_key="example.com/nvl")

    graph = graph_from_nodes(nodes, config).graph

    assert (node(graph, "t1")["fabric"], node(graph, "t1")["accelerator"]) == (["lf", "sp"], "d")
    assert (node(graph, "c1")["fabric"], node(graph, "c1")["accelerator"]) == (["r1", "row-a"], "n1")


def test_the_slinky_hostname_override_annotation_reaches_the_slinky_file(fake: FakeKubeApiServer) -> None:
    from topocast.renderers.base import RenderOptions, SlinkyNaming, SlinkyOptions

    eks_nodes(fake)
    fake.add_node(
        "ip-10-0-2-0.ec2.internal",
        {f"{EKS}1": "nn-top", f"{EKS}2": "nn-mid-a", f"{EKS}3": "nn-leaf-0"},
        annotations={"nodeset.slinky.slurm.net/hostname-override": "gpu-extra"},
    )
    options = RenderOptions(slinky=SlinkyOptions(naming=SlinkyNaming(mode="hostname-override")))

    conf = render(from_fake(fake), "slinky", options).objects[0]["data"]["topology.conf"]

    assert "SwitchName=nn-leaf-0 Nodes=gpu-extra,ip-10-0-0-[0-1]" in conf


@pytest.mark.parametrize("fmt", sorted(RENDERERS))
def test_the_graph_from_labels_renders_to_every_format(fake: FakeKubeApiServer, fmt: str) -> None:
    eks_nodes(fake)
    for i in range(2):  # give the p6 nodes an NVLink domain too, so block topology applies to every node
        name = f"ip-10-0-1-{i}.ec2.internal"
        labels = fake.get(NODES, name)["metadata"]["labels"]  # type: ignore[index]
        fake.add_node(name, {**labels, CLIQUE: "uuid-2.0"}, provider_id=f"aws:///us-east-1a/i-0001{i}")

    art = render(from_fake(fake), fmt)

    assert art.content.strip()
    if fmt == "slurm-tree":
        assert "SwitchName=nn-leaf-0 Nodes=ip-10-0-0-0.ec2.internal,ip-10-0-0-1.ec2.internal\n" in art.content
    if fmt == "k8s-labels":
        labels = json.loads(art.content)["ip-10-0-1-1.ec2.internal"]
        assert (
            labels["fabric.topograph.run/tier-0"] == "nn-b-leaf" and labels["fabric.topograph.run/tier-3"] == "nn-top"
        )


def test_registered_provider_and_the_discover_command(fake: FakeKubeApiServer, tmp_path: Path) -> None:
    assert PROVIDERS["k8s-labels"] == "topocast.providers.k8s_labels.provider:provider"
    eks_nodes(fake)

    result = invoke(
        [
            "discover",
            "--provider",
            "k8s-labels",
            "--cluster",
            "c1",
            "--kubeconfig",
            str(kubeconfig(tmp_path, fake.url)),
        ],
    )

    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["provider"] == "k8s-labels" and len(data["nodes"]) == 7
    assert "7 node(s), 1 without topology (k8s_GET=1)" in result.stderr


def test_a_scheduled_function_discovers_from_its_environment(fake: FakeKubeApiServer) -> None:
    from topocast.errors import ProviderError
    from topocast.k8s.node_source import discover_from_env

    fake.add_node("n1", {"example.com/rack": "r1"})
    env = {
        "TOPOCAST_K8S_ENDPOINT": fake.url,
        "TOPOCAST_K8S_TOKEN": "cli-token",
        "TOPOCAST_NODE_LABELS": json.dumps({"fabric_keys": ["example.com/rack"]}),
    }

    result = discover_from_env("c9", env)

    assert result.graph.cluster == "c9" and node(result.graph, "n1")["fabric"] == ["r1"]
    with pytest.raises(ProviderError, match="TOPOCAST_NODE_LABELS"):
        discover_from_env("c9", {**env, "TOPOCAST_NODE_LABELS": '{"schemes": ["azure"]}'})


def test_labels_the_cloud_set_become_topocast_labels_and_a_kueue_topology(
    fake: FakeKubeApiServer, tmp_path: Path
) -> None:
    """What the CronJob in infra/k8s does: discover from EKS labels, then publish to the same cluster."""
    from k8s_fake_apiserver import KUEUE_TOPOLOGY

    eks_nodes(fake)
    kc = str(kubeconfig(tmp_path, fake.url))
    found = invoke(["discover", "--provider", "k8s-labels", "--kubeconfig", kc, "--out", str(tmp_path / "g.json")])
    assert found.exit_code == 0, found.output

    published = invoke(["publish", "--graph", str(tmp_path / "g.json"), "--kubeconfig", kc])

    assert published.exit_code == 0, published.output
    labels = fake.get(NODES, "ip-10-0-1-0.ec2.internal")["metadata"]["labels"]  # type: ignore[index]
    assert [labels[f"fabric.topograph.run/tier-{i}"] for i in range(4)] == ["nn-b-leaf", "nn-b-3", "nn-mid-b", "nn-top"]
    assert labels[f"{EKS}4"] == "nn-b-leaf"  # the cloud's own labels are untouched
    p5 = fake.get(NODES, "ip-10-0-0-0.ec2.internal")["metadata"]["labels"]  # type: ignore[index]
    assert p5["accelerator.topograph.run/domain"] == "uuid-1.0" and "fabric.topograph.run/tier-3" not in p5
    levels = [lv["nodeLabel"] for lv in fake.get(KUEUE_TOPOLOGY, "topocast")["spec"]["levels"]]  # type: ignore[index]
    assert levels[-1] == "kubernetes.io/hostname" and levels[0] == "fabric.topograph.run/tier-3"
    # matched by provider ID: the graph carries the instance IDs the labels' nodes have
    again = invoke(["publish", "--graph", str(tmp_path / "g.json"), "--kubeconfig", kc, "--dry-run"])
    assert "nodes to patch: 0 (7 already current, 0 drifted)" in again.stdout
