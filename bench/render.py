"""Render benchmark: per format, render time as a ratio to ``json.load`` of the same graph file.

Graphs of 1k, 10k and 100k nodes (4-level fabric, 72-node NVLink domains). For each size the
graph is written to a temp file, ``json.load`` is timed (best of 3), then every format is
rendered (best of 3) and its peak memory measured with tracemalloc in a separate pass.
Goal (README): tree + block + labels for 100k nodes within 3x the JSON parse time.

    .venv/bin/python bench/render.py [--sizes 1000,10000,100000] [--formats slurm-tree,...]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import tracemalloc
from pathlib import Path

from topocast.graph import dump_graph, load_graph
from topocast.renderers import RENDERERS, RenderOptions, render
from topocast_sim.synthetic import synthetic_graph

GOAL_FORMATS = ("slurm-tree", "slurm-block", "k8s-labels")


def best_of(fn, repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def peak_mib(fn) -> float:
    tracemalloc.start()
    fn()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak / 2**20


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--formats", default=",".join(RENDERERS))
    ap.add_argument("--no-memory", action="store_true", help="skip the tracemalloc pass (slow at 100k)")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    formats = args.formats.split(",")
    opts = RenderOptions()
    print(f"{'nodes':>7} {'format':<12} {'render s':>9} {'x json.load':>11} {'peak MiB':>9}")
    for n in sizes:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "graph.json"
            path.write_text(dump_graph(synthetic_graph(n), indent=None))
            t_json = best_of(lambda p=path: json.loads(p.read_bytes()))
            t_load = best_of(lambda p=path: load_graph(p), repeat=1)
            graph = load_graph(path)
        print(f"{n:>7} {'json.load':<12} {t_json:>9.3f} {1.0:>11.2f}")
        print(f"{n:>7} {'load+validate':<12} {t_load:>9.3f} {t_load / t_json:>11.2f}")
        goal = 0.0
        for fmt in formats:
            t = best_of(lambda f=fmt, g=graph: render(g, f, opts))
            mem = 0.0 if args.no_memory else peak_mib(lambda f=fmt, g=graph: render(g, f, opts))
            if fmt in GOAL_FORMATS:
                goal += t
            print(f"{n:>7} {fmt:<12} {t:>9.3f} {t / t_json:>11.2f} {mem:>9.1f}")
        verdict = "OK" if goal <= 3 * t_json else "over goal"
        print(f"{n:>7} {'tree+block+labels':<12} {goal:>9.3f} {goal / t_json:>11.2f}   goal <= 3.00: {verdict}")


if __name__ == "__main__":
    main()
