"""Bounded, polite publishing: the client's QPS limit keeps a rate-limited server from answering 429 at all,
and without a client limit every 429 is waited out (Retry-After) with each node still patched once."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from k8s_fake_apiserver import NODES, FakeKubeApiServer
from test_k8s_publisher import TIER, add_cluster_nodes, artifacts, make_graph, make_publisher


@pytest.fixture
def limited() -> Iterator[FakeKubeApiServer]:
    # 40 requests per second, 10 back to back: a small APF share
    with FakeKubeApiServer(token="test-token", rate_limit=(40.0, 10)) as server:
        yield server


def accepted_node_patches(fake: FakeKubeApiServer) -> list[str]:
    return sorted(str(r.name) for r in fake.calls("PATCH", resource="nodes") if r.status == 200)


def test_a_fixed_client_limit_below_the_servers_sees_no_429(limited: FakeKubeApiServer) -> None:
    graph = make_graph(24)
    add_cluster_nodes(limited, graph)
    publisher = make_publisher(limited, client={"qps": 30, "burst": 5, "adaptive": False}, concurrency=8)

    report = publisher.run(artifacts(graph, ("k8s-labels",)))

    assert report.ok and limited.throttled == 0 and report.api_calls["throttled"] == 0
    assert accepted_node_patches(limited) == sorted(n.name for n in graph.nodes)
    # 25 requests, 5 of them in the burst: the other 20 at 30 per second
    assert report.api_calls["waited_s"] >= 20 / 30 - 0.1


def test_without_a_client_limit_429s_are_waited_out_and_each_node_is_patched_once(
    limited: FakeKubeApiServer,
) -> None:
    graph = make_graph(24)
    add_cluster_nodes(limited, graph)
    sleeps: list[float] = []
    publisher = make_publisher(limited, sleeps, client={"qps": 0, "retry_after_max": 0.2}, concurrency=8)

    report = publisher.run(artifacts(graph, ("k8s-labels",)))

    assert report.ok, report.summary()
    assert limited.throttled > 0 and report.api_calls["throttled"] == limited.throttled
    assert sleeps.count(0.2) == limited.throttled  # Retry-After: 1, capped at retry_after_max
    assert accepted_node_patches(limited) == sorted(n.name for n in graph.nodes)
    assert all(f"{TIER}0" in (limited.get(NODES, n.name) or {})["metadata"]["labels"] for n in graph.nodes)


def test_an_unreachable_server_costs_one_requests_retries_not_every_requests() -> None:
    import socket

    from topocast.k8s.client import ClientSettings, K8sConnection, build_client
    from topocast.publish.kubernetes import KubernetesPublisher, KubernetesPublisherConfig

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    settings = ClientSettings(qps=0, backoff_initial=0.01, backoff_max=0.02, max_attempts=4)
    cfg = KubernetesPublisherConfig(
        connection=K8sConnection(endpoint=f"http://127.0.0.1:{port}", token="t"), client=settings
    )

    report = KubernetesPublisher(cfg, client_factory=lambda: build_client(cfg.connection, cfg.client)).run(
        artifacts(make_graph(8))
    )

    assert not report.ok and len(report.errors) == 5  # node LIST, three discoveries, the ConfigMap read
    assert report.api_calls["requests"] == 4  # the first request's 4 tries; the others never hit the network
    assert sum("API server unreachable" in e for e in report.errors) == 4
