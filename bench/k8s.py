"""Kubernetes publisher benchmark: API calls and wall time to converge a cluster.

Runs the fake API server (tests/k8s_fake_apiserver.py) in a child process (a real
API server is another process: in-process, the server's Python would compete with
the client for one interpreter lock) and the real lightkube client against it over
loopback HTTP. Three publishes of every
Kubernetes format (node labels, Kueue, KAI, Volcano, Slinky) for N nodes:

1. from empty (nodes exist, no topology labels, no objects);
2. after one node moved to another leaf switch;
3. with nothing changed.

For each: wall time, the client's and the fake server's CPU time (the machine's load
average is printed too: on a shared machine wall time is mostly waiting for a core), requests by verb,
accepted node PATCHes and their ratio to nodes whose desired labels changed (goal: 1.0).

The fake server sleeps ``--latency`` seconds per request (default 5 ms, outside
its lock, as a real server's latency overlaps across connections). The first
table uses topocast's default client settings (the adaptive rate: starts at QPS 50
and follows the server; ``--concurrency`` PATCHes in flight, default the publisher's)
unless ``--qps``/``--burst``/``--fixed-rate`` say otherwise; goal: 10,000 nodes in <= 15 s.

Then the rate-limit check (``--apf-nodes``, default 1,000, and again 10,000 with
``--apf-nodes 10000``): the fake server enforces a server-side limit like API Priority
and Fairness (token bucket of ``--apf-qps``/``--apf-burst``, 429 with ``Retry-After: 1``
when empty, APF's headers on every answer); a first publish with the *default* client
settings may see the few 429s that find the limit, but no sustained 429s (goal: no two
consecutive seconds with a 429 after the first back-off); one without a client limit shows
what the adaptive rate prevents.

    .venv/bin/python bench/k8s.py [--nodes 10000] [--latency 0.005] [--concurrency 32] [--qps 0]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sys
import time
from collections import Counter
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from k8s_fake_apiserver import FakeKubeApiServer

from topocast.k8s.client import ClientSettings, K8sConnection
from topocast.model.graph import TopologyGraph
from topocast.publish.kubernetes import KubernetesPublisher, KubernetesPublisherConfig
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


def _serve(conn: Connection, nodes: list[tuple[str, str]], options: dict[str, Any]) -> None:
    """The child process: a fake API server with ``nodes``, answering stats/reset/stop on ``conn``."""
    fake = FakeKubeApiServer(**options)
    for name, provider_id in nodes:
        fake.add_node(name, {"kubernetes.io/hostname": name}, provider_id=provider_id)
    fake.start()
    conn.send(fake.url)
    while (cmd := conn.recv()) != "stop":
        if cmd == "reset":
            fake.reset_log()
            conn.send(None)
        else:
            conn.send(
                {
                    "requests": len(fake.requests),
                    "verbs": dict(sorted(Counter(r.verb or "discovery" for r in fake.requests).items())),
                    # accepted PATCHes only: a 429 is not a write
                    "node_patches": sum(
                        1 for r in fake.requests if r.verb == "patch" and r.resource == "nodes" and r.status == 200
                    ),
                    "throttled": fake.throttled,
                    "throttle_log": list(fake.throttle_log),
                    "cpu_s": time.process_time(),
                }
            )
    fake.stop()


class ServerProcess:
    """The fake API server in a child process, holding one Node per graph node."""

    def __init__(self, graph: TopologyGraph, **options: Any) -> None:
        self._nodes = [(n.name, f"aws:///us-east-1a/{n.id}") for n in graph.nodes]
        self._options = options

    def __enter__(self) -> ServerProcess:
        self._conn, child = mp.Pipe()
        self._proc = mp.Process(target=_serve, args=(child, self._nodes, self._options), daemon=True)
        self._proc.start()
        self.url: str = self._conn.recv()
        return self

    def call(self, cmd: str) -> Any:
        self._conn.send(cmd)
        return self._conn.recv()

    def __exit__(self, *exc: object) -> None:
        self._conn.send("stop")
        self._proc.join(10)


def run(
    server: ServerProcess, publisher: KubernetesPublisher, arts: dict[str, Artifact], changed: int
) -> dict[str, Any]:
    server.call("reset")
    before = server.call("stats")
    started, cpu, t0 = time.perf_counter(), time.process_time(), time.monotonic()
    report = publisher.run(arts)
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    if not report.ok:
        raise SystemExit(f"publish failed: {report.summary()}")
    stats = server.call("stats")
    return {
        "wall_s": wall,
        "cpu_s": cpu,
        "requests": stats["requests"],
        "verbs": stats["verbs"],
        "node_patches": stats["node_patches"],
        "changed_nodes": changed,
        "ratio": stats["node_patches"] / changed if changed else float("nan"),
        "objects_applied": len(report.objects_applied),
        "objects_deleted": len(report.objects_deleted),
        "429s": stats["throttled"] - before["throttled"],
        "429 seconds": _seconds_with(stats["throttle_log"][len(before["throttle_log"]) :], t0),
        "server_cpu_s": stats["cpu_s"] - before["cpu_s"],
        "client_waited_s": report.api_calls.get("waited_s", 0.0),
    }


def _seconds_with(times: list[float], t0: float) -> list[int]:
    """The seconds of the publish (0 = its first) in which the server answered at least one 429."""
    return sorted({int(t - t0) for t in times})


def sustained(seconds: list[int]) -> int:
    """The longest run of consecutive seconds with a 429 (1: isolated probes; more: sustained)."""
    longest = run = 0
    for i, s in enumerate(seconds):
        run = run + 1 if i and s == seconds[i - 1] + 1 else 1
        longest = max(longest, run)
    return longest


def publisher_for(server: ServerProcess, client: ClientSettings, concurrency: int) -> KubernetesPublisher:
    config = KubernetesPublisherConfig(
        connection=K8sConnection(endpoint=server.url, token="bench"), client=client, concurrency=concurrency
    )
    return KubernetesPublisher(config)


def print_rows(title: str, rows: list[tuple[str, dict[str, Any]]]) -> None:
    print(f"\n{title} (load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)")
    head = f"{'publish':<16}{'wall s':>9}{'CPU s':>7}{'server':>7}{'requests':>10}{'node PATCH':>12}{'changed':>9}"
    head += f"{'ratio':>7}"
    head += f"{'429s':>7}{'run':>5}"
    print(f"{head}  by verb (run: longest stretch of consecutive seconds with a 429)")
    for name, r in rows:
        ratio = "-" if r["changed_nodes"] == 0 else f"{r['ratio']:.2f}"
        verbs = " ".join(f"{k}={v}" for k, v in r["verbs"].items())
        counts = f"{r['requests']:>10}{r['node_patches']:>12}{r['changed_nodes']:>9}"
        cpu = f"{r['cpu_s']:>7.2f}{r['server_cpu_s']:>7.2f}"
        run = sustained(r["429 seconds"])
        print(f"{name:<16}{r['wall_s']:>9.2f}{cpu}{counts}{ratio:>7}{r['429s']:>7}{run:>5}  {verbs}")
        if r["429 seconds"]:
            print(f"{'':<16}429s in second(s) {r['429 seconds']}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=10_000)
    ap.add_argument("--latency", type=float, default=0.005, help="seconds the fake server adds per request")
    ap.add_argument("--concurrency", type=int, default=None, help="PATCHes in flight (default: the publisher's)")
    ap.add_argument("--qps", type=float, default=None, help="client-side (starting) QPS (0 = off; default: topocast's)")
    ap.add_argument("--burst", type=int, default=None)
    ap.add_argument("--fixed-rate", action="store_true", help="turn the adaptive rate off (qps is fixed)")
    ap.add_argument("--apf-nodes", type=int, default=1_000, help="nodes for the rate-limit check (0 = skip)")
    ap.add_argument("--apf-qps", type=float, default=100.0)
    ap.add_argument("--apf-burst", type=int, default=100)
    args = ap.parse_args()

    graph = synthetic_graph(args.nodes)
    moved = move_first_node(graph)
    t = time.perf_counter()
    first_arts, moved_arts = artifacts(graph), artifacts(moved)
    print(f"rendered {len(FORMATS)} formats twice for {args.nodes} nodes in {time.perf_counter() - t:.2f} s")

    given = {k: v for k, v in (("qps", args.qps), ("burst", args.burst)) if v is not None}
    client = ClientSettings(**given, adaptive=not args.fixed_rate)
    concurrency = args.concurrency or KubernetesPublisherConfig().concurrency
    with ServerProcess(graph, latency=args.latency) as server:
        publisher = publisher_for(server, client, concurrency)
        rows = [
            ("from empty", run(server, publisher, first_arts, changed_nodes(None, first_arts))),
            ("one node moved", run(server, publisher, moved_arts, changed_nodes(first_arts, moved_arts))),
            ("no change", run(server, publisher, moved_arts, 0)),
        ]
    print_rows(
        f"{args.nodes} nodes, {args.latency * 1000:g} ms per request, concurrency {concurrency}, "
        f"client qps {client.qps or 'unlimited'}{' adaptive' if client.adaptive and client.qps else ''}",
        rows,
    )

    if args.apf_nodes:
        small = synthetic_graph(args.apf_nodes)
        arts = artifacts(small)
        apf = []
        for name, client, concurrency in (
            ("defaults", ClientSettings(), KubernetesPublisherConfig().concurrency),
            ("no client limit", ClientSettings(qps=0, retry_after_max=1.0), 32),
        ):
            with ServerProcess(small, latency=args.latency, rate_limit=(args.apf_qps, args.apf_burst)) as server:
                apf.append((name, run(server, publisher_for(server, client, concurrency), arts, args.apf_nodes)))
        print_rows(
            f"{args.apf_nodes} nodes, first publish against a server limit of {args.apf_qps:g} QPS "
            f"(burst {args.apf_burst}, 429 + Retry-After: 1 beyond it)",
            apf,
        )


if __name__ == "__main__":
    main()
