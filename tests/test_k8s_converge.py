"""Converge, don't trust: hand edits of every object kind are found, counted as drift and repaired;
garbage collection checks ownership on the object; dry runs write nothing; error bodies of any JSON
media type still give a proper Status."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest
from k8s_fake_apiserver import (
    CONFIGMAPS,
    KAI_TOPOLOGY,
    KUEUE_TOPOLOGY,
    NODES,
    VOLCANO_HYPERNODE,
    FakeKubeApiServer,
    ResourceType,
)
from lightkube.core.exceptions import ApiError
from test_k8s_publisher import HOST, MANAGED, TIER, add_cluster_nodes, artifacts, make_graph, make_publisher

from topocast.k8s.client import ClientSettings, ResilientTransport
from topocast.renderers.slinky import SPEC_ANNOTATION

SHA = "topocast.dev/manifest-sha256"


@pytest.fixture
def fake() -> Iterator[FakeKubeApiServer]:
    with FakeKubeApiServer(token="test-token") as server:
        yield server


def hand_edit(fake: FakeKubeApiServer, rtype: ResourceType, name: str, edit: Any, namespace: str | None = None) -> None:
    """What ``kubectl edit`` does: read, change, write back as another field manager."""
    obj = fake.get(rtype, name, namespace)
    assert obj is not None, name
    edit(obj)
    fake.put(rtype, obj, manager="kubectl-edit")


def published(fake: FakeKubeApiServer, n: int = 32, **config: Any) -> Any:
    graph = make_graph(n)
    add_cluster_nodes(fake, graph)
    publisher = make_publisher(fake, **config)
    first = publisher.run(artifacts(graph), graph=graph)
    assert first.ok and first.drift == 0, first.summary()
    return graph, publisher


# ----- drift, per object kind ---------------------------------------------------------------------------


def test_a_hand_edited_node_label_is_repaired_and_counted(fake: FakeKubeApiServer) -> None:
    graph, publisher = published(fake)

    def edit(node: dict[str, Any]) -> None:
        node["metadata"]["labels"][f"{TIER}0"] = "leaf-99"  # owned: wrong value
        del node["metadata"]["labels"][f"{TIER}1"]  # owned: removed
        node["metadata"]["labels"]["team"] = "ml"  # foreign: must survive

    hand_edit(fake, NODES, "gpu-0005", edit)
    fake.reset_log()

    report = publisher.run(artifacts(graph))

    assert report.ok and report.nodes_drifted == ["gpu-0005"] and report.drift == 1
    assert report.nodes_patched == ["gpu-0005"]
    labels = fake.get(NODES, "gpu-0005")["metadata"]["labels"]  # type: ignore[index]
    assert (labels[f"{TIER}0"], labels[f"{TIER}1"], labels["team"]) == ("leaf-0", "spine-0", "ml")
    assert len(fake.calls("PATCH", resource="nodes")) == 1


@pytest.mark.parametrize("rtype", [KUEUE_TOPOLOGY, KAI_TOPOLOGY], ids=["kueue", "kai"])
def test_hand_edited_topology_levels_are_repaired_although_the_hash_annotation_matches(
    fake: FakeKubeApiServer, rtype: ResourceType
) -> None:
    graph, publisher = published(fake)
    before = fake.get(rtype, "topocast")
    assert before is not None
    hand_edit(fake, rtype, "topocast", lambda o: o["spec"]["levels"].pop(0))
    assert fake.get(rtype, "topocast")["metadata"]["annotations"][SHA] == before["metadata"]["annotations"][SHA]  # type: ignore[index]

    report = publisher.run(artifacts(graph))

    assert report.ok, report.summary()
    assert [label for label in report.objects_drifted if "Topology" in label and rtype.group in label]
    assert report.objects_drifted[next(k for k in report.objects_drifted if rtype.group in k)] == [".spec.levels"]
    assert fake.get(rtype, "topocast")["spec"] == before["spec"]  # type: ignore[index]


def test_hand_edited_hypernode_members_and_a_removed_label_are_repaired(fake: FakeKubeApiServer) -> None:
    graph, publisher = published(fake)
    before = fake.get(VOLCANO_HYPERNODE, "leaf-0")
    assert before is not None

    def edit(obj: dict[str, Any]) -> None:
        obj["spec"]["members"] = obj["spec"]["members"][:1]
        obj["spec"]["tier"] = 7

    hand_edit(fake, VOLCANO_HYPERNODE, "leaf-0", edit)
    hand_edit(fake, VOLCANO_HYPERNODE, "spine-0", lambda o: o["metadata"]["labels"].pop(MANAGED))

    report = publisher.run(artifacts(graph))

    assert report.ok, report.summary()
    drifted = {label.rsplit(" ", 1)[1]: fields for label, fields in report.objects_drifted.items()}
    assert drifted == {"leaf-0": [".spec.tier", ".spec.members"], "spine-0": [f".metadata.labels.{MANAGED}"]}
    assert fake.get(VOLCANO_HYPERNODE, "leaf-0")["spec"] == before["spec"]  # type: ignore[index]
    assert fake.get(VOLCANO_HYPERNODE, "spine-0")["metadata"]["labels"][MANAGED] == "topocast"  # type: ignore[index]
    assert report.drift == 2


def test_hand_edited_slinky_configmap_is_repaired_and_other_keys_stay(fake: FakeKubeApiServer) -> None:
    graph, publisher = published(fake)
    cm = fake.get(CONFIGMAPS, "slurm-config-extra", "slurm")
    assert cm is not None
    good = cm["data"]["topology.conf"]

    def edit(obj: dict[str, Any]) -> None:
        obj["data"]["topology.conf"] = "SwitchName=hand-made Nodes=gpu-0000\n"
        obj["data"]["gres.conf"] = "AutoDetect=nvml\n"  # someone else's key (Helm's configFiles)

    hand_edit(fake, CONFIGMAPS, "slurm-config-extra", edit, "slurm")

    report = publisher.run(artifacts(graph))

    assert report.ok
    assert list(report.objects_drifted.values()) == [[".data.topology.conf"]]
    data = fake.get(CONFIGMAPS, "slurm-config-extra", "slurm")["data"]  # type: ignore[index]
    assert data == {"topology.conf": good, "gres.conf": "AutoDetect=nvml\n"}


def test_hand_edited_slinky_node_annotation_is_drift_too(fake: FakeKubeApiServer) -> None:
    graph, publisher = published(fake, 16, slinky_node_annotations=True)
    from topocast.renderers.base import RenderOptions
    from topocast.renderers.slinky import node_annotations

    want = node_annotations(graph, RenderOptions())["gpu-0001"][SPEC_ANNOTATION]
    hand_edit(fake, NODES, "gpu-0001", lambda o: o["metadata"]["annotations"].update({SPEC_ANNOTATION: "topo:x"}))

    report = publisher.run(artifacts(graph), graph=graph)

    assert report.ok and report.nodes_drifted == ["gpu-0001"]
    assert fake.get(NODES, "gpu-0001")["metadata"]["annotations"][SPEC_ANNOTATION] == want  # type: ignore[index]


def test_nothing_edited_means_no_drift_and_no_writes(fake: FakeKubeApiServer) -> None:
    graph, publisher = published(fake)
    fake.reset_log()

    report = publisher.run(artifacts(graph))

    assert report.ok and report.drift == 0
    assert not [r for r in fake.requests if r.method in ("PATCH", "DELETE", "POST", "PUT")]


# ----- garbage collection trusts the object, not the selector --------------------------------------------


def test_gc_against_a_server_that_ignores_label_selectors_deletes_only_its_own(fake: FakeKubeApiServer) -> None:
    spec = {"tier": 1, "members": [{"type": "Node", "selector": {"exactMatch": {"name": "x"}}}]}
    fake.ignore_label_selector = True
    fake.put(VOLCANO_HYPERNODE, {"metadata": {"name": "volcano-discovered"}, "spec": spec})
    # labelled like ours by some other tool, but topocast never wrote it (no manifest annotation)
    fake.put(VOLCANO_HYPERNODE, {"metadata": {"name": "look-alike", "labels": {MANAGED: "topocast"}}, "spec": spec})
    graph = make_graph(32)
    add_cluster_nodes(fake, graph)
    publisher = make_publisher(fake)
    assert publisher.run(artifacts(make_graph(64), ("volcano",))).ok  # creates leaf-0..3 and spine-0
    fake.reset_log()

    report = publisher.run(artifacts(graph, ("volcano",)))  # leaf-2, leaf-3 are no longer desired

    assert report.ok, report.summary()
    assert sorted(r.name for r in fake.calls("DELETE")) == ["leaf-2", "leaf-3"]
    assert fake.get(VOLCANO_HYPERNODE, "volcano-discovered") is not None
    assert fake.get(VOLCANO_HYPERNODE, "look-alike") is not None
    warnings = " ".join(report.warnings)
    assert "look-alike" not in warnings  # never a candidate: not ours by its own metadata
    # each DELETE was preceded by a GET of that very object
    seq = [(r.method, r.name) for r in fake.requests if r.resource == "hypernodes" and r.name in ("leaf-2", "leaf-3")]
    assert seq == [("GET", "leaf-2"), ("DELETE", "leaf-2"), ("GET", "leaf-3"), ("DELETE", "leaf-3")]


def test_gc_rechecks_the_object_right_before_deleting(fake: FakeKubeApiServer) -> None:
    add_cluster_nodes(fake, make_graph(64))
    publisher = make_publisher(fake)
    assert publisher.run(artifacts(make_graph(64), ("volcano",))).ok

    def adopt(server: FakeKubeApiServer) -> None:  # between LIST and DELETE another tool takes leaf-3 over
        obj = server.get(VOLCANO_HYPERNODE, "leaf-3")
        assert obj is not None
        obj["metadata"]["labels"][MANAGED] = "someone-else"
        server.put(VOLCANO_HYPERNODE, obj, manager="other")

    fake.inject(None, 1, match=lambda r: r.method == "GET" and r.name == "leaf-2", action=adopt)

    report = publisher.run(artifacts(make_graph(32), ("volcano",)))

    assert [r.name for r in fake.calls("DELETE")] == ["leaf-2"]
    assert fake.get(VOLCANO_HYPERNODE, "leaf-3") is not None
    assert "leaf-3: not deleted" in " ".join(report.warnings)


def test_an_immutable_topology_topocast_did_not_create_is_never_deleted(fake: FakeKubeApiServer) -> None:
    add_cluster_nodes(fake, make_graph(16))
    foreign = {"metadata": {"name": "topocast"}, "spec": {"levels": [{"nodeLabel": "example.com/rack"}]}}
    fake.put(KUEUE_TOPOLOGY, foreign, manager="someone")
    fake.inject(422, 1, match=lambda r: r.method == "PATCH", message="spec.levels: Invalid value: field is immutable")

    report = make_publisher(fake).run(artifacts(make_graph(16), ("kueue",)))

    assert not report.ok and "topocast did not create it" in " ".join(report.errors)
    assert fake.calls("DELETE") == []
    assert fake.get(KUEUE_TOPOLOGY, "topocast")["spec"] == foreign["spec"]  # type: ignore[index]


# ----- dry runs ---------------------------------------------------------------------------------------------


def test_client_dry_run_reads_plans_and_writes_nothing(fake: FakeKubeApiServer) -> None:
    graph = make_graph(32)
    add_cluster_nodes(fake, graph)

    report = make_publisher(fake, dry_run="client").run(artifacts(graph))

    assert report.ok and report.dry_run == "client"
    assert {r.method for r in fake.requests} == {"GET"}
    assert (
        len(report.nodes_patched) == 32 and len(report.objects_applied) == 2 + 4 + 1
    )  # 2 Topologies, 4 HyperNodes, 1 ConfigMap
    assert report.node_changes["gpu-0000"]["set"][f"{TIER}0"] == "leaf-0"
    assert f"{TIER}0" not in fake.get(NODES, "gpu-0000")["metadata"]["labels"]  # type: ignore[index]
    assert fake.list(VOLCANO_HYPERNODE) == [] and fake.get(KUEUE_TOPOLOGY, "topocast") is None
    assert report.summary().startswith("dry run (client, nothing written) ok:")


def test_server_dry_run_sends_dry_run_writes_the_fake_server_validates_but_does_not_store(
    fake: FakeKubeApiServer,
) -> None:
    graph = make_graph(32)
    add_cluster_nodes(fake, graph)
    before = {n["metadata"]["name"]: n["metadata"]["resourceVersion"] for n in fake.list(NODES)}

    report = make_publisher(fake, dry_run="server").run(artifacts(graph))

    assert report.ok, report.summary()
    writes = [r for r in fake.requests if r.method != "GET"]
    assert len(writes) == 32 + 2 + 4 + 1 and all(r.query.get("dryRun") == "All" for r in writes)
    assert all(r.status in (200, 201) for r in writes)
    assert {n["metadata"]["name"]: n["metadata"]["resourceVersion"] for n in fake.list(NODES)} == before
    assert fake.list(VOLCANO_HYPERNODE) == [] and fake.get(CONFIGMAPS, "slurm-config-extra", "slurm") is None


def test_server_dry_run_still_reports_what_the_server_rejects(fake: FakeKubeApiServer) -> None:
    graph = make_graph(8)
    add_cluster_nodes(fake, graph)
    fake.delete(ResourceType("", ("v1",), "Namespace", "namespaces"), "slurm")

    report = make_publisher(fake, dry_run="server").run(artifacts(graph, ("slinky",)))

    assert not report.ok and 'namespaces "slurm" not found' in " ".join(report.errors)


def test_fake_server_rejects_an_unknown_dry_run_value(fake: FakeKubeApiServer) -> None:
    fake.add_node("n1", {HOST: "n1"})
    resp = httpx2.patch(
        f"{fake.url}/api/v1/nodes/n1?dryRun=Maybe",
        content=b'{"metadata":{"labels":{"a":"b"}}}',
        headers={"Content-Type": "application/merge-patch+json", "Authorization": "Bearer test-token"},
    )
    assert resp.status_code == 400 and "Invalid dry run value" in resp.json()["message"]
    assert "a" not in fake.get(NODES, "n1")["metadata"]["labels"]  # type: ignore[index]


# ----- error bodies whatever their media type --------------------------------------------------------------


def test_a_server_sending_errors_as_json_with_charset_still_gives_404_and_409(fake: FakeKubeApiServer) -> None:
    fake.error_content_type = "application/json; charset=utf-8"  # what kmock sends
    graph = make_graph(16)
    add_cluster_nodes(fake, graph)
    publisher = make_publisher(fake)
    assert publisher.run(artifacts(graph, ("k8s-labels", "kueue", "kai"))).ok  # GETs of absent objects: 404s
    assert fake.get(KUEUE_TOPOLOGY, "topocast") is not None
    assert all(r.status == 404 for r in fake.requests if r.method == "GET" and r.name == "topocast")
    hand_edit(fake, KAI_TOPOLOGY, "topocast", lambda o: o["spec"]["levels"].pop(0))
    fake.inject(
        None,
        1,
        match=lambda r: r.method == "PATCH" and r.group == "kai.scheduler",
        action=lambda s: s.touch(KAI_TOPOLOGY, "topocast"),
    )
    fake.reset_log()

    report = publisher.run(artifacts(graph, ("k8s-labels", "kueue", "kai")))  # 409, fresh read, apply

    assert report.ok, report.summary()
    assert [r.status for r in fake.requests if r.group == "kai.scheduler" and r.method == "PATCH"] == [409, 200]


@pytest.mark.parametrize(
    ("content_type", "body", "reason", "message"),
    [
        (
            "application/json; charset=utf-8",
            {"kind": "Status", "code": 404, "reason": "NotFound", "message": "gone"},
            "NotFound",
            "gone",
        ),
        (
            "application/vnd.kubernetes.status+json",
            {"kind": "Status", "code": 404, "reason": "NotFound", "message": "x"},
            "NotFound",
            "x",
        ),
        ("text/html", "<html>404 page not found</html>", "NotFound", "<html>404 page not found</html>"),
        ("application/json", {"error": "not a Status"}, "NotFound", '{"error": "not a Status"}'),
    ],
)
def test_every_error_body_leaves_the_transport_as_a_status(
    content_type: str, body: Any, reason: str, message: str
) -> None:
    raw = body.encode() if isinstance(body, str) else json.dumps(body).encode()

    def answer(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(404, headers={"Content-Type": content_type}, content=raw)

    transport = ResilientTransport(httpx2.MockTransport(answer), ClientSettings(qps=0))
    with httpx2.Client(transport=transport, base_url="http://k8s") as client:
        resp = client.get("/api/v1/nodes/x")

    assert resp.headers["Content-Type"] == "application/json"
    err = ApiError(request=resp.request, response=resp)
    assert (err.status.code, err.status.reason, err.status.message) == (404, reason, message)
