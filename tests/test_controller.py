"""``topocast controller``: watch, lease, debounce and publish inside a cluster, against the fake API server.

The fake server (tests/k8s_fake_apiserver.py) speaks the real wire protocol, watch windows with bookmarks,
410 Expired after compaction and dropped watch connections included; the real client drives it. Expected
labels are written out by hand from the EKS layer labels each test puts on its Nodes.
"""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from k8s_fake_apiserver import CONFIGMAPS, DEFAULT_CRDS, KUEUE_TOPOLOGY, LEASES, NODES, FakeKubeApiServer

from topocast.agents.controller import ControllerSettings, build_controller, metrics_text, serve_http
from topocast.k8s.client import ClientSettings, K8sConnection, build_client
from topocast.k8s.lease import LeaderElector, LeaseConfig
from topocast.k8s.watch import Change, KindWatcher

EKS = "topology.k8s.aws/network-node-layer-"
LEAF = "fabric.topograph.run/tier-0"  # what the k8s-labels format writes: the leaf, closest first


@pytest.fixture
def fake() -> Iterator[FakeKubeApiServer]:
    crds = (*DEFAULT_CRDS, LEASES)
    with FakeKubeApiServer(crds=crds, namespaces=("default", "topocast", "slurm"), token="sa-token") as server:
        yield server


def client(fake: FakeKubeApiServer) -> Any:
    return build_client(K8sConnection(endpoint=fake.url, token="sa-token"), ClientSettings(qps=0))


def add(fake: FakeKubeApiServer, name: str, leaf: str) -> None:
    fake.add_node(name, {f"{EKS}1": "nn-top", f"{EKS}2": "nn-mid", f"{EKS}3": leaf})


def node_labels(fake: FakeKubeApiServer, name: str) -> dict[str, str]:
    obj = fake.get(NODES, name)
    assert obj is not None
    return dict(obj["metadata"].get("labels") or {})


# ----- the watcher -------------------------------------------------------------------------------------------
def test_watch_reports_label_changes_and_deletions_and_ignores_status(fake: FakeKubeApiServer) -> None:
    add(fake, "n1", "leaf-a")
    add(fake, "n2", "leaf-a")
    w = KindWatcher(client(fake), window_seconds=1)
    assert w.relist() == [Change("added", "n1"), Change("added", "n2")]
    add(fake, "n3", "leaf-b")
    add(fake, "n1", "leaf-b")  # moved
    fake.touch(NODES, "n2")  # an annotation only: not a topology change
    fake.delete(NODES, "n2")
    changes = w.poll()
    assert sorted(changes, key=lambda c: c.name) == [
        Change("modified", "n1"),
        Change("deleted", "n2"),
        Change("added", "n3"),
    ]
    fake.touch(NODES, "n1")
    assert w.poll() == []  # nothing topology reads changed


@pytest.mark.slow
def test_a_dropped_watch_resumes_from_the_same_version_and_loses_nothing(fake: FakeKubeApiServer) -> None:
    add(fake, "n1", "leaf-a")
    kc = build_client(
        K8sConnection(endpoint=fake.url, token="sa-token"),
        ClientSettings(qps=0, max_attempts=1, unreachable_seconds=0.01),
    )
    w = KindWatcher(kc, window_seconds=1, sleep=lambda s: time.sleep(0.05))
    w.relist()
    fake.drop_watches(3)  # the transport's own retries and then the watcher's
    fake.delete(NODES, "n1")
    seen: list[Change] = []
    for _ in range(4):
        seen += w.poll()
    assert seen == [Change("deleted", "n1")]


def test_an_expired_version_relists_and_still_reports_the_deletion_in_the_gap(fake: FakeKubeApiServer) -> None:
    add(fake, "n1", "leaf-a")
    add(fake, "n2", "leaf-a")
    w = KindWatcher(client(fake), window_seconds=1)
    w.relist()
    fake.delete(NODES, "n1")
    add(fake, "n2", "leaf-z")
    fake.compact()  # the events above are gone from the server: only a fresh list can tell
    assert sorted(w.poll(), key=lambda c: c.name) == [Change("deleted", "n1"), Change("modified", "n2")]
    assert w.stats["relists"] == 2


