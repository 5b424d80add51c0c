"""``topocast publish`` against kmock, a third-party Kubernetes emulator the project did not write.

kmock (PyPI ``kmock``) serves discovery and stores objects, but differs from
kube-apiserver where a client can trip: its error bodies are
``application/json; charset=utf-8``, a 404 names no object, objects carry no
``resourceVersion``, a server-side apply of an absent object is a 404 instead of a
create, and list requests ignore ``labelSelector``. The publisher must still
publish, repair hand edits and leave foreign objects alone.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cli_runner import invoke
from test_k8s_publish_cli import kubeconfig
from test_k8s_publisher import DOMAIN, MANAGED, TIER, make_graph

from topocast.model.graph import TopologyGraph, dump_graph

kmock = pytest.importorskip("kmock", reason="kmock (the third-party emulator) is in the dev extra")
from kmock._internal.apps import Server  # noqa: E402  (after the skip)
from kmock._internal.k8s import KubernetesEmulator  # noqa: E402

NODES = kmock.resource("", "v1", "nodes")
CONFIGMAPS = kmock.resource("", "v1", "configmaps")
KUEUE = kmock.resource("kueue.x-k8s.io", "v1beta2", "topologies")
KAI = kmock.resource("kai.scheduler", "v1alpha1", "topologies")
HYPERNODES = kmock.resource("topology.volcano.sh", "v1alpha1", "hypernodes")


class KmockCluster:
    """kmock's KubernetesEmulator on a free port, served from its own event loop thread."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._loop.run_until_complete, args=(self._main(),), daemon=True)
        self._thread.start()
        assert self._ready.wait(20), "kmock did not start"

    async def _main(self) -> None:
        self._stop = asyncio.Event()
        async with KubernetesEmulator() as emulator, Server(emulator) as server:
            self.emulator, self.url = emulator, str(server.url).rstrip("/")
            for resource in (NODES, CONFIGMAPS, KUEUE, KAI, HYPERNODES):
                emulator.resources[resource]  # declared: served in discovery
            self._ready.set()
            await self._stop.wait()

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    def put(self, resource: Any, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        self.emulator.objects[resource, meta.get("namespace"), meta["name"]] = obj

    def get(self, resource: Any, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        key = (resource, namespace, name)
        if key not in self.emulator.objects or self.emulator.objects[key].deleted:
            return None
        return dict(self.emulator.objects[key].raw)


@pytest.fixture
def cluster() -> Iterator[KmockCluster]:
    running = KmockCluster()
    try:
        yield running
    finally:
        running.stop()


def add_nodes(cluster: KmockCluster, graph: TopologyGraph) -> None:
    for node in graph.nodes:
        meta = {"name": node.name, "labels": {"kubernetes.io/hostname": node.name, "team": "ml"}}
        spec = {"providerID": f"aws:///us-east-1a/{node.id}"}
        cluster.put(NODES, {"apiVersion": "v1", "kind": "Node", "metadata": meta, "spec": spec})


def publish(tmp_path: Path, cluster: KmockCluster, graph: TopologyGraph, *extra: str) -> Any:
    path = tmp_path / f"graph-{len(graph.nodes)}.json"
    path.write_text(dump_graph(graph))
    args = ["publish", "--graph", str(path), "--kubeconfig", str(kubeconfig(tmp_path, cluster.url)), *extra]
    result = invoke(args)
    assert "Traceback" not in result.output
    return result


def test_publish_then_hand_edits_then_publish_repairs_everything_on_kmock(
    cluster: KmockCluster, tmp_path: Path
) -> None:
    graph = make_graph(16)
    add_nodes(cluster, graph)

    first = publish(tmp_path, cluster, graph)

    assert first.exit_code == 0, first.output
    assert "warning" not in first.stderr  # every object created, none mistaken for a missing CRD
    node = cluster.get(NODES, "gpu-0003")
    assert node is not None
    assert node["metadata"]["labels"] == {
        "kubernetes.io/hostname": "gpu-0003",
        "team": "ml",
        f"{TIER}0": "leaf-0",
        f"{TIER}1": "spine-0",
        f"{TIER}2": "core-0",
        DOMAIN: "nvl-0",
    }
    good = {r: cluster.get(r, "topocast") for r in (KUEUE, KAI)}
    good_leaf = cluster.get(HYPERNODES, "leaf-0")
    cm = cluster.get(CONFIGMAPS, "slurm-config-extra", "slurm")
    assert good[KUEUE] and good[KAI] and good_leaf and cm
    good_conf = cm["data"]["topology.conf"]

    # hand edits of every kind, plus objects topocast must not touch
    node["metadata"]["labels"][f"{TIER}0"] = "leaf-by-hand"
    cluster.put(NODES, node)
    for resource in (KUEUE, KAI):
        edited = dict(good[resource] or {})
        edited["spec"] = {"levels": [{"nodeLabel": "kubernetes.io/hostname"}]}
        cluster.put(resource, edited)
    cluster.put(HYPERNODES, {**good_leaf, "spec": {**good_leaf["spec"], "tier": 7}})
    cluster.put(CONFIGMAPS, {**cm, "data": {"topology.conf": "# emptied\n", "gres.conf": "AutoDetect=nvml\n"}})
    foreign = {"apiVersion": "topology.volcano.sh/v1alpha1", "kind": "HyperNode", "metadata": {"name": "foreign"}}
    cluster.put(HYPERNODES, {**foreign, "spec": {"tier": 1, "members": []}})

    second = publish(tmp_path, cluster, graph)

    assert second.exit_code == 0, second.output
    assert "drift=5" in second.stderr and "nodes patched=1" in second.stderr
    assert cluster.get(NODES, "gpu-0003")["metadata"]["labels"][f"{TIER}0"] == "leaf-0"  # type: ignore[index]
    assert cluster.get(KUEUE, "topocast")["spec"] == good[KUEUE]["spec"]  # type: ignore[index]
    assert cluster.get(KAI, "topocast")["spec"] == good[KAI]["spec"]  # type: ignore[index]
    assert cluster.get(HYPERNODES, "leaf-0")["spec"] == good_leaf["spec"]  # type: ignore[index]
    data = cluster.get(CONFIGMAPS, "slurm-config-extra", "slurm")["data"]  # type: ignore[index]
    assert data == {"topology.conf": good_conf, "gres.conf": "AutoDetect=nvml\n"}
    assert cluster.get(HYPERNODES, "foreign") is not None

    third = publish(tmp_path, cluster, graph)

    assert third.exit_code == 0 and "drift" not in third.stderr and "patched" not in third.stderr


def test_gc_on_kmock_which_ignores_label_selectors_deletes_only_its_own(cluster: KmockCluster, tmp_path: Path) -> None:
    big, small = make_graph(64), make_graph(32)
    add_nodes(cluster, big)
    spec = {"tier": 1, "members": [{"type": "Node", "selector": {"exactMatch": {"name": "x"}}}]}
    cluster.put(HYPERNODES, {"metadata": {"name": "volcano-discovered"}, "spec": spec})
    cluster.put(HYPERNODES, {"metadata": {"name": "look-alike", "labels": {MANAGED: "topocast"}}, "spec": spec})
    assert publish(tmp_path, cluster, big, "--format", "volcano").exit_code == 0
    assert cluster.get(HYPERNODES, "leaf-3") is not None

    result = publish(tmp_path, cluster, small, "--format", "volcano")

    assert result.exit_code == 0, result.output
    assert cluster.get(HYPERNODES, "leaf-2") is None and cluster.get(HYPERNODES, "leaf-3") is None
    for kept in ("leaf-0", "leaf-1", "volcano-discovered", "look-alike"):
        assert cluster.get(HYPERNODES, kept) is not None, kept


def test_dry_run_on_kmock_writes_nothing(cluster: KmockCluster, tmp_path: Path) -> None:
    graph = make_graph(8)
    add_nodes(cluster, graph)

    plan = publish(tmp_path, cluster, graph, "--dry-run")

    assert plan.exit_code == 0 and "nodes to patch: 8" in plan.stdout
    assert f"{TIER}0" not in cluster.get(NODES, "gpu-0000")["metadata"]["labels"]  # type: ignore[index]
    assert cluster.get(KUEUE, "topocast") is None
