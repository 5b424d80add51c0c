"""The Kubernetes publisher against a fake API server, driven by the real lightkube client.

Every fake server started here records its requests into ``SEEN``; the last test
checks ``infra/k8s/rbac.yaml`` against them (granted == used).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from k8s_fake_apiserver import (
    CONFIGMAPS,
    KAI_TOPOLOGY,
    KUEUE_TOPOLOGY,
    NODES,
    VOLCANO_HYPERNODE,
    FakeKubeApiServer,
    LoggedRequest,
    ResourceType,
)

from topocast.k8s.client import ClientSettings, K8sConnection, build_client
from topocast.model.graph import Node, TopologyGraph
from topocast.publish.kubernetes import KubernetesPublisher, KubernetesPublisherConfig
from topocast.renderers import render
from topocast.renderers.base import Artifact, RenderOptions
from topocast.renderers.slinky import SPEC_ANNOTATION, node_annotations

REPO = Path(__file__).resolve().parent.parent
ALL = ("k8s-labels", "kueue", "kai", "volcano", "slinky")
TIER = "fabric.topograph.run/tier-"
DOMAIN = "accelerator.topograph.run/domain"
HOST = "kubernetes.io/hostname"
MANAGED = "app.kubernetes.io/managed-by"
LABELS_SHA = "topocast.dev/labels-sha256"

#: every request any fake server in this module received (for the RBAC check at the end)
SEEN: list[LoggedRequest] = []


# ----- helpers ------------------------------------------------------------------------------------------


def make_graph(n: int, tiers: int = 3, fabric: dict[int, list[str]] | None = None, **extra: Any) -> TopologyGraph:
    """``n`` GPU nodes, 16 per leaf, 128 per spine, 1024 per core; 8 per NVLink domain."""
    nodes = []
    for i in range(n):
        path = [f"leaf-{i // 16}", f"spine-{i // 128}", f"core-{i // 1024}"][:tiers]
        nodes.append(
            Node(name=f"gpu-{i:04d}", id=f"i-{i:017x}", fabric=(fabric or {}).get(i, path), accelerator=f"nvl-{i // 8}")
        )
    return TopologyGraph(cluster="c1", provider="aws", nodes=nodes, **extra)


def artifacts(graph: TopologyGraph, formats: tuple[str, ...] = ALL, **options: Any) -> dict[str, Artifact]:
    opts = RenderOptions(**options)
    return {f: render(graph, f, opts) for f in formats}


def add_cluster_nodes(fake: FakeKubeApiServer, graph: TopologyGraph, **labels: str) -> None:
    for node in graph.nodes:
        fake.add_node(node.name, {HOST: node.name, **labels}, provider_id=f"aws:///us-east-1a/{node.id}")


def make_publisher(
    fake: FakeKubeApiServer,
    sleeps: list[float] | None = None,
    real_sleep: bool = True,
    client: dict[str, Any] | None = None,
    graph_source: Callable[[int], TopologyGraph] | None = None,
    **config: Any,
) -> KubernetesPublisher:
    settings = ClientSettings(**{"qps": 0, "backoff_initial": 0.01, "backoff_max": 0.05, **(client or {})})
    cfg = KubernetesPublisherConfig(
        connection=K8sConnection(endpoint=fake.url, token="test-token"), client=settings, **config
    )

    def sleep(seconds: float) -> None:
        if sleeps is not None:
            sleeps.append(seconds)
        if real_sleep:
            time.sleep(seconds)

    return KubernetesPublisher(
        cfg, client_factory=lambda: build_client(cfg.connection, cfg.client, sleep=sleep), graph_source=graph_source
    )


def labels_of(fake: FakeKubeApiServer, name: str) -> dict[str, str]:
    obj = fake.get(NODES, name)
    assert obj is not None
    return dict(obj["metadata"].get("labels") or {})


def desired_labels(arts: dict[str, Artifact]) -> dict[str, dict[str, str]]:
    return {o["node"]: o["labels"] for o in arts["k8s-labels"].objects}


def node_patches(fake: FakeKubeApiServer) -> list[LoggedRequest]:
    return [r for r in fake.calls("PATCH", resource="nodes") if r.status == 200]


def levels_of(obj: dict[str, Any] | None) -> list[str]:
    assert obj is not None
    return [lv["nodeLabel"] for lv in obj["spec"]["levels"]]


@pytest.fixture
def fake() -> Iterator[FakeKubeApiServer]:
    server = FakeKubeApiServer(token="test-token").start()
    try:
        yield server
    finally:
        server.stop()
        SEEN.extend(server.requests)


@pytest.fixture
def fake_factory() -> Iterator[Callable[..., FakeKubeApiServer]]:
    servers: list[FakeKubeApiServer] = []

    def make(**kwargs: Any) -> FakeKubeApiServer:
        servers.append(FakeKubeApiServer(token="test-token", **kwargs).start())
        return servers[-1]

    yield make
    for server in servers:
        server.stop()
        SEEN.extend(server.requests)


# ----- node labels at scale -------------------------------------------------------------------------------


def test_first_publish_labels_all_1000_nodes_with_one_list_and_one_patch_each(fake: FakeKubeApiServer) -> None:
    graph = make_graph(1000)
    add_cluster_nodes(fake, graph)
    arts = artifacts(graph, ("k8s-labels",))

    report = make_publisher(fake).run(arts)

    assert report.ok, report.summary()
    want = desired_labels(arts)
    for node in graph.nodes:
        assert labels_of(fake, node.name) == {HOST: node.name, **want[node.name]}
    assert labels_of(fake, "gpu-0999")[f"{TIER}0"] == "leaf-62"  # spot check against the graph itself
    assert labels_of(fake, "gpu-0999")[f"{TIER}2"] == "core-0"
    assert len(fake.calls("GET", verb="list", resource="nodes")) == 1
    patched = [r.name for r in node_patches(fake)]
    assert sorted(patched) == sorted(n.name for n in graph.nodes)  # every node exactly once
    assert len(report.nodes_patched) == 1000 and report.nodes_unchanged == 0
    assert report.api_calls["requests"] == 1001


def test_one_node_moved_costs_exactly_one_list_and_one_patch(fake: FakeKubeApiServer) -> None:
    graph = make_graph(1000)
    add_cluster_nodes(fake, graph)
    publisher = make_publisher(fake)
    assert publisher.run(artifacts(graph, ("k8s-labels",))).ok
    moved = make_graph(1000, fabric={3: ["leaf-1", "spine-0", "core-0"]})  # gpu-0003: leaf-0 -> leaf-1
    fake.reset_log()

    report = publisher.run(artifacts(moved, ("k8s-labels",)))

    assert report.ok
    assert [(r.method, r.verb, r.name) for r in fake.requests] == [
        ("GET", "list", None),
        ("PATCH", "patch", "gpu-0003"),
    ]
    body = fake.requests[1].body["metadata"]
    assert body["labels"] == {f"{TIER}0": "leaf-1"}  # only what changed
    assert list(body["annotations"]) == [LABELS_SHA]  # plus the record of the state it establishes
    assert labels_of(fake, "gpu-0003")[f"{TIER}0"] == "leaf-1"
    assert report.nodes_patched == ["gpu-0003"] and report.nodes_unchanged == 999


def test_one_node_moved_with_every_format_still_patches_one_node(fake: FakeKubeApiServer) -> None:
    graph = make_graph(256)
    add_cluster_nodes(fake, graph)
    publisher = make_publisher(fake)
    assert publisher.run(artifacts(graph)).ok
    fake.reset_log()

    # gpu-0003 moves to leaf-1 together with its NVLink domain (nvl-2 is on leaf-1): every domain
    # stays on one leaf, so the Kueue/KAI levels stay as they are
    moved = make_graph(256, fabric={3: ["leaf-1", "spine-0", "core-0"]})
    moved.nodes[3] = moved.nodes[3].model_copy(update={"accelerator": "nvl-2"})
    report = publisher.run(artifacts(moved))

    assert report.ok, report.summary()
    assert [r.name for r in node_patches(fake)] == ["gpu-0003"]
    # the two leaf HyperNodes whose members changed, and the Slinky file; Kueue/KAI levels did not change
    applied = {r.name for r in fake.calls("PATCH") if r.resource != "nodes"}
    assert applied == {"leaf-0", "leaf-1", "slurm-config-extra"}


def test_a_move_that_makes_a_domain_straddle_leaves_drops_tier_0_from_the_topologies_first(
    fake: FakeKubeApiServer,
) -> None:
    graph = make_graph(256)
    add_cluster_nodes(fake, graph)
    publisher = make_publisher(fake)
    assert publisher.run(artifacts(graph)).ok
    fake.reset_log()

    # gpu-0003 moves to leaf-1 but stays in nvl-0 (gpu-0000..0007, on leaf-0): nvl-0 now spans two leaves
    report = publisher.run(artifacts(make_graph(256, fabric={3: ["leaf-1", "spine-0", "core-0"]})))

    assert report.ok, report.summary()
    assert [r.name for r in node_patches(fake)] == ["gpu-0003"]
    topologies = [r for r in fake.calls("PATCH", resource="topologies")]
    assert {r.group for r in topologies} == {"kueue.x-k8s.io", "kai.scheduler"}
    for r in topologies:
        assert [level["nodeLabel"] for level in r.body["spec"]["levels"]] == [
            "fabric.topograph.run/tier-2",
            "fabric.topograph.run/tier-1",
            "accelerator.topograph.run/domain",
            "kubernetes.io/hostname",
        ]
    # the levels shrink, so the schedulers stop using tier-0 before any label changes
    order = [r.resource for r in fake.calls("PATCH") if r.resource in ("topologies", "nodes")]
    assert order == ["topologies", "topologies", "nodes"]


def test_second_identical_publish_writes_nothing(fake: FakeKubeApiServer) -> None:
    graph = make_graph(64)
    add_cluster_nodes(fake, graph)
    publisher = make_publisher(fake)
    assert publisher.run(artifacts(graph), generation="7").ok
    fake.reset_log()

    report = publisher.run(artifacts(graph), generation="8")

    assert report.ok
    assert fake.calls("PATCH") == [] and fake.calls("DELETE") == []
    # discovery is cached between publishes: one LIST of nodes, one read per object kind
    assert sorted(r.verb for r in fake.requests) == ["get", "get", "get", "list", "list"]
    cm = fake.get(CONFIGMAPS, "slurm-config-extra", "slurm")
    assert cm is not None and cm["metadata"]["annotations"]["topocast.dev/generation"] == "7"  # content unchanged


# ----- label ownership ------------------------------------------------------------------------------------


def test_removed_tier_is_removed_and_kueue_shrinks_before_the_labels(fake: FakeKubeApiServer) -> None:
    graph = make_graph(64, tiers=3)
    add_cluster_nodes(fake, graph)
    publisher = make_publisher(fake)
    assert publisher.run(artifacts(graph)).ok
    assert f"{TIER}2" in levels_of(fake.get(KUEUE_TOPOLOGY, "topocast"))
    fake.reset_log()

    report = publisher.run(artifacts(make_graph(64, tiers=2)))

    assert report.ok, report.summary()
    for node in graph.nodes:
        labels = labels_of(fake, node.name)
        assert f"{TIER}2" not in labels
        assert labels[f"{TIER}1"] == f"spine-{int(node.name[4:]) // 128}"
    assert report.labels_removed == 64
    assert f"{TIER}2" not in levels_of(fake.get(KUEUE_TOPOLOGY, "topocast"))
    order = [(r.resource, r.group) for r in fake.requests if r.method == "PATCH"]
    first_node = order.index(("nodes", ""))
    assert order.index(("topologies", "kueue.x-k8s.io")) < first_node  # Kueue stops using tier-2 first
    assert order.index(("topologies", "kai.scheduler")) < first_node


def test_added_tier_reaches_kueue_only_after_every_node_carries_it(fake: FakeKubeApiServer) -> None:
    graph = make_graph(64, tiers=2)
    add_cluster_nodes(fake, graph)
    publisher = make_publisher(fake)
    assert publisher.run(artifacts(graph)).ok
    fake.reset_log()

    assert publisher.run(artifacts(make_graph(64, tiers=3))).ok

    order = [(r.resource, r.group) for r in fake.requests if r.method == "PATCH"]
    last_node = len(order) - 1 - order[::-1].index(("nodes", ""))
    assert order.index(("topologies", "kueue.x-k8s.io")) > last_node
    assert f"{TIER}2" in levels_of(fake.get(KUEUE_TOPOLOGY, "topocast"))


def test_foreign_labels_survive_and_stale_owned_ones_go(fake: FakeKubeApiServer) -> None:
    graph = make_graph(32)
    foreign = {
        "team": "ml",
        "example.com/tier-0": "theirs",  # same name, other prefix
        f"{TIER}x": "not-a-tier",  # owned prefix but not <int>
        "fabric.topograph.run/tiers": "also-not",
    }
    add_cluster_nodes(fake, graph, **foreign, **{f"{TIER}7": "stale-old-tier", DOMAIN: "nvl-old"})

    report = make_publisher(fake).run(artifacts(graph, ("k8s-labels",)))

    assert report.ok
    for node in graph.nodes:
        labels = labels_of(fake, node.name)
        assert {k: labels.get(k) for k in foreign} == foreign
        assert f"{TIER}7" not in labels
        assert labels[DOMAIN] == f"nvl-{int(node.name[4:]) // 8}"


def test_pending_accelerator_domain_label_is_left_alone(fake: FakeKubeApiServer) -> None:
    graph = make_graph(8)
    pending = graph.model_copy(
        update={
            "nodes": [
                graph.nodes[0].model_copy(update={"accelerator": None, "accelerator_pending": True}),
                *graph.nodes[1:],
            ]
        }
    )
    add_cluster_nodes(fake, graph, **{DOMAIN: "nvl-known"})

    assert make_publisher(fake).run(artifacts(pending, ("k8s-labels",))).ok

    assert labels_of(fake, "gpu-0000")[DOMAIN] == "nvl-known"  # unknown right now, not gone
    assert labels_of(fake, "gpu-0001")[DOMAIN] == "nvl-0"


def test_nodes_are_matched_by_provider_id_and_strays_reported(fake: FakeKubeApiServer) -> None:
    graph = make_graph(10)
    for i, node in enumerate(graph.nodes[:9]):  # gpu-0009 never joined the cluster
        fake.add_node(f"ip-10-0-0-{i}.ec2.internal", {HOST: f"ip-10-0-0-{i}"}, f"aws:///us-east-1b/{node.id}")
    fake.add_node("cpu-system-1", {HOST: "cpu-system-1"}, "aws:///us-east-1b/i-0ffffffffffffffff")

    report = make_publisher(fake).run(artifacts(graph, ("k8s-labels",)))

    assert labels_of(fake, "ip-10-0-0-5.ec2.internal")[f"{TIER}0"] == "leaf-0"
    assert labels_of(fake, "ip-10-0-0-5.ec2.internal")[DOMAIN] == "nvl-0"
    assert labels_of(fake, "cpu-system-1") == {HOST: "cpu-system-1"}
    assert report.nodes_missing_in_cluster == ["gpu-0009"]
    assert report.nodes_missing_in_graph == ["cpu-system-1"]
    assert report.matched_by == {"provider-id": 9}
    assert "not in cluster: gpu-0009" in report.summary()


def test_slinky_spec_annotation_rides_in_the_same_patch(fake: FakeKubeApiServer) -> None:
    graph = make_graph(16)
    add_cluster_nodes(fake, graph)
    publisher = make_publisher(fake, slinky_node_annotations=True)

    result = publisher.publish({"generation": 3, "graph": graph}, artifacts(graph, ("k8s-labels", "slinky")))

    assert result.published, result.detail
    want = node_annotations(graph, RenderOptions())
    for node in graph.nodes:
        obj = fake.get(NODES, node.name)
        assert obj is not None and obj["metadata"]["annotations"][SPEC_ANNOTATION] == want[node.name][SPEC_ANNOTATION]
    assert len(node_patches(fake)) == 16  # labels + annotation: one PATCH per node


# ----- faults ---------------------------------------------------------------------------------------------


def test_outage_half_way_then_retry_converges_without_redoing_nodes(fake: FakeKubeApiServer) -> None:
    graph = make_graph(300)
    add_cluster_nodes(fake, graph)
    arts = artifacts(graph)
    fake.inject(503, None, skip=100, match=lambda r: r.method == "PATCH" and r.resource == "nodes")
    publisher = make_publisher(fake, client={"max_attempts": 2}, max_consecutive_failures=3)

    first = publisher.run(arts)

    assert not first.ok
    assert len(first.nodes_patched) == 100
    assert first.nodes_not_attempted and "not attempted" in " ".join(first.errors)
    # new Topology levels must wait until every node carries them
    assert sorted(first.objects_held) == [
        "kai.scheduler/v1alpha1 Topology topocast",
        "kueue.x-k8s.io/v1beta2 Topology topocast",
    ]
    assert fake.get(KUEUE_TOPOLOGY, "topocast") is None
    fake.clear_faults()
    fake.reset_log()

    second = publisher.run(arts)

    assert second.ok, second.summary()
    patched_again = {r.name for r in node_patches(fake)}
    assert len(patched_again) == len(node_patches(fake)) == 200  # no node patched twice
    assert patched_again.isdisjoint(first.nodes_patched)  # and none that was already right
    want = desired_labels(arts)
    assert all(labels_of(fake, n.name) == {HOST: n.name, **want[n.name]} for n in graph.nodes)
    assert levels_of(fake.get(KUEUE_TOPOLOGY, "topocast")) == levels_of(arts["kueue"].objects[0])


def test_429_retry_after_is_honoured(fake: FakeKubeApiServer) -> None:
    graph = make_graph(8)
    add_cluster_nodes(fake, graph)
    fake.inject(429, 2, retry_after=0.2, match=lambda r: r.method == "PATCH" and r.resource == "nodes")
    sleeps: list[float] = []

    report = make_publisher(fake, sleeps=sleeps, real_sleep=False).run(artifacts(graph, ("k8s-labels",)))

    assert report.ok
    assert sleeps == [0.2, 0.2]  # each 429's Retry-After waited out, not our own backoff
    assert report.api_calls["throttled"] == 2
    assert [r.status for r in fake.calls("PATCH")].count(429) == 2
    assert len(node_patches(fake)) == 8


def test_5xx_is_retried_with_growing_backoff(fake: FakeKubeApiServer) -> None:
    graph = make_graph(4)
    add_cluster_nodes(fake, graph)
    fake.inject(500, 2, match=lambda r: r.verb == "list")
    sleeps: list[float] = []

    report = make_publisher(
        fake, sleeps=sleeps, real_sleep=False, client={"backoff_initial": 1.0, "backoff_max": 30.0}
    ).run(artifacts(graph, ("k8s-labels",)))

    assert report.ok and report.api_calls["retries"] == 2
    assert 0.5 <= sleeps[0] <= 1.0 and 1.0 <= sleeps[1] <= 2.0  # 1 s then 2 s, with jitter down to half
    assert [r.status for r in fake.calls(verb="list")] == [500, 500, 200]


def test_persistent_5xx_gives_a_clear_error_not_an_exception(fake: FakeKubeApiServer) -> None:
    add_cluster_nodes(fake, make_graph(2))
    fake.inject(503, None, match=lambda r: r.verb == "list")

    report = make_publisher(fake, client={"max_attempts": 3}).run(artifacts(make_graph(2), ("k8s-labels",)))

    assert not report.ok
    assert report.errors == ["listing nodes failed: 503 injected fault"]
    assert len(fake.calls(verb="list")) == 3


def test_conflict_on_apply_is_retried_after_a_fresh_read(fake: FakeKubeApiServer) -> None:
    graph = make_graph(64)
    add_cluster_nodes(fake, graph)
    publisher = make_publisher(fake)
    assert publisher.run(artifacts(graph)).ok
    moved = make_graph(64, fabric={3: ["leaf-1", "spine-0", "core-0"]})
    arts = artifacts(moved)

    def concurrent_writer(rtype: ResourceType, name: str, namespace: str | None = None) -> None:
        fake.inject(
            None,
            1,
            match=lambda r: r.method == "PATCH" and r.name == name,
            action=lambda s: s.touch(rtype, name, namespace),
        )

    concurrent_writer(CONFIGMAPS, "slurm-config-extra", "slurm")
    concurrent_writer(VOLCANO_HYPERNODE, "leaf-0")
    fake.reset_log()

    report = publisher.run(arts)

    assert report.ok, report.summary()
    for name in ("slurm-config-extra", "leaf-0"):
        seen = [(r.method, r.status) for r in fake.requests if r.name == name]
        assert seen[seen.index(("PATCH", 409)) :] == [("PATCH", 409), ("GET", 200), ("PATCH", 200)], name
    cm = fake.get(CONFIGMAPS, "slurm-config-extra", "slurm")
    assert cm is not None
    assert cm["data"] == arts["slinky"].objects[0]["data"]
    assert "fake/touched" in cm["metadata"]["annotations"]  # the other writer's field survives the apply


def test_endless_conflicts_end_in_a_clear_error(fake: FakeKubeApiServer) -> None:
    fake.inject(409, None, match=lambda r: r.method == "PATCH" and r.resource == "configmaps")

    result = make_publisher(fake, max_conflict_retries=2).publish(
        {"generation": 1}, artifacts(make_graph(4), ("slinky",))
    )

    assert not result.published
    assert "v1 ConfigMap slurm/slurm-config-extra: still conflicting after 2 fresh reads" in result.report.errors
    assert [r.method for r in fake.requests if r.resource == "configmaps"] == [
        "GET",
        "PATCH",
        "GET",
        "PATCH",
        "GET",
        "PATCH",
    ]


# ----- scheduler objects ------------------------------------------------------------------------------------


def test_missing_crds_are_warnings_and_the_rest_publishes(fake_factory: Callable[..., FakeKubeApiServer]) -> None:
    fake = fake_factory(crds=())
    graph = make_graph(16)
    add_cluster_nodes(fake, graph)

    result = make_publisher(fake).publish({"generation": 1}, artifacts(graph))

    assert result.published, result.detail
    text = " ".join(result.report.warnings)
    for kind in ("Kueue Topology", "KAI Topology", "Volcano HyperNode"):
        assert kind in text
    assert "is the CRD installed?" in text
    assert len(node_patches(fake)) == 16
    assert fake.get(CONFIGMAPS, "slurm-config-extra", "slurm") is not None
    kueue_probes = [r.path for r in fake.requests if r.path.startswith("/apis/kueue")]
    assert kueue_probes == [f"/apis/kueue.x-k8s.io/{v}" for v in ("v1beta2", "v1beta1", "v1alpha1")]


@pytest.mark.parametrize(
    ("served", "expected"),
    [(("v1beta2", "v1beta1"), "v1beta2"), (("v1beta1",), "v1beta1"), (("v1alpha1",), "v1alpha1")],
)
def test_kueue_version_is_detected(
    fake_factory: Callable[..., FakeKubeApiServer], served: tuple[str, ...], expected: str
) -> None:
    fake = fake_factory(crds=(ResourceType("kueue.x-k8s.io", served, "Topology", "topologies"),))

    report = make_publisher(fake).run(artifacts(make_graph(8), ("kueue",)))

    assert report.ok
    stored = fake.get(ResourceType("kueue.x-k8s.io", served, "Topology", "topologies"), "topocast")
    assert stored is not None and stored["apiVersion"] == f"kueue.x-k8s.io/{expected}"
    assert report.api_versions == {"kueue": f"kueue.x-k8s.io/{expected}"}
    assert fake.calls("PATCH")[0].path == f"/apis/kueue.x-k8s.io/{expected}/topologies/topocast"
    assert any("applied as" in w for w in report.warnings) == (expected != "v1beta2")


def test_kueue_group_without_topology_kind_is_a_warning(fake_factory: Callable[..., FakeKubeApiServer]) -> None:
    fake = fake_factory(crds=(ResourceType("kueue.x-k8s.io", ("v1beta1",), "ClusterQueue", "clusterqueues"),))

    report = make_publisher(fake).run(artifacts(make_graph(8), ("kueue",)))

    assert report.ok and fake.calls("PATCH") == []
    assert "no topologies resource" in report.warnings[-1]


def test_hypernode_gc_deletes_only_what_topocast_created(fake: FakeKubeApiServer) -> None:
    spec = {"tier": 1, "members": [{"type": "Node", "selector": {"exactMatch": {"name": "x"}}}]}
    fake.put(VOLCANO_HYPERNODE, {"metadata": {"name": "volcano-discovered"}, "spec": spec})
    ours = {"name": "old-leaf", "labels": {MANAGED: "topocast"}, "annotations": {"topocast.dev/manifest-sha256": "ab"}}
    fake.put(VOLCANO_HYPERNODE, {"metadata": ours, "spec": spec})
    big, small = make_graph(64), make_graph(32)
    add_cluster_nodes(fake, big)
    publisher = make_publisher(fake)

    report = publisher.run(artifacts(big, ("volcano",)))

    assert report.ok
    assert [r.name for r in fake.calls("DELETE")] == ["old-leaf"]
    assert fake.get(VOLCANO_HYPERNODE, "volcano-discovered") is not None
    fake.reset_log()

    publisher.run(artifacts(small, ("volcano",)))

    names = lambda arts: {o["metadata"]["name"] for o in arts["volcano"].objects}  # noqa: E731
    gone = names(artifacts(big, ("volcano",))) - names(artifacts(small, ("volcano",)))
    assert gone and sorted(r.name for r in fake.calls("DELETE")) == sorted(gone)
    assert {o["metadata"]["name"] for o in fake.list(VOLCANO_HYPERNODE)} == names(artifacts(small, ("volcano",))) | {
        "volcano-discovered"
    }


@pytest.mark.parametrize("kind", ["kueue", "kai"])
def test_immutable_levels_are_replaced_by_delete_and_create(fake: FakeKubeApiServer, kind: str) -> None:
    rtype = {"kueue": KUEUE_TOPOLOGY, "kai": KAI_TOPOLOGY}[kind]
    add_cluster_nodes(fake, make_graph(32))
    publisher = make_publisher(fake)
    assert publisher.run(artifacts(make_graph(32, tiers=3), (kind,))).ok
    fake.inject(
        422,
        1,
        match=lambda r: r.method == "PATCH" and r.group == rtype.group,
        message='Topology "topocast" is invalid: spec.levels: Invalid value: "array": field is immutable',
    )

    report = publisher.run(artifacts(make_graph(32, tiers=2), (kind,)))

    assert report.ok, report.summary()
    assert "deleted and recreated" in " ".join(report.warnings)
    assert f"{TIER}2" not in levels_of(fake.get(rtype, "topocast"))
    assert [r.method for r in fake.requests if r.group == rtype.group][-2:] == ["DELETE", "PATCH"]


def test_configmap_carries_generation_and_hashes(fake: FakeKubeApiServer) -> None:
    graph = make_graph(16)
    arts = artifacts(graph, ("slinky",))

    result = make_publisher(fake).publish({"generation": 42}, arts)

    assert result.published
    cm = fake.get(CONFIGMAPS, "slurm-config-extra", "slurm")
    assert cm is not None
    ann = cm["metadata"]["annotations"]
    content = cm["data"]["topology.conf"]
    assert "SwitchName=leaf-0" in content
    assert ann["topocast.dev/generation"] == "42"
    assert ann["topocast.dev/sha256"] == hashlib.sha256(content.encode()).hexdigest()
    assert len(ann["topocast.dev/manifest-sha256"]) == 64
    assert cm["metadata"]["managedFields"][0]["manager"] == "topocast"


def test_missing_configmap_namespace_is_an_error_naming_it(fake: FakeKubeApiServer) -> None:
    arts = artifacts(make_graph(4), ("slinky",), slinky={"namespace": "no-such-ns"})

    result = make_publisher(fake).publish({"generation": 1}, arts)

    assert not result.published
    assert 'namespaces "no-such-ns" not found' in result.detail
    assert "ConfigMap no-such-ns/slurm-config-extra" in result.detail
    fake.reset_log()  # a namespace the shipped Role does not cover, on purpose: keep it out of the RBAC check


# ----- the pipeline's publish protocol: manifest + file bytes ---------------------------------------------------


def render_and_store(graph: TopologyGraph) -> tuple[Any, Any]:
    from memory_stores import MemoryArtifactStore, MemoryGraphStore

    from topocast.app.render import render_generation

    graphs = MemoryGraphStore()
    graphs.write_if_changed(graph, expected_generation=None)
    return graphs, render_generation(graphs, MemoryArtifactStore(), None, ALL)


def test_publish_stage_files_with_graph_source_match_by_instance_id(fake: FakeKubeApiServer) -> None:
    from memory_stores import MemoryPublishState

    from topocast.app.publish import publish_manifest

    graph = make_graph(12)
    for i, node in enumerate(graph.nodes):  # Kubernetes names differ from the graph's: only the ID links them
        fake.add_node(f"ip-10-1-0-{i}", {HOST: f"ip-10-1-0-{i}"}, f"aws:///us-east-1a/{node.id}")
    graphs, rendered = render_and_store(graph)
    publisher = make_publisher(fake, graph_source=lambda generation: graphs.get(generation).graph)

    outcome = publish_manifest(
        rendered.manifest, rendered.files, [publisher], graphs=graphs, state=MemoryPublishState()
    )

    assert outcome.published, outcome.detail
    result = outcome.results["kubernetes"]
    assert labels_of(fake, "ip-10-1-0-11")[f"{TIER}0"] == "leaf-0"
    assert "node/ip-10-1-0-11" in result.written
    assert "kueue.x-k8s.io/v1beta2 Topology topocast" in result.written
    again = publisher.publish(rendered.manifest, rendered.files)
    assert again.published and not again.written
    assert "12 node(s): labels already current" in again.skipped


def test_publish_stage_files_without_graph_match_by_name_and_say_so(fake: FakeKubeApiServer) -> None:
    graph = make_graph(6)
    add_cluster_nodes(fake, graph)
    _, rendered = render_and_store(graph)

    result = make_publisher(fake).publish(rendered.manifest, rendered.files)

    assert result.published, result.detail
    assert result.report.matched_by == {"name": 6}
    assert any("carries no instance IDs" in w for w in result.report.warnings)
    assert labels_of(fake, "gpu-0005")[DOMAIN] == "nvl-0"


def test_corrupt_or_missing_files_are_refused_before_any_request(fake: FakeKubeApiServer) -> None:
    _, rendered = render_and_store(make_graph(4))
    corrupt = {**rendered.files, "labels.json": rendered.files["labels.json"].replace(b"leaf-0", b"leaf-9")}
    missing = {k: v for k, v in rendered.files.items() if k != "kueue-topology.yaml"}
    publisher = make_publisher(fake)

    bad = publisher.publish(rendered.manifest, corrupt)
    gone = publisher.publish(rendered.manifest, missing)

    assert not bad.published and "labels.json (k8s-labels): sha256 does not match the manifest" in bad.detail
    assert not gone.published and "kueue-topology.yaml (kueue): listed in the manifest but not given" in gone.detail
    assert fake.requests == []


# ----- RBAC (keep last: it checks the requests every test above made) ---------------------------------------


def _rbac_rules() -> list[tuple[str | None, dict[str, Any]]]:
    docs = list(yaml.safe_load_all((REPO / "infra" / "k8s" / "rbac.yaml").read_text()))
    rules = []
    for doc in docs:
        if doc["kind"] in ("ClusterRole", "Role"):
            namespace = doc["metadata"].get("namespace") if doc["kind"] == "Role" else None
            rules += [(namespace, rule) for rule in doc["rules"]]
    bound = {(d["roleRef"]["kind"], d["roleRef"]["name"]) for d in docs if d["kind"].endswith("Binding")}
    assert bound == {("ClusterRole", "topocast-publisher"), ("Role", "topocast-publisher")}
    return rules


def _grants(namespace: str | None, rule: dict[str, Any], verb: str, req: LoggedRequest) -> bool:
    if namespace is not None and req.namespace != namespace:
        return False
    if req.group not in rule["apiGroups"] or req.resource not in rule["resources"] or verb not in rule["verbs"]:
        return False
    names = rule.get("resourceNames")
    return not names or (req.name in names and verb != "list")


def test_rbac_grants_exactly_what_the_publisher_used(fake: FakeKubeApiServer) -> None:
    # One more run through every code path that talks to the API, so this test also stands alone:
    # creates, a shrink (deletes HyperNodes), a 409 re-read, and immutable levels (delete + create).
    graph = make_graph(32)
    add_cluster_nodes(fake, graph)
    publisher = make_publisher(fake)
    assert publisher.run(artifacts(graph)).ok
    fake.inject(
        None,
        1,
        match=lambda r: r.method == "PATCH" and r.name == "spine-0",
        action=lambda s: s.touch(VOLCANO_HYPERNODE, "spine-0"),
    )
    for group in ("kueue.x-k8s.io", "kai.scheduler"):
        fake.inject(
            422,
            1,
            match=lambda r, g=group: r.method == "PATCH" and r.group == g,
            message="spec.levels: field is immutable",
        )
    assert publisher.run(artifacts(make_graph(16, tiers=2))).ok
    requests = [*SEEN, *fake.requests]

    rules = _rbac_rules()
    used: set[int] = set()
    for req in requests:
        if req.is_discovery:  # system:discovery grants these to every authenticated user
            assert req.method == "GET" and req.path.split("/")[1] in ("api", "apis", "version"), req.path
            continue
        for verb in (req.verb, *req.implied_verbs):
            granting = [i for i, (ns, rule) in enumerate(rules) if _grants(ns, rule, verb, req)]
            assert granting, f"rbac.yaml does not allow {verb} {req.group}/{req.resource} {req.namespace}/{req.name}"
            used.update(granting)
    verbs_used = {
        (i, verb)
        for req in requests
        if not req.is_discovery
        for verb in (req.verb, *req.implied_verbs)
        for i, (ns, rule) in enumerate(rules)
        if _grants(ns, rule, verb, req)
    }
    for i, (_ns, rule) in enumerate(rules):
        for verb in rule["verbs"]:
            assert (i, verb) in verbs_used, f"rbac.yaml grants {verb} on {rule['resources']} but nothing used it"
    assert used == set(range(len(rules)))
