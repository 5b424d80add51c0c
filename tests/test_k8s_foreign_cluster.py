"""Issue 28: publish only to the cluster the graph describes.

A kubeconfig pointing at another cluster (one that holds none, or too few, of the graph's nodes) is
refused before anything is applied: no Topology, HyperNode or ConfigMap lands there, the publisher
reports it (the publish function retries, the published record does not move) and ``topocast
publish`` says so in one line and exits 2. The share defaults to the guard's complement (90 %).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from k8s_fake_apiserver import CONFIGMAPS, KAI_TOPOLOGY, KUEUE_TOPOLOGY, NODES, VOLCANO_HYPERNODE, FakeKubeApiServer
from test_k8s_publish_cli import kubeconfig, run
from test_k8s_publisher import HOST, add_cluster_nodes, artifacts, make_graph, make_publisher

from topocast.config import Settings
from topocast.model.graph import dump_graph
from topocast.publish.kubernetes import from_settings

WRITES = {"POST", "PUT", "PATCH", "DELETE"}


@pytest.fixture
def fake() -> Iterator[FakeKubeApiServer]:
    with FakeKubeApiServer(token="test-token") as server:
        yield server


def add_other_nodes(fake: FakeKubeApiServer, n: int) -> None:
    """Nodes of another cluster: other names, other instance IDs."""
    for i in range(n):
        fake.add_node(f"other-{i:03d}", {HOST: f"other-{i:03d}"}, provider_id=f"aws:///us-east-1a/i-{i + 9000:017x}")


def objects_in(fake: FakeKubeApiServer) -> int:
    return sum(len(fake.list(kind)) for kind in (KUEUE_TOPOLOGY, KAI_TOPOLOGY, VOLCANO_HYPERNODE, CONFIGMAPS))


def test_a_cluster_holding_none_of_the_graph_is_refused_and_nothing_is_applied(fake: FakeKubeApiServer) -> None:
    add_other_nodes(fake, 20)
    result = make_publisher(fake).publish({"generation": 4}, artifacts(make_graph(40)))

    assert not result.published
    assert result.report.refused_cluster is not None
    assert "the cluster holds 0 of the graph's 40 nodes (0%, fewer than 90%)" in result.report.refused_cluster
    assert "--min-node-share 0" in result.report.refused_cluster and "min_node_share" in result.report.refused_cluster
    assert {r.method for r in fake.requests} - {"GET"} == set()  # not one write
    assert objects_in(fake) == 0
    assert all(HOST in n["metadata"]["labels"] and len(n["metadata"]["labels"]) == 1 for n in fake.list(NODES))


@pytest.mark.parametrize(("held", "refused"), [(36, False), (35, True)])
def test_the_share_is_ninety_percent_of_the_graphs_nodes(fake: FakeKubeApiServer, held: int, refused: bool) -> None:
    graph = make_graph(40)
    add_cluster_nodes(fake, graph.model_copy(update={"nodes": graph.nodes[:held]}))
    result = make_publisher(fake).publish({"generation": 4}, artifacts(graph))

    assert (result.report.refused_cluster is not None) is refused
    assert result.published is not refused
    assert (objects_in(fake) == 0) is refused
    if refused:
        assert "holds 35 of the graph's 40 nodes" in str(result.report.refused_cluster)


def test_the_override_publishes_anyway_and_a_client_dry_run_only_warns(fake: FakeKubeApiServer) -> None:
    add_other_nodes(fake, 3)
    arts = artifacts(make_graph(8))
    plan = make_publisher(fake, dry_run="client").publish({"generation": 1}, arts)
    assert plan.report.refused_cluster is None
    assert any("holds 0 of the graph's 8 nodes" in w for w in plan.report.warnings)

    forced = make_publisher(fake, min_node_share=0).publish({"generation": 1}, arts)
    assert forced.published and len(forced.report.nodes_missing_in_cluster) == 8
    assert fake.list(KUEUE_TOPOLOGY)  # applied: the operator asked for it


def test_the_function_takes_the_guards_share() -> None:
    connection = {"endpoint": "https://x", "token": "t"}
    options = {"connection": connection}
    loose = Settings(cluster="c1", publishers=["kubernetes"], guard_max_loss=0.3, k8s_options=options)
    assert from_settings(loose, lambda g: make_graph(1)).config.min_node_share == pytest.approx(0.7)
    given = loose.model_copy(update={"k8s_options": {"connection": connection, "min_node_share": 0.5}})
    assert from_settings(given, lambda g: make_graph(1)).config.min_node_share == 0.5


def test_cli_publish_to_a_foreign_cluster_is_one_line_exit_2_and_nothing_applied(
    tmp_path: Path,
) -> None:
    with FakeKubeApiServer(token="cli-token") as fake:
        add_other_nodes(fake, 12)
        (tmp_path / "g.json").write_text(dump_graph(make_graph(16)))
        kc = kubeconfig(tmp_path, fake.url)

        refused = run("--graph", tmp_path / "g.json", "--kubeconfig", kc)

        assert refused.exit_code == 2, refused.output
        lines = refused.stderr.strip().splitlines()
        assert len(lines) == 1, refused.stderr
        assert lines[0].startswith("topocast: error: the cluster holds 0 of the graph's 16 nodes"), lines[0]
        assert "nothing was applied" in lines[0] and "--min-node-share 0" in lines[0]
        assert {r.method for r in fake.requests} & WRITES == set() and objects_in(fake) == 0

        forced = run("--graph", tmp_path / "g.json", "--kubeconfig", kc, "--min-node-share", "0")
        assert forced.exit_code == 0, forced.output
        assert "nodes missing in cluster=16" in forced.stderr and fake.list(KUEUE_TOPOLOGY)


def test_the_publish_stage_records_nothing_and_retries(fake: FakeKubeApiServer) -> None:
    from memory_stores import MemoryArtifactStore, MemoryGraphStore, MemoryPublishState

    from topocast.app.publish import publish_manifest
    from topocast.app.render import render_generation

    add_other_nodes(fake, 10)
    graphs, rendered, state = MemoryGraphStore(), MemoryArtifactStore(), MemoryPublishState()
    graphs.write_if_changed(make_graph(40), expected_generation=None)
    out = render_generation(graphs, rendered, None, ["k8s-labels", "kueue", "volcano"])
    publisher = make_publisher(fake, graph_source=lambda g: graphs.get(g).graph)

    outcome = publish_manifest(out.manifest, out.files, [publisher], graphs=graphs, state=state)

    assert not outcome.published and not outcome.held  # incomplete: the function's answer is retry
    assert "holds 0 of the graph's 40 nodes" in outcome.detail
    assert state.published is None and objects_in(fake) == 0
