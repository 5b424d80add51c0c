"""Node label publishing degrades per node: a node the API server refuses (one node pool's admission policy,
a validation error, endless conflicts) is reported with the server's Status and every other node is still
labelled in the same publish; only an outage (5xx, 401, 429 after its retries, connection errors) stops it,
and the retry of a stopped publish starts with the nodes not done yet. All against the fake API server
through the real client."""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cli_runner import invoke
from k8s_fake_apiserver import KUEUE_TOPOLOGY, NODES, FakeKubeApiServer
from memory_stores import MemoryArtifactStore, MemoryGraphStore, MemoryPublishState
from test_k8s_publish_cli import kubeconfig
from test_k8s_publisher import TIER, add_cluster_nodes, artifacts, make_graph, node_patches

from topocast.app import metrics as m
from topocast.app.metrics import MetricCounts
from topocast.app.publish import publish
from topocast.app.render import render_generation
from topocast.aws.metrics import EMF_NAMES
from topocast.k8s.client import ClientSettings, K8sConnection, build_client
from topocast.k8s.labels import NodePatch, NodeRefusal, rotated
from topocast.model.graph import dump_graph
from topocast.ports.protocols import PublishPorts
from topocast.publish.kubernetes import K8sPublishResult, KubernetesPublisher, KubernetesPublisherConfig

WEBHOOK = 'admission webhook "pool-guard.example.com" denied the request: node pool h100-reserved is frozen'
REFUSED = [f"gpu-{i:04d}" for i in range(16)]  # gpu-0000 .. gpu-0015: the frozen pool, first in name order
HEALTHY = [f"gpu-{i:04d}" for i in range(16, 26)]  # gpu-0016 .. gpu-0025


class Starts(random.Random):
    """An rng whose ``randrange`` gives the publisher these rotation starts, in turn (then 0)."""

    def __init__(self, *starts: int) -> None:
        super().__init__(0)
        self.starts = list(starts)

    def randrange(self, *args: Any, **kwargs: Any) -> int:  # type: ignore[override]
        return self.starts.pop(0) if self.starts else 0


@pytest.fixture
def fake() -> Iterator[FakeKubeApiServer]:
    with FakeKubeApiServer(token="test-token") as server:
        yield server


def publisher(
    fake: FakeKubeApiServer,
    rng: random.Random | None = None,
    sleeps: list[float] | None = None,
    client: dict[str, Any] | None = None,
    **config: Any,
) -> KubernetesPublisher:
    settings = ClientSettings(**{"qps": 0, "backoff_initial": 0.01, "backoff_max": 0.02, **(client or {})})
    cfg = KubernetesPublisherConfig(
        connection=K8sConnection(endpoint=fake.url, token="test-token"), client=settings, **config
    )

    def sleep(seconds: float) -> None:
        if sleeps is not None:
            sleeps.append(seconds)
        time.sleep(seconds)

    return KubernetesPublisher(
        cfg, client_factory=lambda: build_client(cfg.connection, cfg.client, sleep=sleep), rng=rng or Starts()
    )


def labelled(fake: FakeKubeApiServer, name: str) -> bool:
    obj = fake.get(NODES, name)
    assert obj is not None
    return f"{TIER}0" in (obj["metadata"].get("labels") or {})


def patch_requests(fake: FakeKubeApiServer, name: str) -> int:
    return sum(1 for r in fake.calls("PATCH", resource="nodes") if r.name == name)


# ----- refusals do not stop the others --------------------------------------------------------------------


