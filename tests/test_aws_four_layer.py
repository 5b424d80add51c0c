"""4-layer AWS fabrics end to end: p6-b200 / p6-b300 (four network nodes), p6e-gb200 UltraServers
(three network nodes plus ``CapacityBlockId`` as the NVLink domain) and a cluster mixing them.

EC2 (moto + topocast's DescribeInstanceTopology simulator) -> the AWS provider -> every Slurm
format, loaded by a real 26.05 slurmctld, and the EKS labels (``topology.k8s.aws/network-node-
layer-N``, what EKS puts on the nodes) read back into the same graph. Expected switches and
blocks come from the instances' simulator tags, never from the code under test.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import pytest
import yaml
from moto import mock_aws
from slurm_fixtures import ControllerFactory

from topocast.model.graph import TopologyGraph
from topocast.providers.aws.provider import AwsDiscoveryConfig, discover_full
from topocast.providers.aws.sdk import ec2_client
from topocast.providers.k8s_labels.provider import ClusterNodeInfo, NodeLabelsConfig, graph_from_nodes
from topocast.renderers import render
from topocast_sim import ec2 as sim

REGION = "us-east-1"
EKS = "topology.k8s.aws/network-node-layer-"
#: (instance type, count, capacity block size): 3-layer, 4-layer and UltraServer types on one fabric
MIXED = [
    ("p5.48xlarge", 16, None),
    ("p6-b200.48xlarge", 16, None),
    ("p6-b300.48xlarge", 8, None),
    ("p6e-gb200.36xlarge", 36, 18),
]


@dataclass(frozen=True)
class Launched:
    #: name -> the simulator's tags (+ ``@type``, ``@id``) as DescribeInstances returns them
    tags: dict[str, dict[str, str]]
    #: what the AWS provider made of them
    graph: TopologyGraph


def launch(groups: list[tuple[str, int, int | None]]) -> Launched:
    """``groups`` launched in an in-process moto with the topology simulator, then discovered."""
    with pytest.MonkeyPatch.context() as mp, mock_aws():
        for key, value in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing")):
            mp.setenv(key, value)
        mp.setenv("AWS_DEFAULT_REGION", REGION)
        mp.delenv("AWS_ENDPOINT_URL", raising=False)
        mp.setenv("MOTO_EC2_LOAD_DEFAULT_AMIS", "false")
        sim.install()
        ec2 = ec2_client(REGION)
        sim.generate_mixed_cluster(ec2, groups)
        return Launched(tagged(ec2), discover(ec2))


@pytest.fixture(scope="module")
def mixed() -> Launched:
    return launch(MIXED)


def tagged(ec2: Any) -> dict[str, dict[str, str]]:
    """Name -> the simulator's tags (+ ``@type``), as DescribeInstances returns them."""
    out = {}
    for page in ec2.get_paginator("describe_instances").paginate():
        for res in page["Reservations"]:
            for inst in res["Instances"]:
                tags = {t["Key"]: t["Value"] for t in inst.get("Tags", [])}
                out[tags["Name"]] = tags | {"@type": inst["InstanceType"], "@id": inst["InstanceId"]}
    return out


def discover(ec2: Any) -> TopologyGraph:
    config = AwsDiscoveryConfig(
        cluster="demo", region=REGION, filters=["tag:topocast:cluster=demo"], name_from="tag:Name"
    )
    result = discover_full(ec2, config)
    assert not result.graph.unplaced and not result.warnings, (result.graph.unplaced, result.warnings)
    return result.graph


def expected_below(tags: dict[str, dict[str, str]]) -> dict[str, set[str]]:
    """Every network node -> the instances below it (root-first NetworkNodes: each contains the node)."""
    below: dict[str, set[str]] = defaultdict(set)
    for name, t in tags.items():
        for nn in t[sim.NETWORK_NODES_TAG].split(","):
            below[nn].add(name)
    return dict(below)


def ultraservers(tags: dict[str, dict[str, str]]) -> dict[str, set[str]]:
    """CapacityBlockId -> its instances (the UltraServers' NVLink domains)."""
    out: dict[str, set[str]] = defaultdict(set)
    for name, t in tags.items():
        if sim.CAPACITY_BLOCK_TAG in t:
            out[t[sim.CAPACITY_BLOCK_TAG]].add(name)
    return dict(out)


