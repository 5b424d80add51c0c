"""The publish use case counts what the Kubernetes publisher reports: a hand edit found and repaired
is the ``Drift`` metric (CloudWatch EMF name ``Drift``), through the same Metrics port as every
other count."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from k8s_fake_apiserver import NODES, FakeKubeApiServer
from memory_stores import MemoryArtifactStore, MemoryGraphStore, MemoryPublishState
from test_k8s_publisher import TIER, add_cluster_nodes, make_graph, make_publisher

from topocast.app import metrics as m
from topocast.app.metrics import MetricCounts
from topocast.app.publish import publish
from topocast.app.render import render_generation
from topocast.aws.metrics import EMF_NAMES
from topocast.ports.protocols import PublishPorts


class NoOverride:
    def allowed_generation(self) -> str | None:
        return None


@pytest.fixture
def fake() -> Iterator[FakeKubeApiServer]:
    with FakeKubeApiServer(token="test-token") as server:
        yield server


def ports(fake: FakeKubeApiServer, graphs: MemoryGraphStore, metrics: MetricCounts) -> PublishPorts:
    artifacts = MemoryArtifactStore()
    render_generation(graphs, artifacts, None, ["k8s-labels", "slurm-tree"])
    publisher = make_publisher(fake, graph_source=lambda g: graphs.get(g).graph)
    return PublishPorts(
        cluster="c1",
        graphs=graphs,
        artifacts=artifacts,
        publish_state=MemoryPublishState(),
        publishers=lambda: [publisher],
        override=NoOverride(),
        guard_max_loss=0.10,
        metrics=metrics,
    )


def test_a_drifted_publish_counts_drift_through_the_metrics_port(fake: FakeKubeApiServer) -> None:
    graphs = MemoryGraphStore()
    graph = make_graph(8)
    add_cluster_nodes(fake, graph)
    first = graphs.write_if_changed(graph, expected_generation=None).generation
    counts = MetricCounts()
    assert publish(ports(fake, graphs, counts), first).detail["action"] == "published"
    assert (counts.publishes, counts.drift, counts.nodes_patched) == (1, 0, 8)

    def edit(node: dict[str, Any]) -> None:  # kubectl label --overwrite on two nodes
        node["metadata"]["labels"][f"{TIER}0"] = "leaf-99"

    for name in ("gpu-0001", "gpu-0006"):
        obj = fake.get(NODES, name)
        assert obj is not None
        edit(obj)
        fake.put(NODES, obj, manager="kubectl-label")
    # fresh ports: no published record, so the use case publishes generation 1 again (a redelivery)
    counts = MetricCounts()
    assert publish(ports(fake, graphs, counts), first).detail["action"] == "published"
    assert (counts.publishes, counts.drift, counts.nodes_patched) == (1, 2, 2)
    assert (EMF_NAMES[m.DRIFT], EMF_NAMES[m.PUBLISHED_NODES_PATCHED]) == ("Drift", "NodesPatched")
