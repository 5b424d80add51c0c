"""Kubernetes publisher benchmark: API calls and wall time to converge a cluster.

Runs the fake API server (tests/k8s_fake_apiserver.py) in-process and the real
lightkube client against it over loopback HTTP. Three publishes of every
Kubernetes format (node labels, Kueue, KAI, Volcano, Slinky) for N nodes:

1. from empty (nodes exist, no topology labels, no objects);
2. after one node moved to another leaf switch;
3. with nothing changed.

For each: wall time, requests by verb, node PATCHes and the ratio of node
PATCHes to nodes whose desired labels changed (goal: 1.0). The client-side rate
limit is off by default so the numbers show the publisher's own cost; pass
``--qps`` to see a realistic limit's effect (10k PATCHes at 50 QPS take 200 s).

    .venv/bin/python bench/k8s.py [--nodes 10000] [--concurrency 4] [--qps 0]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from k8s_fake_apiserver import FakeKubeApiServer

from topocast.graph import TopologyGraph
from topocast.k8s.client import ClientSettings, K8sConnection
from topocast.k8s.publisher import KubernetesPublisher, KubernetesPublisherConfig
from topocast.renderers import render
from topocast.renderers.base import Artifact
from topocast_sim.synthetic import synthetic_graph

FORMATS = ("k8s-labels", "kueue", "kai", "volcano", "slinky")


def artifacts(graph: TopologyGraph) -> dict[str, Artifact]:
    return {f: render(graph, f) for f in FORMATS}


def move_first_node(graph: TopologyGraph) -> TopologyGraph:
    """Move node 0 to the next leaf under the same parent (a one-node topology change)."""
    first, second_leaf = graph.nodes[0], None
    for node in graph.nodes:
        if node.fabric and node.fabric[0] != first.fabric[0] and node.fabric[1:] == first.fabric[1:]:
            second_leaf = node.fabric[0]
            break
    assert second_leaf is not None, "graph too small to move a node"
    moved = first.model_copy(update={"fabric": [second_leaf, *first.fabric[1:]]})
    return TopologyGraph.model_validate(
        {**graph.model_dump(), "nodes": [moved.model_dump(), *[n.model_dump() for n in graph.nodes[1:]]]}
    )


def changed_nodes(before: dict[str, Artifact] | None, after: dict[str, Artifact]) -> int:
    new = {o["node"]: o["labels"] for o in after["k8s-labels"].objects}
    if before is None:
        return sum(1 for labels in new.values() if labels)
    old = {o["node"]: o["labels"] for o in before["k8s-labels"].objects}
    return sum(1 for name, labels in new.items() if old.get(name) != labels)


def run(
    fake: FakeKubeApiServer, publisher: KubernetesPublisher, arts: dict[str, Artifact], changed: int
) -> dict[str, Any]:
    fake.reset_log()
    started = time.perf_counter()
    report = publisher.run(arts)
    wall = time.perf_counter() - started
    if not report.ok:
        raise SystemExit(f"publish failed: {report.summary()}")
    verbs = Counter(f"{r.verb or 'discovery'}" for r in fake.requests)
    node_patches = sum(1 for r in fake.requests if r.verb == "patch" and r.resource == "nodes")
    return {
        "wall_s": wall,
        "requests": len(fake.requests),
        "verbs": dict(sorted(verbs.items())),
        "node_patches": node_patches,
        "changed_nodes": changed,
        "ratio": node_patches / changed if changed else float("nan"),
        "objects_applied": len(report.objects_applied),
        "objects_deleted": len(report.objects_deleted),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=10_000)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--qps", type=float, default=0.0, help="client-side QPS limit (0 = off)")
    ap.add_argument("--burst", type=int, default=40)
    args = ap.parse_args()

    graph = synthetic_graph(args.nodes)
    moved = move_first_node(graph)
    t = time.perf_counter()
    first_arts, moved_arts = artifacts(graph), artifacts(moved)
    print(f"rendered {len(FORMATS)} formats twice for {args.nodes} nodes in {time.perf_counter() - t:.2f} s")

    with FakeKubeApiServer() as fake:
        for node in graph.nodes:
            fake.add_node(node.name, {"kubernetes.io/hostname": node.name}, provider_id=f"aws:///us-east-1a/{node.id}")
        config = KubernetesPublisherConfig(
            connection=K8sConnection(endpoint=fake.url, token="bench"),
            client=ClientSettings(qps=args.qps, burst=args.burst),
            concurrency=args.concurrency,
        )
        publisher = KubernetesPublisher(config)
        rows = [
            ("from empty", run(fake, publisher, first_arts, changed_nodes(None, first_arts))),
            ("one node moved", run(fake, publisher, moved_arts, changed_nodes(first_arts, moved_arts))),
            ("no change", run(fake, publisher, moved_arts, 0)),
        ]

    print(f"\n{args.nodes} nodes, concurrency {args.concurrency}, qps {args.qps or 'unlimited'}")
    print(f"{'publish':<16}{'wall s':>9}{'requests':>10}{'node PATCH':>12}{'changed':>9}{'ratio':>7}  by verb")
    for name, r in rows:
        ratio = "-" if r["changed_nodes"] == 0 else f"{r['ratio']:.2f}"
        verbs = " ".join(f"{k}={v}" for k, v in r["verbs"].items())
        counts = f"{r['requests']:>10}{r['node_patches']:>12}{r['changed_nodes']:>9}"
        print(f"{name:<16}{r['wall_s']:>9.2f}{counts}{ratio:>7}  {verbs}")


if __name__ == "__main__":
    main()