def test_mixed_3_and_4_layer_cluster_has_one_root_and_every_path(mixed: Launched) -> None:
    tags, graph = mixed.tags, mixed.graph
    assert len(graph.nodes) == 76
    depth = {t: 4 if t.startswith(("p6-b200", "p6-b300")) else 3 for t, _, _ in MIXED}
    for node in graph.nodes:
        t = tags[node.name]
        assert len(node.fabric) == depth[t["@type"]], node.name
        assert node.fabric == t[sim.NETWORK_NODES_TAG].split(",")[::-1]  # stored closest first
    assert len({n.fabric[-1] for n in graph.nodes}) == 1  # one layer-1 node: one root
    gb200 = [n for n in graph.nodes if n.instance_type == "p6e-gb200.36xlarge"]
    assert {n.accelerator for n in gb200} == {t[sim.CAPACITY_BLOCK_TAG] for t in tags.values() if "p6e" in t["@type"]}
    assert len({n.accelerator for n in gb200}) == 2  # two UltraServers of 18


@pytest.mark.slurm_current
def test_tree_of_the_mixed_cluster_as_slurmctld_26_05_reads_it(
    mixed: Launched, sid_controller_factory: ControllerFactory
) -> None:
    tags = mixed.tags
    text = render(mixed.graph, "slurm-tree").content
    ctl = sid_controller_factory(sorted(tags), text)
    shown = {sw: set(info.nodes) for sw, info in ctl.show_topology().items()}
    want = expected_below(tags)
    assert shown == want
    roots = [sw for sw, info in ctl.show_topology().items() if set(info.nodes) == set(tags)]
    assert len(roots) == 1
    # a p6-b200 node sits four switches deep, a p5 node three
    b200 = next(n for n, t in tags.items() if t["@type"].startswith("p6-b200"))
    p5 = next(n for n, t in tags.items() if t["@type"].startswith("p5."))
    assert sum(b200 in nodes for nodes in shown.values()) == 4 and sum(p5 in nodes for nodes in shown.values()) == 3


@pytest.mark.slurm_current
def test_block_of_the_ultraservers_as_slurmctld_26_05_reads_it(
    mixed: Launched, sid_controller_factory: ControllerFactory
) -> None:
    tags = mixed.tags
    text = render(mixed.graph, "slurm-block").content
    ctl = sid_controller_factory(sorted(tags), text, topology_plugin="topology/block")
    blocks = sorted(sorted(info.nodes) for info in ctl.show_blocks().values())
    # each UltraServer (NVLink domain) is exactly one block of 18; nodes of no domain are in none
    assert blocks == sorted(sorted(m) for m in ultraservers(tags).values())
    assert [len(b) for b in blocks] == [18, 18]


@pytest.mark.slurm_current
def test_topology_yaml_of_the_mixed_cluster_loads_in_26_05(
    mixed: Launched, sid_controller_factory: ControllerFactory
) -> None:
    tags = mixed.tags
    text = render(mixed.graph, "slurm-yaml").content
    ctl = sid_controller_factory(sorted(tags), text, topology_file="topology.yaml")
    kinds = {t["topology"]: next(k for k in ("tree", "block", "flat") if k in t) for t in yaml.safe_load(text)}
    assert sorted(kinds.values()) == ["block", "flat", "tree"]
    for name, kind in kinds.items():
        if kind == "tree":
            assert {sw: set(i.nodes) for sw, i in ctl.show_topology(name).items()} == expected_below(tags)
        elif kind == "block":
            blocks = sorted(sorted(b.nodes) for b in ctl.show_blocks(name).values())
            assert blocks == sorted(sorted(m) for m in ultraservers(tags).values())


def test_eks_layer_labels_give_the_same_graph_and_layer_4_is_the_closest_switch(mixed: Launched) -> None:
    tags = mixed.tags
    aws = {n.name: n for n in mixed.graph.nodes}
    # what EKS labels each node with: layer 1 = the top of DescribeInstanceTopology's NetworkNodes
    kube = []
    for name, t in tags.items():
        labels = {f"{EKS}{i}": nn for i, nn in enumerate(t[sim.NETWORK_NODES_TAG].split(","), 1)}
        labels["node.kubernetes.io/instance-type"] = t["@type"]
        kube.append(ClusterNodeInfo(name, labels, provider_id=f"aws:///us-east-1a/{t['@id']}"))
    graph = graph_from_nodes(kube, NodeLabelsConfig(cluster="demo")).graph
    for node in graph.nodes:
        assert node.fabric == aws[node.name].fabric, node.name
        assert node.id == tags[node.name]["@id"]
    b200 = [k for k in kube if k.labels["node.kubernetes.io/instance-type"].startswith("p6-b")]
    assert b200 and all(f"{EKS}4" in k.labels for k in b200)
    rendered = json.loads(render(graph, "k8s-labels").content)
    tier = "fabric.topograph.run/tier-"
    for k in kube:  # closest first: tier-0 is layer 4 on p6-b200/b300, layer 3 elsewhere; the top is layer 1
        layers = len([key for key in k.labels if key.startswith(EKS)])
        got = rendered[k.name]
        assert [got.get(f"{tier}{i}") for i in range(4)] == [
            k.labels.get(f"{EKS}{n}") for n in range(layers, layers - 4, -1)
        ], k.name
