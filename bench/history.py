"""History benchmark: ``topocast history --at`` on 1,000 generations of a 10k-node cluster, whole process.

A local store (``<dir>/bench/graphs/``) is built with a history index of ``--generations`` entries in the
format the store writes at commit (:func:`topocast.model.history.index_entry` for the first generation, the
same places for the rest): every generation moves ``--moves`` random nodes to another leaf, and node
``gpu-000000`` back and forth between two leaves. Only the graph objects the queries read are written (the
latest, and the one live at the ``--out`` query's time): the index is what makes ``--at`` one read, not the
generations (1,000 x 10k-node graphs would be ~2 GB of JSON).

Then, each query in a fresh ``topocast`` process (best of ``--repeat``), checked against a replay:

* ``history --node gpu-000000 --at T --json``: where the node was at T;
* ``history --at T --out FILE``: the generation live at T, fetched and checked against its sha256;
* ``history --node gpu-000000``: all of that node's changes;
* ``topocast --version``: the floor every command pays (interpreter and CLI start-up).

Run by hand (about a minute; target: each query under 2 s at 1,000 x 10k):

    .venv/bin/python bench/history.py [--generations 1000] [--nodes 10000] [--moves 20]
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from topocast.model.graph import TopologyGraph, dump_graph
from topocast.model.history import INDEX_SCHEMA, index_entry, place_of
from topocast.model.synth import synthetic_data

CLUSTER = "bench"
T0 = datetime(2026, 12, 1, tzinfo=UTC)
STEP = timedelta(minutes=10)
TOPOCAST = str(Path(sys.executable).with_name("topocast"))


def build(root: Path, generations: int, nodes: int, moves: int, query_generation: int) -> tuple[str, str]:
    """Write the store; returns (the place of gpu-000000 at the query generation, that generation's sha256)."""
    base = root / CLUSTER / "graphs"
    base.mkdir(parents=True)
    graph = TopologyGraph.model_validate(synthetic_data(nodes, levels=3, nodes_per_leaf=18, fanout=8, cluster=CLUSTER))
    leaves = sorted({n.fabric[0] for n in graph.nodes})
    paths = {n.fabric[0]: n.fabric for n in graph.nodes}
    current = {n.name: n for n in graph.nodes}
    rng = random.Random(7)
    names = sorted(current)
    entries = [index_entry(1, T0, graph.content_hash(), None, graph)]
    watched = names[0]
    home, away = current[watched].fabric[0], leaves[-1]
    snapshot: dict[int, TopologyGraph] = {}
    for g in range(2, generations + 1):
        moved = {}
        for name in [watched, *rng.sample(names[1:], moves)]:
            target = (away if g % 2 == 0 else home) if name == watched else rng.choice(leaves)
            node = current[name].model_copy(update={"fabric": list(paths[target])})
            current[name] = node
            moved[name] = place_of(node)
        g_graph = graph.model_copy(update={"nodes": list(current.values())})
        entry = {"generation": g, "written_at": (T0 + (g - 1) * STEP).isoformat(), "sha256": "", "nodes": nodes,
                 "joined": {}, "moved": dict(sorted(moved.items())), "left": []}  # fmt: skip
        if g in (query_generation, generations):  # only these graphs are written, so only these are hashed
            entry["sha256"] = g_graph.content_hash()
            snapshot[g] = g_graph
            (base / f"{g:012d}.json").write_text(dump_graph(g_graph))
        else:
            entry["sha256"] = f"{g:064x}"  # never read: the bench writes no object for it
        entries.append(entry)
    last = entries[-1]
    (base / "index.json").write_text(json.dumps({"schema": INDEX_SCHEMA, "cluster": CLUSTER, "generations": entries},
                                                separators=(",", ":")))  # fmt: skip
    (base / "latest.json").write_text(json.dumps({"generation": generations, "sha256": last["sha256"],
                                                  "key": f"{CLUSTER}/graphs/{generations:012d}.json"}))  # fmt: skip
    live = snapshot[query_generation]
    return _leaf(live, watched), live.content_hash()


def _leaf(graph: TopologyGraph, name: str) -> str:
    return next(n.fabric[0] for n in graph.nodes if n.name == name)


def timed(args: list[str], repeat: int) -> tuple[float, str]:
    best, out = float("inf"), ""
    for _ in range(repeat):
        start = time.perf_counter()
        done = subprocess.run([TOPOCAST, *args], capture_output=True, text=True, check=False)
        best = min(best, time.perf_counter() - start)
        if done.returncode != 0:
            raise SystemExit(f"topocast {' '.join(args)}: exit {done.returncode}: {done.stderr.strip()}")
        out = done.stdout
    return best, out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--generations", type=int, default=1000)
    p.add_argument("--nodes", type=int, default=10000)
    p.add_argument("--moves", type=int, default=20, help="random nodes moved per generation")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--target", type=float, default=2.0, help="seconds each history query may take (exit 1 past it)")
    a = p.parse_args()
    query = a.generations // 2 + 1  # odd: the watched node is back home
    at = T0 + (query - 1) * STEP + STEP / 2
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        started = time.perf_counter()
        expected_leaf, expected_sha = build(root, a.generations, a.nodes, a.moves, query)
        size = (root / CLUSTER / "graphs" / "index.json").stat().st_size
        print(f"store: {a.generations} generations x {a.nodes} nodes, {a.moves} moves each; "
              f"index {size / 1e6:.1f} MB; built in {time.perf_counter() - started:.1f} s")  # fmt: skip
        store = ["--store", str(root), "--cluster", CLUSTER]
        floor, _ = timed(["--version"], a.repeat)
        t_node, out = timed(["history", *store, "--node", "gpu-000000", "--at", at.isoformat(), "--json"], a.repeat)
        got = json.loads(out)["node"]["place"]["f"][0]
        assert got == expected_leaf, (got, expected_leaf)
        graph_out = root / "at.json"
        t_graph, _ = timed(["history", *store, "--at", at.isoformat(), "--out", str(graph_out)], a.repeat)
        from topocast.model.graph import graph_from_json

        assert graph_from_json(graph_out.read_bytes()).content_hash() == expected_sha
        t_events, out = timed(["history", *store, "--node", "gpu-000000", "--json"], a.repeat)
        assert len(json.loads(out)["node"]["events"]) == a.generations
        print(f"{'query':<44} {'seconds':>8}")
        print(f"{'topocast --version (start-up floor)':<44} {floor:>8.3f}")
        print(f"{'history --node X --at T (where was X)':<44} {t_node:>8.3f}")
        print(f"{'history --at T --out FILE (graph at T)':<44} {t_graph:>8.3f}")
        print(f"{'history --node X (all its changes)':<44} {t_events:>8.3f}")
        print(f"answers checked against the replay: gpu-000000 at {at.isoformat()} on {expected_leaf}")
        slow = max(t_node, t_graph, t_events)
        print(f"target: every history query under {a.target:g} s: {'met' if slow <= a.target else 'MISSED'}")
        if slow > a.target:
            raise SystemExit(1)


if __name__ == "__main__":
    main()