@pytest.mark.parametrize("concurrency", [1, 8])
def test_a_refusing_node_pool_first_in_name_order_does_not_stop_the_healthy_nodes(
    fake: FakeKubeApiServer, concurrency: int
) -> None:
    graph = make_graph(26)
    add_cluster_nodes(fake, graph)
    fake.refuse(REFUSED, 403, WEBHOOK)
    pub = publisher(fake, concurrency=concurrency)  # start 0: the refused pool comes first, as reproduced

    result = pub.publish({"generation": 7}, artifacts(graph))

    assert isinstance(result, K8sPublishResult)
    report = result.report
    assert all(labelled(fake, n) for n in HEALTHY), report.summary()
    assert not any(labelled(fake, n) for n in REFUSED)
    assert sorted(report.nodes_patched) == HEALTHY
    assert list(report.nodes_refused) == REFUSED
    assert report.nodes_refused["gpu-0003"] == NodeRefusal(403, "Forbidden", WEBHOOK)
    assert report.nodes_failed == {} and report.nodes_not_attempted == [] and report.errors == []
    assert all(patch_requests(fake, n) == 1 for n in REFUSED)  # a refusal is not resent
    # done with refusals: published (a retry would get the same answer), counted, and said in one line
    assert result.published and report.state == "done with refusals"
    assert result.metrics["NodesRefused"] == 16 and result.metrics["NodesPatched"] == 10
    assert report.refusals() == [("403 Forbidden", REFUSED, WEBHOOK)]
    assert result.detail.startswith("done with refusals: ")
    assert f"refused 403 Forbidden: 16 node(s) gpu-[0000-0015] (gpu-0000: {WEBHOOK})" in result.detail
    assert "node/gpu-0000: refused, 403 Forbidden: " + WEBHOOK in result.skipped
    # the new Topology levels are not held back by a pool that refuses for good
    assert report.objects_held == [] and fake.get(KUEUE_TOPOLOGY, "topocast") is not None


def test_three_publishes_patch_each_refused_node_once_each_and_never_a_healthy_one_again(
    fake: FakeKubeApiServer,
) -> None:
    graph = make_graph(26)
    add_cluster_nodes(fake, graph)
    fake.refuse(REFUSED, 403, WEBHOOK)
    pub = publisher(fake, concurrency=8)

    reports = [pub.run(artifacts(graph, ("k8s-labels",))) for _ in range(3)]

    assert [sorted(r.nodes_patched) for r in reports] == [HEALTHY, [], []]
    assert [len(r.nodes_refused) for r in reports] == [16, 16, 16]
    assert all(patch_requests(fake, n) == 3 for n in REFUSED)
    assert all(patch_requests(fake, n) == 1 for n in HEALTHY)


def test_a_conflict_is_resent_and_an_endless_one_is_a_refusal(fake: FakeKubeApiServer) -> None:
    graph = make_graph(4)
    add_cluster_nodes(fake, graph)
    fake.inject(409, 2, match=lambda r: r.method == "PATCH" and r.name == "gpu-0001", message="conflict")
    fake.inject(409, None, match=lambda r: r.method == "PATCH" and r.name == "gpu-0002", message="still conflict")

    report = publisher(fake, max_conflict_retries=3, concurrency=1).run(artifacts(graph, ("k8s-labels",)))

    assert report.nodes_patched == ["gpu-0000", "gpu-0001", "gpu-0003"]
    assert report.nodes_refused == {"gpu-0002": NodeRefusal(409, "Conflict", "still conflict")}
    assert (patch_requests(fake, "gpu-0001"), patch_requests(fake, "gpu-0002")) == (3, 4)


def test_a_validation_refusal_and_a_deleted_node_are_their_own_classes(fake: FakeKubeApiServer) -> None:
    graph = make_graph(6)
    add_cluster_nodes(fake, graph)
    vap = "ValidatingAdmissionPolicy 'pool-labels' with binding 'pool-labels' denied request: labels are frozen"
    fake.refuse(["gpu-0004", "gpu-0005"], 422, vap)
    fake.inject(None, 1, match=lambda r: r.method == "PATCH", action=lambda f: f.delete(NODES, "gpu-0001"))

    report = publisher(fake, concurrency=1).run(artifacts(graph, ("k8s-labels",)))

    assert report.nodes_patched == ["gpu-0000", "gpu-0002", "gpu-0003"]
    assert report.refusals() == [
        ("422 Invalid", ["gpu-0004", "gpu-0005"], vap),
        ("404 NotFound (deleted since the LIST)", ["gpu-0001"], ""),
    ]
    assert report.counts()["nodes_refused"] == 2 and report.counts()["nodes_gone"] == 1


def test_a_server_dry_run_reports_the_refusals_an_admission_policy_would_make(fake: FakeKubeApiServer) -> None:
    graph = make_graph(26)
    add_cluster_nodes(fake, graph)
    fake.refuse(REFUSED, 403, WEBHOOK)

    report = publisher(fake, dry_run="server").run(artifacts(graph, ("k8s-labels",)))

    assert list(report.nodes_refused) == REFUSED and sorted(report.nodes_patched) == HEALTHY
    assert not any(labelled(fake, n) for n in (*REFUSED, *HEALTHY))


# ----- outages stop the publish; the retry starts with what is not done -------------------------------------