# ----- the lease ---------------------------------------------------------------------------------------------
class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_one_leader_and_a_takeover_only_after_the_lease_ran_out(fake: FakeKubeApiServer) -> None:
    clock = Clock()
    config = {"namespace": "topocast", "name": "topocast-controller", "lease_seconds": 15.0}
    a = LeaderElector(client(fake), LeaseConfig(identity="a", **config), clock=clock)
    b = LeaderElector(client(fake), LeaseConfig(identity="b", **config), clock=clock)
    assert a.step() is True and b.step() is False
    for _ in range(5):  # a renews every 2 s: b never takes over
        clock.now += 2
        assert a.step() is True and b.step() is False
    # a dies (stops renewing): b waits a full lease from the last change it saw, then takes over
    clock.now += 10
    assert b.step() is False
    clock.now += 6
    assert b.step() is True
    lease = fake.get(LEASES, "topocast-controller", "topocast")
    assert lease is not None and lease["spec"]["holderIdentity"] == "b"
    assert lease["spec"]["leaseTransitions"] == 1
    # a comes back: it has not renewed for over a lease, so it is no leader, and the Lease stays b's
    assert a.leading is False and a.step() is False


def test_two_candidates_racing_for_a_free_lease_get_one_holder(fake: FakeKubeApiServer) -> None:
    electors = [
        LeaderElector(client(fake), LeaseConfig("topocast", "race", f"c{i}", lease_seconds=15.0)) for i in range(4)
    ]
    threads = [threading.Thread(target=e.step) for e in electors]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(e.leading for e in electors) == 1


# ----- the controller ----------------------------------------------------------------------------------------
def settings(fake: FakeKubeApiServer, identity: str = "r1", **more: Any) -> ControllerSettings:
    base: dict[str, Any] = {
        "cluster": "c1",
        "identity": identity,
        "quiet": 0.2,
        "max_wait": 5.0,
        "watch_window": 1,
        "retry_seconds": 0.2,
        "lease_seconds": 2.0,
        "reconcile_seconds": 3600.0,
        "k8s_options": {
            "connection": {"endpoint": fake.url, "token": "sa-token"},
            "client": {"qps": 0, "max_attempts": 2, "backoff_initial": 0.05, "unreachable_seconds": 0.1},
        },
    }
    return ControllerSettings(**{**base, **more})


def drive(controller: Any, steps: int) -> list[Any]:
    """Step the loop by hand (the lease renewed before each step, as its thread would)."""
    outcomes = []
    for _ in range(steps):
        controller.elector.step()
        outcomes.append(controller.step())
    return [o for o in outcomes if o is not None]


@pytest.mark.slow
def test_the_leader_publishes_at_once_then_after_a_quiet_window_and_repairs_drift(fake: FakeKubeApiServer) -> None:
    for i in range(4):
        add(fake, f"n{i}", "leaf-a" if i < 2 else "leaf-b")
    c = build_controller(settings(fake))
    (first,) = drive(c, 1)
    assert (first.result, first.generation, first.nodes) == ("published", 1, 4)
    assert node_labels(fake, "n0")[LEAF] == "leaf-a" and node_labels(fake, "n3")[LEAF] == "leaf-b"
    assert fake.get(KUEUE_TOPOLOGY, "topocast") is not None or fake.list(KUEUE_TOPOLOGY)
    # a node moves: one debounced publish
    add(fake, "n0", "leaf-b")
    outcomes = drive(c, 4)
    assert [(o.result, o.generation) for o in outcomes] == [("published", 2)]
    assert node_labels(fake, "n0")[LEAF] == "leaf-b"
    # the publish's own label writes are no change: nothing more happens
    assert drive(c, 3) == []
    # someone edits a label topocast owns: the reconcile repairs it
    labels = node_labels(fake, "n1")
    fake.add_node("n1", {**labels, LEAF: "hand-edit"})
    c._next_reconcile = 0.0
    (repair,) = drive(c, 1)
    assert repair.result == "published" and node_labels(fake, "n1")[LEAF] == "leaf-a"
    state = fake.get(CONFIGMAPS, "topocast-controller-state", "topocast")
    assert state is not None and state["data"]["generation"] == str(repair.generation)


@pytest.mark.slow
def test_a_mass_loss_is_held_until_a_reconcile_confirms_it_node_by_node(fake: FakeKubeApiServer) -> None:
    for i in range(10):
        add(fake, f"n{i}", "leaf-a")
    c = build_controller(settings(fake))
    assert drive(c, 1)[0].result == "published"
    for i in range(5):
        fake.delete(NODES, f"n{i}")
    held = drive(c, 4)
    assert [o.result for o in held] == ["held"] and "5 of 10 published nodes" in held[0].detail
    add(fake, "n0", "leaf-a")  # one held node comes back
    c._next_reconcile = 0.0
    (confirmed,) = drive(c, 1)
    assert (confirmed.result, confirmed.nodes) == ("published", 6)


