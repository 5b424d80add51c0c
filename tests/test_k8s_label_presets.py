"""``k8s-labels`` presets: the label keys CoreWeave, Crusoe and Nebius put on GPU nodes (each key is cited in
``providers/k8s_labels/provider.py``), through the CLI against the fake API server; a preset fills only unset fields."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_runner import invoke
from k8s_fake_apiserver import FakeKubeApiServer
from test_k8s_publish_cli import kubeconfig

from topocast.errors import ProviderError
from topocast.providers.k8s_labels.provider import ClusterNodeInfo, NodeLabelsConfig, graph_from_nodes
from topocast.safeio.validation import validate


def config(**fields: object) -> NodeLabelsConfig:
    return validate(NodeLabelsConfig, {"cluster": "c1", **fields}, "k8s-labels options", ProviderError)


def paths(cfg: NodeLabelsConfig, nodes: dict[str, dict[str, str]]) -> dict[str, tuple[list[str], str | None]]:
    graph = graph_from_nodes([ClusterNodeInfo(name, labels) for name, labels in nodes.items()], cfg).graph
    return {n.name: (n.fabric, n.accelerator) for n in graph.nodes}


def coreweave(fabric: str, superpod: str, leafgroup: str, nvl: str) -> dict[str, str]:
    return {
        "ib.coreweave.cloud/fabric": fabric,
        "ib.coreweave.cloud/superpod": superpod,
        "ib.coreweave.cloud/leafgroup": leafgroup,
        "ds.coreweave.com/nvlink.domain": nvl,
    }


def test_coreweave_tiers_are_qualified_so_numbered_leaf_groups_never_merge() -> None:
    nodes = {"g1": coreweave("us-east-04a", "1", "3", "nvl-a"), "g2": coreweave("us-east-04a", "2", "3", "nvl-b")}
    assert paths(config(preset="coreweave"), nodes) == {
        "g1": (["us-east-04a/1/3", "us-east-04a/1", "us-east-04a"], "nvl-a"),
        "g2": (["us-east-04a/2/3", "us-east-04a/2", "us-east-04a"], "nvl-b"),
    }


def test_crusoe_pod_under_partition_and_the_clique_as_domain() -> None:
    labels = {"crusoe.ai/pod.id": "pod-7", "crusoe.ai/ib.partition.id": "part-1", "nvidia.com/gpu.clique": "u.0"}
    assert paths(config(preset="crusoe"), {"c1": labels}) == {"c1": (["pod-7", "part-1"], "u.0")}


def test_nebius_tiers_and_the_nvlink_tier_zero() -> None:
    labels = {
        "topology.nebius.com/gpu-cluster-id": "computegpucluster-e00abc",
        "topology.nebius.com/tier-2": "spine-4",
        "topology.nebius.com/tier-1": "block-9",
        "topology.nebius.com/tier-0": "nvl-2",
    }
    no_nvlink = {k: v for k, v in labels.items() if not k.endswith("tier-0")}
    assert paths(config(preset="nebius"), {"n1": labels, "n2": no_nvlink}) == {
        "n1": (["block-9", "spine-4", "computegpucluster-e00abc"], "nvl-2"),
        "n2": (["block-9", "spine-4", "computegpucluster-e00abc"], None),
    }


def test_a_preset_is_overridable_and_an_unknown_one_is_one_line() -> None:
    cfg = config(preset="coreweave", accelerator_key="nvidia.com/gpu.clique", qualify=False)
    assert cfg.fabric_keys[0] == "ib.coreweave.cloud/leafgroup" and not cfg.qualify
    assert cfg.accelerator_key == "nvidia.com/gpu.clique"
    assert config(preset="eks").schemes == ["eks"]
    with pytest.raises(ProviderError, match="unknown preset 'azure'; known: coreweave, crusoe, nebius"):
        config(preset="azure")


def test_discover_with_a_preset_from_the_cli(tmp_path: Path) -> None:
    with FakeKubeApiServer(token="cli-token") as fake:
        fake.add_node("g1", coreweave("f1", "1", "3", "nvl-a"), provider_id="coreweave://g1")
        fake.add_node("g2", coreweave("f1", "1", "4", "nvl-a"), provider_id="coreweave://g2")
        args = ["discover", "--provider", "k8s-labels", "--cluster", "c1", "--kubeconfig"]
        result = invoke([*args, str(kubeconfig(tmp_path, fake.url)), "--preset", "coreweave"])
    assert result.exit_code == 0, result.output
    nodes = {n["name"]: (n["fabric"], n["accelerator"]) for n in json.loads(result.stdout)["nodes"]}
    assert nodes == {"g1": (["f1/1/3", "f1/1", "f1"], "nvl-a"), "g2": (["f1/1/4", "f1/1", "f1"], "nvl-a")}
