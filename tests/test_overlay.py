"""Merged sources (providers/overlay.py): the base source gives the fabric, the overlay the NVLink domains or
nodes the base cannot see; every disagreement is a per-node note. Expectations are written by hand."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cli_runner import invoke
from k8s_fake_apiserver import FakeKubeApiServer
from test_k8s_publish_cli import kubeconfig

from topocast.config import settings_from_env
from topocast.errors import ProviderError
from topocast.model.graph import Node, TopologyGraph, dump_graph, load_graph
from topocast.providers.k8s_labels.provider import ClusterNodeInfo, NodeLabelsConfig, graph_from_nodes
from topocast.providers.overlay import apply_overlay, parse_overlay
from topocast.renderers.html import render_page

CLIQUE = "nvidia.com/gpu.clique"
SPEC = parse_overlay(f"k8s-labels:domain={CLIQUE}")


def base_graph() -> TopologyGraph:
    """Four EC2-style nodes under one leaf, in two capacity blocks (the AWS "accelerator")."""
    nodes = [
        Node(name=f"gpu-{i}", id=f"i-{i}", fabric=["leaf-a", "spine", "top"], accelerator=f"cr-{i // 2}")
        for i in range(4)
    ]
    return TopologyGraph(cluster="c1", provider="aws", nodes=nodes)


def overlay_graph(labels: dict[str, dict[str, str]]) -> TopologyGraph:
    """What the k8s-labels overlay reads: nodes by name with providerID aws:///zone/<instance>."""
    nodes = [ClusterNodeInfo(n, lab, provider_id=f"aws:///us-east-1a/{iid}") for (n, iid), lab in _split(labels)]
    return graph_from_nodes(nodes, NodeLabelsConfig(cluster="c1", schemes=["custom"])).graph


def _split(labels: dict[str, dict[str, str]]) -> list[tuple[tuple[str, str], dict[str, str]]]:
    return [((name.split("@")[0], name.split("@")[1]), lab) for name, lab in labels.items()]


def domains(graph: TopologyGraph) -> dict[str, str | None]:
    return {n.name: n.accelerator for n in graph.nodes}


def test_a_clique_spanning_two_capacity_blocks_wins_and_is_noted_on_each_member() -> None:
    overlay = overlay_graph({f"gpu-{i}@i-{i}": {CLIQUE: "uuid-a.0" if i < 3 else "uuid-a.1"} for i in range(4)})
    graph, summary = apply_overlay(base_graph(), overlay, SPEC)
    assert domains(graph) == {"gpu-0": "uuid-a.0", "gpu-1": "uuid-a.0", "gpu-2": "uuid-a.0", "gpu-3": "uuid-a.1"}
    span = "overlay k8s-labels domain 'uuid-a.0' spans 2 base domains (cr-0, cr-1); the overlay's is used"
    assert set(graph.notes) == {"gpu-0", "gpu-1", "gpu-2"}
    assert all(graph.notes[n].startswith(span) for n in ("gpu-0", "gpu-1", "gpu-2"))
    assert [n.fabric for n in graph.nodes] == [["leaf-a", "spine", "top"]] * 4  # the base's fabric stands
    assert not graph.unplaced  # placed: the set-aside guard does not count notes
    assert "4 of 4 node(s) matched, 4 took the overlay's domain" in summary[0] and "3 node note(s)" in summary[0]


def test_a_node_only_the_overlay_knows_is_added_and_one_only_the_base_knows_keeps_its_block() -> None:
    labels = {f"gpu-{i}@i-{i}": {CLIQUE: "uuid-a.0"} for i in range(3)}  # gpu-3 is not in the cluster
    labels["gpu-9@i-9"] = {CLIQUE: "uuid-a.0"}
    labels["cpu-1@i-c1"] = {"kubernetes.io/os": "linux"}  # nothing the overlay takes: not added
    graph, _ = apply_overlay(base_graph(), overlay_graph(labels), SPEC)
    assert graph.node_names() == ["gpu-0", "gpu-1", "gpu-2", "gpu-3", "gpu-9"]
    assert domains(graph)["gpu-3"] == "cr-1" and domains(graph)["gpu-9"] == "uuid-a.0"
    assert graph.notes["gpu-3"] == "not known to overlay k8s-labels; the base's domain 'cr-1' is kept"
    assert graph.notes["gpu-9"] == "only overlay k8s-labels knows this node (the base does not); added with its domain"
    added = next(n for n in graph.nodes if n.name == "gpu-9")
    assert added.id == "i-9" and added.fabric == []