@pytest.mark.slow
def test_a_crash_mid_publish_is_finished_by_the_next_leader(fake: FakeKubeApiServer) -> None:
    for i in range(6):
        add(fake, f"n{i}", "leaf-a" if i % 2 else "leaf-b")
    a = build_controller(settings(fake, "a"))
    fake.fail_after(8)  # the API server goes away half-way through a's first publish
    (broken,) = drive(a, 1)
    assert broken.result == "incomplete"
    fake.clear_faults()
    # a dies without releasing the Lease; b takes over once it ran out and publishes everything
    b = build_controller(settings(fake, "b"))
    assert drive(b, 1) == []  # a still holds it
    time.sleep(2.2)
    (took_over,) = drive(b, 1)
    assert took_over.result == "published" and took_over.generation == 1
    for i in range(6):
        assert node_labels(fake, f"n{i}")[LEAF] == ("leaf-a" if i % 2 else "leaf-b")


@pytest.mark.slow
def test_two_replicas_under_churn_with_dropped_watches_end_with_a_fresh_render(fake: FakeKubeApiServer) -> None:
    """Threads as in a pod: two replicas, nodes added, moved and deleted while watches drop and the
    leader dies; at the end the labels on every node are what the k8s-labels format renders."""
    from topocast.k8s.node_source import discover
    from topocast.providers.k8s_labels.provider import NodeLabelsConfig
    from topocast.renderers import render

    for i in range(8):
        add(fake, f"n{i}", f"leaf-{i % 3}")
    replicas = [build_controller(settings(fake, name)) for name in ("a", "b")]
    threads = [threading.Thread(target=r.run, daemon=True) for r in replicas]
    for t in threads:
        t.start()
    try:
        deadline = time.monotonic() + 10
        while not any(r.stats.generation for r in replicas) and time.monotonic() < deadline:
            time.sleep(0.1)
        leader = next(r for r in replicas if r.elector.leading)
        for round_ in range(3):
            fake.drop_watches(1)
            add(fake, f"new{round_}", "leaf-9")
            add(fake, f"n{round_}", "leaf-8")
            fake.delete(NODES, f"n{7 - round_}")
            time.sleep(0.5)
        leader.stop()  # the leader dies mid-churn (its Lease runs out: no release)
        add(fake, "late", "leaf-7")
        deadline = time.monotonic() + 20
        other = next(r for r in replicas if r is not leader)
        while time.monotonic() < deadline and LEAF not in node_labels(fake, "late"):
            time.sleep(0.2)
        assert other.elector.leading
    finally:
        for r in replicas:
            r.stop()
    kc = client(fake)
    truth = discover(NodeLabelsConfig(cluster="c1"), client=kc).graph
    want = json.loads(render(truth, "k8s-labels").content)
    assert set(want) == {n["metadata"]["name"] for n in fake.list(NODES)}
    for name, labels in want.items():
        got = node_labels(fake, name)
        assert {k: got.get(k) for k in labels} == labels, name


def test_metrics_health_and_readiness_over_http(fake: FakeKubeApiServer) -> None:
    add(fake, "n0", "leaf-a")
    ready = {"conditions": [{"type": "Ready", "status": "True"}]}
    labels = {f"{EKS}1": "nn-top", f"{EKS}2": "nn-mid", f"{EKS}3": "leaf-a"}
    fake.put(NODES, {"metadata": {"name": "n1", "labels": labels}, "status": ready})
    c = build_controller(settings(fake))
    drive(c, 2)  # the first publish, then a capacity reading
    server = serve_http(c, 0, "127.0.0.1")
    port = server.server_address[1]
    try:

        def get(path: str) -> tuple[int, str]:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
                return r.status, r.read().decode()

        assert get("/healthz") == (200, "ok\n")
        assert get("/readyz") == (200, "leader\n")
        status, text = get("/metrics")
    finally:
        server.shutdown()
    assert status == 200
    lines = text.splitlines()
    assert 'topocast_controller_leader{cluster="c1"} 1' in lines
    assert 'topocast_controller_generation{cluster="c1"} 1' in lines
    assert 'topocast_controller_cycles_total{cluster="c1",result="published"} 1' in lines
    # capacity (docs/score.md): n1 is Ready and schedulable, n0 reports no Ready condition
    assert 'topocast_nodes{cluster="c1",state="free"} 1' in lines
    assert 'topocast_nodes{cluster="c1",state="drained"} 1' in lines
    assert 'topocast_group_nodes{cluster="c1",level="leaf",group="leaf-a",state="free"} 1' in lines
    # every sample belongs to a family declared by # HELP and # TYPE lines just before it
    declared = {line.split()[2] for line in lines if line.startswith("# TYPE ")}
    for line in lines:
        if not line.startswith("#"):
            family = line.split("{")[0].removesuffix("_sum").removesuffix("_count")
            assert family in declared, line
    assert metrics_text(c).endswith("\n")