def test_a_503_outage_stops_early_and_the_next_attempt_starts_with_the_nodes_not_done(
    fake: FakeKubeApiServer,
) -> None:
    graph = make_graph(20)
    add_cluster_nodes(fake, graph)
    fake.inject(503, None, skip=6, match=lambda r: r.method == "PATCH" and r.resource == "nodes")
    pub = publisher(fake, client={"max_attempts": 2}, concurrency=1, max_consecutive_failures=3)

    first = pub.publish({"generation": 3}, artifacts(graph, ("k8s-labels",)))

    report = first.report
    assert not first.published and report.state == "incomplete"
    assert report.nodes_patched == [f"gpu-{i:04d}" for i in range(6)]
    assert list(report.nodes_failed) == ["gpu-0006", "gpu-0007", "gpu-0008"]
    assert report.nodes_failed["gpu-0006"] == "503 ServiceUnavailable: injected fault"
    assert report.nodes_not_attempted == [f"gpu-{i:04d}" for i in range(9, 20)]
    assert report.nodes_refused == {}
    assert report.errors == [
        "node labels stopped by an outage: 3 node PATCH outages in a row, the last 503 ServiceUnavailable: "
        "injected fault; 11 node(s) not attempted (the next publish retries them and the failed ones)"
    ]
    assert first.detail.startswith("INCOMPLETE: ")
    fake.clear_faults()
    fake.reset_log()

    second = pub.run(artifacts(graph, ("k8s-labels",)))

    assert second.state == "ok"
    assert [r.name for r in node_patches(fake)] == [f"gpu-{i:04d}" for i in range(6, 20)]


def test_a_node_pool_failing_with_500_at_the_head_of_the_order_cannot_starve_the_rest(
    fake: FakeKubeApiServer,
) -> None:
    """A broken webhook bound to one pool answers 500 for its nodes only: an outage by its code, so it
    stops the publish, but each retry starts elsewhere and the healthy nodes get done."""
    graph = make_graph(18)
    add_cluster_nodes(fake, graph)
    broken = {f"gpu-{i:04d}" for i in range(8)}
    message = 'Internal error occurred: failed calling webhook "pool-guard.example.com": context deadline exceeded'
    fake.inject(500, None, match=lambda r: r.method == "PATCH" and r.name in broken, message=message)
    # attempt 1 starts at the broken pool (index 0), attempt 2 at index 13 of the 18 pending, attempt 3
    # at index 8 of the 13 still pending (gpu-0008 .. gpu-0012 and the broken eight)
    pub = publisher(fake, Starts(0, 13, 8), client={"max_attempts": 1}, concurrency=1, max_consecutive_failures=5)

    reports = [pub.run(artifacts(graph, ("k8s-labels",))) for _ in range(3)]

    assert [r.nodes_patched for r in reports] == [
        [],
        [f"gpu-{i:04d}" for i in range(13, 18)],
        [f"gpu-{i:04d}" for i in range(8, 13)],
    ]
    assert all(labelled(fake, f"gpu-{i:04d}") for i in range(8, 18))
    assert all(r.state == "incomplete" for r in reports)  # the broken pool is still an outage: retried


def test_a_401_stops_at_once(fake: FakeKubeApiServer) -> None:
    graph = make_graph(10)
    add_cluster_nodes(fake, graph)
    fake.inject(401, None, match=lambda r: r.method == "PATCH", message="Unauthorized")

    report = publisher(fake, concurrency=1).run(artifacts(graph, ("k8s-labels",)))

    assert report.nodes_failed == {"gpu-0000": "401 Unauthorized: Unauthorized"}
    assert len(report.nodes_not_attempted) == 9 and patch_requests(fake, "gpu-0001") == 0
    assert "credentials are the same for every node" in report.errors[0]