def test_an_unsafe_overlay_value_keeps_the_base_domain_with_the_reason() -> None:
    labels = {f"gpu-{i}@i-{i}": {CLIQUE: "uuid-a.0"} for i in range(4)}
    labels["gpu-1@i-1"] = {CLIQUE: "uuid a;0"}  # a kubelet can set anything
    graph, _ = apply_overlay(base_graph(), overlay_graph(labels), SPEC)
    assert domains(graph)["gpu-1"] == "cr-0"
    note = graph.notes["gpu-1"]
    assert note.startswith("overlay k8s-labels value not usable (") and "'uuid a;0'" in note
    assert note.endswith("; the base's domain 'cr-0' is kept")


def test_matching_is_by_instance_id_and_a_name_under_another_id_is_not_merged() -> None:
    labels = {"k8s-name-0@i-0": {CLIQUE: "uuid-b.0"}, "gpu-1@i-other": {CLIQUE: "uuid-b.0"}}
    graph, _ = apply_overlay(base_graph(), overlay_graph(labels), SPEC)
    assert domains(graph)["gpu-0"] == "uuid-b.0"  # k8s calls it k8s-name-0; the instance ID is the same
    assert graph.notes["gpu-1"].startswith("overlay k8s-labels has a node 'gpu-1' with instance ID i-other")
    assert domains(graph)["gpu-1"] == "cr-0"


def test_fabric_from_the_overlay_only_for_nodes_the_base_places_without_one() -> None:
    spec = parse_overlay("k8s-labels:fabric=rack.example/leaf,fabric=rack.example/spine")
    base = TopologyGraph(
        cluster="c1",
        provider="ibnetdiscover",
        nodes=[Node(name="n1", fabric=["L1", "S1"]), Node(name="n2"), Node(name="n3", fabric=["L1", "S1"])],
    )
    nodes = [
        ClusterNodeInfo(n, {"rack.example/leaf": leaf, "rack.example/spine": "S1"})
        for n, leaf in (("n1", "L9"), ("n2", "L2"))
    ]
    overlay = graph_from_nodes(nodes, NodeLabelsConfig(cluster="c1", **spec.options())).graph
    graph, _ = apply_overlay(base, overlay, spec)
    assert {n.name: n.fabric for n in graph.nodes} == {"n1": ["L1", "S1"], "n2": ["L2", "S1"], "n3": ["L1", "S1"]}
    assert graph.notes == {"n2": "no fabric path from the base; overlay k8s-labels's path is used"}


def _fabric_overlay(leaves: dict[str, str]) -> tuple[Any, TopologyGraph]:
    spec = parse_overlay("k8s-labels:fabric=rack.example/leaf,fabric=rack.example/spine")
    nodes = [ClusterNodeInfo(n, {"rack.example/leaf": leaf, "rack.example/spine": "S1"}) for n, leaf in leaves.items()]
    return spec, graph_from_nodes(nodes, NodeLabelsConfig(cluster="c1", **spec.options())).graph


def test_an_overlay_only_node_whose_path_names_a_base_node_is_set_aside_not_the_base_node() -> None:
    base = TopologyGraph(cluster="c1", provider="ibnetdiscover", nodes=[
        Node(name="gpu-1", fabric=["L1", "S1"]), Node(name="gpu-2", fabric=["L1", "S1"])])  # fmt: skip
    # any kubelet can register a Node: "rogue" labelled with leaf gpu-1, a base node's name
    spec, overlay = _fabric_overlay({"rogue": "gpu-1"})
    graph, _ = apply_overlay(base, overlay, spec)
    assert {n.name: n.fabric for n in graph.nodes} == {"gpu-1": ["L1", "S1"], "gpu-2": ["L1", "S1"]}
    assert list(graph.unplaced) == ["rogue"]
    assert "runs through gpu-1, a base node" in graph.unplaced["rogue"]


def test_an_overlay_only_node_named_like_a_base_switch_is_set_aside() -> None:
    base = TopologyGraph(cluster="c1", provider="ibnetdiscover", nodes=[
        Node(name="gpu-1", fabric=["L1", "S1"]), Node(name="gpu-2", fabric=["L1", "S1"])])  # fmt: skip
    spec, overlay = _fabric_overlay({"L1": "L2"})
    graph, _ = apply_overlay(base, overlay, spec)
    assert {n.name: n.fabric for n in graph.nodes} == {"gpu-1": ["L1", "S1"], "gpu-2": ["L1", "S1"]}
    assert list(graph.unplaced) == ["L1"] and "the name of a base switch" in graph.unplaced["L1"]