@pytest.mark.slow
def test_rbac_grants_every_request_the_controller_makes_and_no_more(fake: FakeKubeApiServer) -> None:
    repo = Path(__file__).resolve().parents[1]
    docs = list(yaml.safe_load_all((repo / "infra" / "k8s" / "controller" / "rbac.yaml").read_text()))
    rules = [
        (d["metadata"].get("namespace") if d["kind"] == "Role" else None, rule)
        for d in docs
        if d["kind"] in ("ClusterRole", "Role")
        for rule in d["rules"]
    ]
    for i in range(4):
        add(fake, f"n{i}", "leaf-a")
    c = build_controller(settings(fake))
    drive(c, 1)  # take over: Lease created, list, publish, state written
    add(fake, "n0", "leaf-b")
    drive(c, 4)  # watch windows, a debounced publish, Lease renewals
    used: set[int] = set()
    for req in fake.requests:
        if not req.verb or req.resource is None:
            continue  # discovery: allowed to every authenticated user (system:discovery)
        verbs = [req.verb] + (["create"] if req.verb == "patch" and req.status == 201 else [])
        for verb in verbs:
            granted = [
                i
                for i, (namespace, rule) in enumerate(rules)
                if (namespace is None or req.namespace == namespace)
                and req.group in rule["apiGroups"]
                and req.resource in rule["resources"]
                and verb in rule["verbs"]
                and (not rule.get("resourceNames") or (req.name in rule["resourceNames"] and verb != "list"))
            ]
            assert granted, f"not granted: {verb} {req.group}/{req.resource} {req.namespace}/{req.name}"
            used.update(granted)
    lease_and_state = {i for i, (namespace, _) in enumerate(rules) if namespace == "topocast"}
    assert lease_and_state <= used  # the controller's own rules are all needed
    node_rule = next(i for i, (_, rule) in enumerate(rules) if rule["resources"] == ["nodes"])
    assert node_rule in used


def test_the_deployment_runs_as_nobody_read_only_with_probes_and_requests() -> None:
    repo = Path(__file__).resolve().parents[1]
    base = repo / "infra" / "k8s" / "controller"
    kustomization = yaml.safe_load((base / "kustomization.yaml").read_text())
    assert all((base / r).is_file() for r in kustomization["resources"])
    (deployment,) = [d for d in yaml.safe_load_all((base / "deployment.yaml").read_text()) if d]
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["resources"]["requests"]["memory"] and container["resources"]["limits"]["memory"]
    assert pod["serviceAccountName"] == "topocast-controller" and deployment["spec"]["replicas"] == 2
    # the arguments are the CLI's own: the parser accepts them
    from topocast.cli.parser import COMMANDS

    parsed = COMMANDS[("controller",)].parser().parse_args(container["args"][1:])
    assert (parsed.cluster, parsed.provider, parsed.in_cluster, parsed.listen) == (
        "gpu-cluster",
        "k8s-labels",
        True,
        8080,
    )


def test_the_controller_runs_one_debounce_policy_and_refuses_a_quiet_window_above_the_max_wait() -> None:
    from pydantic import ValidationError

    from topocast.ports.debounce import DebouncePolicy

    settings = ControllerSettings(quiet=3, max_wait=30, leading_edge=True)
    assert settings.debounce_policy == DebouncePolicy(quiet=3.0, max_wait=30.0, leading_edge=True)
    with pytest.raises(
        ValidationError, match=re.escape("debounce needs 0 <= quiet <= max_wait, got quiet=200.0 max_wait=100.0")
    ):
        ControllerSettings(quiet=200, max_wait=100)
