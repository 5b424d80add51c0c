"""Degrade per node, never per cluster: every cloud / label provider sets aside the one node whose data
breaks the graph's rules (with the reason) and places the rest; the discover use case fails the whole
discovery only when the share set aside passes the guard's limit."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from cli_runner import invoke
from gce_fake_server import FakeCompute, compute_for
from k8s_fake_apiserver import FakeKubeApiServer
from memory_stores import MemoryArtifactStore, MemoryGraphStore, MemoryPublishState
from test_app_follow import Debouncer
from test_html import chromium
from test_k8s_node_label_provider import EKS, eks_nodes, from_fake
from test_k8s_publish_cli import kubeconfig

from topocast.app import discover
from topocast.app.metrics import MetricCounts
from topocast.model.changes import InstanceChange, Reconcile
from topocast.model.graph import Node, TopologyGraph, dump_graph, graph_from_json
from topocast.model.placement import place_nodes
from topocast.ports.protocols import DiscoverPorts
from topocast.providers.aws.provider import AwsDiscoveryConfig, discover_instances
from topocast.providers.aws.provider import discover_full as aws_full
from topocast.providers.aws.sdk import ec2_client
from topocast.providers.base import DiscoveryResult
from topocast.providers.gcp.provider import GcpDiscoveryConfig
from topocast.providers.gcp.provider import discover_full as gcp_full
from topocast.renderers.html import render_page
from topocast_sim import ec2 as sim
from topocast_sim.gce import instance_json, placement


# ----- k8s-labels: the reproduced bug ------------------------------------------------------------------
@pytest.fixture
def fake() -> Iterator[FakeKubeApiServer]:
    with FakeKubeApiServer(token="cli-token") as server:
        yield server


def test_one_node_whose_labels_contradict_the_others_is_kept_without_topology(fake: FakeKubeApiServer) -> None:
    eks_nodes(fake)  # 7 nodes; nn-mid-a sits under nn-top on four of them
    # its kubelet claims nn-mid-a under another top switch: this used to fail the whole discovery
    liar = {f"{EKS}1": "nn-other", f"{EKS}2": "nn-mid-a", f"{EKS}3": "nn-leaf-0"}
    fake.add_node("ip-10-0-7-7.ec2.internal", liar, provider_id="aws:///us-east-1a/i-liar")

    graph = from_fake(fake)

    by_name = {n.name: n for n in graph.nodes}
    assert len(by_name) == 8
    assert by_name["ip-10-0-7-7.ec2.internal"].fabric == []
    assert by_name["ip-10-0-0-0.ec2.internal"].fabric == ["nn-leaf-0", "nn-mid-a", "nn-top"]
    assert graph.unplaced == {
        "ip-10-0-7-7.ec2.internal": "fabric path nn-other/nn-mid-a/nn-leaf-0 contradicts 4 other node(s): switch "
        "'nn-mid-a' is under 'nn-top' there (height 1), under 'nn-other' here; kept without topology"
    }


# ----- AWS: one instance's NetworkNodes break a rule ---------------------------------------------------
def _launch(ec2: Any, count: int, path: str) -> list[str]:
    tags = {"topocast:cluster": "demo", sim.NETWORK_NODES_TAG: path}
    resp = ec2.run_instances(
        ImageId="ami-12c6146b", InstanceType="p5.48xlarge", MinCount=count, MaxCount=count,
        TagSpecifications=[{"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}],
    )  # fmt: skip
    return sorted(i["InstanceId"] for i in resp["Instances"])


def _aws_config() -> AwsDiscoveryConfig:
    return AwsDiscoveryConfig(
        cluster="demo", region="us-east-1", filters=["tag:topocast:cluster=demo"], name_from="instance-id"
    )


def test_an_instance_with_an_unsafe_network_node_is_set_aside_and_an_update_keeps_that(aws_env: str) -> None:
    ec2 = ec2_client("us-east-1")
    good = _launch(ec2, 3, "nn-top,nn-mid,nn-leaf")
    (bad,) = _launch(ec2, 1, "nn-top,nn-mid,nn=leaf")

    full = aws_full(ec2, _aws_config())

    assert {n.id: n.fabric for n in full.graph.nodes} == {
        **{i: ["nn-leaf", "nn-mid", "nn-top"] for i in good},
        bad: [],
    }
    assert list(full.graph.unplaced) == [bad]
    assert full.graph.unplaced[bad].startswith("fabric path dropped: ")
    assert "'='" in full.graph.unplaced[bad]

    # an incremental update of another instance keeps what the full discovery set aside ...
    (late,) = _launch(ec2, 1, "nn-top,nn-mid,nn-leaf")
    grown = discover_instances(ec2, _aws_config(), full.graph, [InstanceChange(late, "upsert", "launch")])
    assert grown.graph.unplaced == full.graph.unplaced and len(grown.graph.nodes) == 5
    # ... and forgets it once that instance is gone
    ec2.terminate_instances(InstanceIds=[bad])
    gone = discover_instances(ec2, _aws_config(), grown.graph, [InstanceChange(bad, "remove", "terminate")])
    assert gone.graph.unplaced == {} and bad not in {n.id for n in gone.graph.nodes}


# ----- GCP: one VM's physicalHostTopology has an unsafe character ------------------------------------
def test_a_vm_whose_physical_host_topology_is_unsafe_is_set_aside_and_the_rest_placed(
    fake_compute: FakeCompute,
) -> None:
    where = placement(0, seed="x", hosts_per_subblock=4, subblocks_per_block=1, blocks_per_cluster=1)
    vms = [
        instance_json("demo-project", "us-central1-a", f"gpu-{i}", iid=str(i + 1), where=where,
                      labels={"topocast-cluster": "c1"})
        for i in range(3)
    ]  # fmt: skip
    vms[1]["resourceStatus"]["physicalHostTopology"]["subblock"] = "sub#1"
    fake_compute.add(vms)
    config = GcpDiscoveryConfig.from_data(
        {"cluster": "c1", "project": "demo-project", "labels": ["topocast-cluster=c1"]}
    )

    graph = gcp_full(compute_for(fake_compute), config).graph

    path = [where.subblock, where.block, where.cluster]
    assert {n.name: n.fabric for n in graph.nodes} == {"gpu-0": path, "gpu-1": [], "gpu-2": path}
    assert list(graph.unplaced) == ["gpu-1"]
    assert graph.unplaced["gpu-1"].startswith("physicalHostTopology of VM us-central1-a/gpu-1: unusable topology ID")
    assert graph.unplaced["gpu-1"].endswith("; kept without topology")


# ----- the discover use case: the guard's limit ---------------------------------------------------------
class Rack:
    """A full-scan-only source: ``good`` nodes under one leaf, ``liars`` claiming that leaf under another spine."""

    name = "rack"
    incremental = False

    def __init__(self, good: int, liars: int) -> None:
        self.good, self.liars = good, liars

    def discover_full(self, previous: TopologyGraph | None) -> DiscoveryResult:
        nodes = [Node(name=f"gpu-{i:02d}", fabric=["leaf", "spine"]) for i in range(self.good)]
        nodes += [Node(name=f"liar-{i}", fabric=["leaf", "spine-x"]) for i in range(self.liars)]
        return DiscoveryResult(place_nodes("c1", "rack", nodes))

    def discover_changes(self, previous: TopologyGraph, changes: Sequence[InstanceChange]) -> DiscoveryResult:
        return self.discover_full(previous)

    def scope(self, change: InstanceChange) -> str | None:
        return None


def _ports(source: Rack, store: MemoryGraphStore, metrics: MetricCounts) -> DiscoverPorts:
    return DiscoverPorts(
        cluster="c1", graphs=store, provider=lambda: source, debouncer=Debouncer(), publish_state=MemoryPublishState(),
        artifacts=MemoryArtifactStore(), handoff=None, metrics=metrics, set_aside_limit=0.10,  # type: ignore[arg-type]
        full_scan_threshold=100, rechecks=None, follow_rechecks=6, follow_interval=30.0,
    )  # fmt: skip


def test_a_few_set_aside_are_committed_and_counted_too_many_fail_and_the_last_good_graph_stays() -> None:
    store, metrics = MemoryGraphStore(), MetricCounts()
    source = Rack(good=10, liars=1)  # 1 of 11: 9 %, within the 10 % limit

    first = discover(_ports(source, store, metrics), [Reconcile("schedule")])

    assert first.status == "done" and metrics.nodes_set_aside == 1
    assert first.detail["set_aside"] == [
        "liar-0: fabric path spine-x/leaf contradicts 10 other node(s): switch 'leaf' is under 'spine' there "
        "(height 1), under 'spine-x' here; kept without topology"
    ]
    stored = store.latest()
    assert stored is not None and stored.generation == 1 and len(stored.graph.nodes) == 11

    source.liars = 3  # 3 of 13: 23 %
    second = discover(_ports(source, store, metrics), [Reconcile("schedule")])

    assert second.status == "retry" and metrics.nodes_set_aside == 3
    assert second.reason.startswith(
        "discovery failed: 3 of 13 node(s) set aside (23%, over the 10% limit of TOPOCAST_GUARD_MAX_LOSS), e.g. "
        "liar-0: fabric path spine-x/leaf contradicts 10 other node(s)"
    )
    assert second.reason.endswith("; nothing written, the last good graph stays")
    latest = store.latest()
    assert latest is not None and latest.generation == 1  # nothing was written


# ----- shown everywhere: the fabric view -------------------------------------------------------------------
HOSTILE = "<script>alert(1)</script>"


def _graph_with_hostile_record() -> TopologyGraph:
    nodes = [Node(name=f"gpu-{i:02d}", fabric=["leaf", "spine"]) for i in range(4)]
    return place_nodes("c1", "test", [*nodes, Node(name=HOSTILE, fabric=["leaf", "spine"])])


def test_the_fabric_view_lists_what_was_set_aside_escaped() -> None:
    page = render_page(_graph_with_hostile_record())

    assert '<div class="card alert"><b>1</b><span>set aside</span></div>' in page
    assert "<li><code>record &#x27;&lt;script&gt;alert(1)&lt;/script&gt;&#x27;</code>: node name " in page
    assert HOSTILE not in page


@pytest.mark.browser
def test_the_set_aside_list_shows_in_chromium_and_the_page_script_still_runs(tmp_path: Path) -> None:
    page = tmp_path / "view.html"
    page.write_text(render_page(_graph_with_hostile_record()))

    dom = chromium(["--dump-dom", f"{page.as_uri()}#search=gpu-02"]).stdout

    assert re.search(r'<body[^>]*data-render-ms="\d+"', dom), "the page script did not finish"
    assert re.search(r'id="results" data-count="1"', dom)  # search still works
    assert '<details class="alertbox setaside" id="set-aside" open="">' in dom
    assert "<code>record '&lt;script&gt;alert(1)&lt;/script&gt;'</code>: node name" in dom
    shot = tmp_path / "view.png"
    chromium([f"--screenshot={shot}", page.as_uri()])
    assert shot.is_file() and shot.stat().st_size > 20_000


# ----- shown everywhere: the commands -------------------------------------------------------------------
def _rack_file(tmp_path: Path, name: str, liars: int) -> Path:
    nodes = [Node(name=f"gpu-{i:02d}", fabric=["leaf", "spine"], accelerator="nvl-1") for i in range(4)]
    nodes += [Node(name=f"liar-{i}", fabric=["leaf", "spine-x"], accelerator="nvl-1") for i in range(liars)]
    path = tmp_path / name
    path.write_text(dump_graph(place_nodes("c1", "test", nodes)))
    return path


LIAR_0 = (
    "fabric path spine-x/leaf contradicts 4 other node(s): switch 'leaf' is under 'spine' there (height 1), "
    "under 'spine-x' here; kept without topology"
)


def test_render_prints_what_was_set_aside_and_the_manifest_lists_it(tmp_path: Path) -> None:
    graph = _rack_file(tmp_path, "g.json", liars=1)

    result = invoke(["render", "--graph", str(graph), "-f", "all", "--out", str(tmp_path / "out")])

    assert result.exit_code == 0, result.output
    assert (
        "topocast: warning: 1 set aside of 5 node(s): kept without (part of) their topology or left out\n"
        f"  liar-0: {LIAR_0}\n"
    ) in result.stderr
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["set_aside"] == {"liar-0": LIAR_0}


def test_discover_prints_the_count_and_a_sample(fake: FakeKubeApiServer, tmp_path: Path) -> None:
    for i in range(2):
        fake.add_node(f"n{i}", {"example.com/rack": "r1", "example.com/row": "row-a"})
    fake.add_node("odd", {"example.com/rack": "r1", "example.com/row": "row-b"})
    fake.add_node("bad", {"example.com/rack": "n0", "example.com/row": "row-a"})  # a switch named like a node

    result = invoke(
        ["discover", "--provider", "k8s-labels", "--cluster", "c1", "--kubeconfig", str(kubeconfig(tmp_path, fake.url)),
         "--fabric-key", "example.com/rack", "--fabric-key", "example.com/row"]
    )  # fmt: skip

    assert result.exit_code == 0, result.output
    assert "topocast: warning: 2 set aside of 4 node(s): kept without (part of) their topology or left out\n" in (
        result.stderr
    )
    assert "  n0: node name 'n0' is also a switch of the fabric; left out\n" in result.stderr
    assert (
        "  odd: fabric path row-b/r1 contradicts 2 other node(s): switch 'r1' is under 'row-a' there (height 1), "
        "under 'row-b' here; kept without topology\n"
    ) in result.stderr
    assert "topocast: 3 node(s), 1 without topology, 2 set aside (k8s_GET=1)" in result.stderr
    assert set(json.loads(result.stdout)["unplaced"]) == {"n0", "odd"}


def test_diff_reports_entries_newly_and_no_longer_set_aside(tmp_path: Path) -> None:
    old = _rack_file(tmp_path, "old.json", liars=1)
    new = tmp_path / "new.json"
    graph = graph_from_json(old.read_text())
    new.write_text(dump_graph(graph.model_copy(update={"unplaced": {"record 'x y'": "no port on line 7"}})))

    text = invoke(["diff", str(old), str(new)])
    as_json = invoke(["diff", "--json", str(old), str(new)])

    assert text.exit_code == 1 and as_json.exit_code == 1  # only the set-aside entries differ
    assert "newly set aside 1:\n  record 'x y': no port on line 7\nno longer set aside 1:\n  liar-0\n" in text.stdout
    assert "summary: 0 added, 0 removed, 0 moved, 0 domain changed, 1 newly set aside, 1 no longer set aside" in (
        text.stdout
    )
    data = json.loads(as_json.stdout)
    assert (data["newly_set_aside"], data["no_longer_set_aside"]) == ({"record 'x y'": "no port on line 7"}, ["liar-0"])


def test_a_port_selection_that_selects_no_host_fails_the_discovery_and_the_last_good_graph_stays() -> None:
    from ib_fabric_gen import dual_fabric

    from topocast.config import settings_from_env
    from topocast.providers import ProviderInputs, build_provider

    dump = dual_fabric(pods=1, units=1, hosts_per_unit=4, rails=2).text()
    store, metrics = MemoryGraphStore(), MetricCounts()

    def ports(patterns: str) -> DiscoverPorts:
        env = {"TOPOCAST_CLUSTER": "c1", "TOPOCAST_PROVIDER": "ibnetdiscover", "TOPOCAST_IB_HCAS": patterns}
        options = settings_from_env(env).provider_options()
        inputs = ProviderInputs("c1", options, uploads=lambda: {"s3://b/u/ufm/ibnetdiscover.out": dump})
        return DiscoverPorts(
            cluster="c1", graphs=store, provider=lambda: build_provider("ibnetdiscover", inputs),
            debouncer=Debouncer(), publish_state=MemoryPublishState(), artifacts=MemoryArtifactStore(), handoff=None,
            metrics=metrics, set_aside_limit=0.10,  # type: ignore[arg-type]
            full_scan_threshold=100, rechecks=None, follow_rechecks=6, follow_interval=30.0,
        )  # fmt: skip

    assert discover(ports("mlx5_[0,1]"), [Reconcile("schedule")]).status == "done"  # the functions' syntax
    failed = discover(ports("mlx9_*"), [Reconcile("schedule")])
    assert failed.status == "retry" and metrics.discover_failures == 1
    assert failed.reason.startswith("discovery failed: port selection (hcas mlx9_*) selects none of the fabric's")
    latest = store.latest()
    # 4 GPU hosts and the fabric's 2 storage servers (their mlx5_0 matches the first selection)
    assert latest is not None and latest.generation == 1 and len(latest.graph.nodes) == 6