def test_overlay_only_nodes_outnumbering_the_base_do_not_move_a_base_switch() -> None:
    base = TopologyGraph(cluster="c1", provider="ibnetdiscover", nodes=[
        Node(name="gpu-1", fabric=["L1", "S1"]), Node(name="gpu-2", fabric=["L1", "S1"])])  # fmt: skip
    spec = parse_overlay("k8s-labels:fabric=rack.example/leaf,fabric=rack.example/spine")
    nodes = [ClusterNodeInfo(f"rogue-{i}", {"rack.example/leaf": "L1", "rack.example/spine": "S9"}) for i in range(3)]
    overlay = graph_from_nodes(nodes, NodeLabelsConfig(cluster="c1", **spec.options())).graph
    graph, _ = apply_overlay(base, overlay, spec)
    assert {n.name: n.fabric for n in graph.nodes} == {"gpu-1": ["L1", "S1"], "gpu-2": ["L1", "S1"]}
    assert sorted(graph.unplaced) == ["rogue-0", "rogue-1", "rogue-2"]
    assert "(L1/S9) contradicts the base's tree at switch 'L1'" in graph.unplaced["rogue-0"]


def test_a_base_node_without_a_path_does_not_take_an_overlay_path_through_a_base_node() -> None:
    base = TopologyGraph(cluster="c1", provider="ibnetdiscover", nodes=[
        Node(name="gpu-1", fabric=["L1", "S1"]), Node(name="gpu-2")])  # fmt: skip
    spec, overlay = _fabric_overlay({"gpu-2": "gpu-1"})
    graph, _ = apply_overlay(base, overlay, spec)
    assert {n.name: n.fabric for n in graph.nodes} == {"gpu-1": ["L1", "S1"], "gpu-2": []}
    assert graph.unplaced == {} and "runs through gpu-1, a base node" in graph.notes["gpu-2"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("k8s-labels", "expected SOURCE:FIELD=VALUE"),
        ("dra:domain=x", "unknown overlay source 'dra'; known: k8s-labels"),
        ("k8s-labels:clique=x", "'clique=x' is not FIELD=VALUE with FIELD one of domain, subdomain, fabric, preset"),
        ("k8s-labels:domain=a,domain=b", "domain is given 2 times"),
        ("k8s-labels:subdomain=x", "takes nothing"),
    ],
)
def test_bad_overlays_are_one_line(text: str, message: str) -> None:
    with pytest.raises(ProviderError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_overlay(text)


def test_notes_survive_the_graph_file_and_reach_the_report_and_the_view(tmp_path: Path) -> None:
    overlay = overlay_graph({f"gpu-{i}@i-{i}": {CLIQUE: "uuid-a.0"} for i in range(4)})
    graph, _ = apply_overlay(base_graph(), overlay, SPEC)
    path = tmp_path / "g.json"
    path.write_text(dump_graph(graph))
    assert load_graph(path).notes == graph.notes and "notes" in json.loads(path.read_text())
    assert "notes" not in json.loads(dump_graph(base_graph()))  # an unmerged graph's file is unchanged
    page = render_page(graph)
    assert 'id="node-notes"' in page and "spans 2 base domains (cr-0, cr-1)" in page
    out = invoke(["render", "--graph", path, "-f", "slurm-block", "-f", "html", "--out", tmp_path / "r"])
    assert out.exit_code == 0, out.output
    assert "topocast: note: 4 node note(s)" in out.stderr and "gpu-0: overlay k8s-labels domain" in out.stderr
    assert set(json.loads((tmp_path / "r" / "manifest.json").read_text())["notes"]) == {f"gpu-{i}" for i in range(4)}


def test_settings_carry_overlays_split_on_semicolons_only() -> None:
    env = {"TOPOCAST_CLUSTER": "c1", "TOPOCAST_OVERLAYS": f"k8s-labels:domain={CLIQUE},subdomain=x.io/s; "}
    assert settings_from_env(env).overlays == [f"k8s-labels:domain={CLIQUE},subdomain=x.io/s"]


def test_discover_aws_with_a_k8s_labels_overlay(aws_env: str, tmp_path: Path) -> None:
    import boto3

    from topocast_sim import ec2 as ec2_sim

    ids = ec2_sim.generate_cluster(boto3.client("ec2"), 4, block_size=2, cluster_tag=("topocast:cluster", "c1"))
    with FakeKubeApiServer(token="cli-token") as fake:
        for i, iid in enumerate(ids):  # the clique spans both capacity blocks; the 4th node has no label
            labels = {CLIQUE: "uuid-7.0"} if i < 3 else {}
            fake.add_node(f"gpu-{i:03d}", labels, provider_id=f"aws:///us-east-1a/{iid}")
        args = ["discover", "--provider", "aws", "--cluster", "c1", "--filter", "tag:topocast:cluster=c1"]
        args += ["--name-from", "tag:Name", "--overlay", f"k8s-labels:domain={CLIQUE}"]
        result = invoke([*args, "--kubeconfig", kubeconfig(tmp_path, fake.url)])
    assert result.exit_code == 0, result.output
    graph = json.loads(result.stdout)
    acc = {n["name"]: n["accelerator"] for n in graph["nodes"]}
    assert [acc[f"gpu-{i:03d}"] for i in range(3)] == ["uuid-7.0"] * 3
    assert acc["gpu-003"] not in (None, "uuid-7.0")  # its capacity block stays
    assert sorted(graph["notes"]) == ["gpu-000", "gpu-001", "gpu-002", "gpu-003"]
    assert "spans 2 base domains" in graph["notes"]["gpu-000"] and "has no domain" in graph["notes"]["gpu-003"]
    assert "topocast: note: 4 node note(s)" in result.stderr and "overlay.k8s_GET=1" in result.stderr


def test_the_aws_functions_apply_the_overlay_of_their_settings(aws_env: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import boto3

    from topocast_sim import ec2 as ec2_sim
    from topocast_sim.aws_pipeline import LocalAwsPipeline

    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "true")
    ids = ec2_sim.generate_cluster(boto3.client("ec2"), 4, block_size=2, cluster_tag=("topocast:cluster", "c1"))
    with FakeKubeApiServer(token="function-token") as fake:
        monkeypatch.setenv("TOPOCAST_K8S_ENDPOINT", fake.url)  # as Terraform sets it for a k8s-labels overlay
        monkeypatch.setenv("TOPOCAST_K8S_TOKEN", "function-token")
        for i, iid in enumerate(ids):  # one clique over both capacity blocks
            fake.add_node(f"gpu-{i:03d}", {CLIQUE: "uuid-9.0"}, provider_id=f"aws:///us-east-1a/{iid}")
        overlays = settings_from_env({"TOPOCAST_CLUSTER": "c1", "TOPOCAST_OVERLAYS": SPEC.text}).overlays
        pl = LocalAwsPipeline("c1", quiet=0.5, max_wait=2.0, formats=("slurm-block",),
                              extra_settings={"overlays": overlays}, real_time=False)  # fmt: skip
        pl.request_reconcile()
        assert pl.run_until_idle(timeout=30)
    stored = pl.runtime.graphs.latest()
    assert stored is not None and {n.accelerator for n in stored.graph.nodes} == {"uuid-9.0"}
    assert sorted(stored.graph.notes) == [f"gpu-{i:03d}" for i in range(4)]
    envelope = json.loads(pl.ssm.get_parameter(Name="/topocast/c1/slurm/topology-block.conf")["Parameter"]["Value"])
    assert "BlockName=uuid-9.0 Nodes=gpu-[000-003]" in envelope["data"].splitlines()


@pytest.mark.slurm_current
def test_slurmctld_26_loads_the_blocks_of_the_overlay_cliques(sid_controller_factory: Any) -> None:
    from topocast.renderers import RenderOptions, render

    overlay = overlay_graph({f"gpu-{i}@i-{i}": {CLIQUE: "uuid-a.0" if i < 3 else "uuid-a.1"} for i in range(4)})
    graph, _ = apply_overlay(base_graph(), overlay, SPEC)
    art = render(graph, "slurm-block", RenderOptions(slurm_version="26.05"))  # keeps the 1-node clique
    ctl = sid_controller_factory(graph.node_names(), art.content, topology_plugin="topology/block")
    shown = sorted(sorted(b.nodes) for b in ctl.show_blocks().values() if b.nodes)
    assert shown == [["gpu-0", "gpu-1", "gpu-2"], ["gpu-3"]]  # the cliques, not the capacity blocks