def test_429_retry_after_is_honoured_and_beyond_its_budget_is_an_outage(fake: FakeKubeApiServer) -> None:
    graph = make_graph(26)
    add_cluster_nodes(fake, graph)
    fake.refuse(REFUSED, 403, WEBHOOK)
    fake.inject(429, 2, retry_after=0.2, match=lambda r: r.method == "PATCH" and r.name == "gpu-0020")
    sleeps: list[float] = []

    report = publisher(fake, sleeps=sleeps, concurrency=1).run(artifacts(graph, ("k8s-labels",)))

    assert sleeps == [0.2, 0.2]  # the server's Retry-After, twice, then the PATCH went through
    assert sorted(report.nodes_patched) == HEALTHY and len(report.nodes_refused) == 16
    assert report.api_calls["throttled"] == 2

    fake.clear_faults()
    add_cluster_nodes(fake, graph)  # every node unlabelled again
    fake.inject(429, None, retry_after=0.01, match=lambda r: r.method == "PATCH")
    stuck = publisher(fake, client={"max_attempts": 2}, concurrency=1, max_consecutive_failures=2).run(
        artifacts(graph, ("k8s-labels",))
    )
    assert stuck.nodes_failed == {
        "gpu-0000": "429 TooManyRequests: injected fault",
        "gpu-0001": "429 TooManyRequests: injected fault",
    }
    assert stuck.nodes_not_attempted == [f"gpu-{i:04d}" for i in range(2, 26)] and stuck.state == "incomplete"


def test_rotated_starts_at_the_given_index_in_name_order_and_wraps() -> None:
    patches = [NodePatch(n, n, {}, ()) for n in ("gpu-3", "gpu-1", "gpu-4", "gpu-2", "gpu-5")]

    assert [p.node for p in rotated(patches, 3)] == ["gpu-4", "gpu-5", "gpu-1", "gpu-2", "gpu-3"]
    assert [p.node for p in rotated(patches, 7)] == ["gpu-3", "gpu-4", "gpu-5", "gpu-1", "gpu-2"]
    assert rotated([], 4) == []


# ----- what the pipeline and the command line make of it ----------------------------------------------------


class NoOverride:
    def allowed_generation(self) -> str | None:
        return None


def test_the_publish_use_case_is_done_with_refusals_counts_them_and_does_not_retry(
    fake: FakeKubeApiServer,
) -> None:
    graphs = MemoryGraphStore()
    graph = make_graph(26)
    add_cluster_nodes(fake, graph)
    fake.refuse(REFUSED, 403, WEBHOOK)
    generation = graphs.write_if_changed(graph, expected_generation=None).generation
    artifacts_store = MemoryArtifactStore()
    render_generation(graphs, artifacts_store, None, ["k8s-labels", "slurm-tree"])
    pub = publisher(fake)
    counts = MetricCounts()
    ports = PublishPorts(
        cluster="c1",
        graphs=graphs,
        artifacts=artifacts_store,
        publish_state=MemoryPublishState(),
        publishers=lambda: [pub],
        override=NoOverride(),
        guard_max_loss=0.10,
        metrics=counts,
    )

    outcome = publish(ports, generation)

    assert outcome.status == "done" and outcome.detail["action"] == "published"
    assert outcome.detail["refused"] == 16
    assert (counts[m.PUBLISHES], counts[m.NODES_REFUSED], counts[m.PUBLISH_INCOMPLETE]) == (1, 16, 0)
    assert m.REPORTED_AS[m.NODES_REFUSED] == EMF_NAMES[m.NODES_REFUSED] == "NodesRefused"
    assert publish(ports, generation).reason == f"generation {generation} is already published"


def test_the_cli_prints_one_line_per_refusal_class_and_exits_3(fake: FakeKubeApiServer, tmp_path: Path) -> None:
    graph = make_graph(26)
    add_cluster_nodes(fake, graph)
    vap = "ValidatingAdmissionPolicy 'pool-labels' denied request: labels are frozen"
    fake.refuse(REFUSED, 403, WEBHOOK)
    fake.refuse(["gpu-0024", "gpu-0025"], 422, vap)
    (tmp_path / "g.json").write_text(dump_graph(graph))

    result = invoke(
        [
            "publish",
            "--graph",
            str(tmp_path / "g.json"),
            "--kubeconfig",
            str(kubeconfig(tmp_path, fake.url, "test-token")),
            "-f",
            "k8s-labels",
        ]
    )

    assert result.exit_code == 3, result.output
    lines = [line for line in result.stderr.splitlines() if line.startswith("topocast: refused: ")]
    assert lines == [
        f"topocast: refused: 403 Forbidden: 16 node(s) gpu-[0000-0015]; gpu-0000: {WEBHOOK}",
        f"topocast: refused: 422 Invalid: 2 node(s) gpu-[0024-0025]; gpu-0024: {vap}",
    ]
    assert all(labelled(fake, f"gpu-{i:04d}") for i in range(16, 24))
    assert "Traceback" not in result.output
