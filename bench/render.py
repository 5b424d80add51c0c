"""Render benchmark, whole process: ``topocast render`` against a process that only ``json.load``s the file.

Graphs of 1k, 10k and 100k nodes in one or more shapes (``--shapes``, :data:`SHAPES`: ``compact``,
4 switch tiers, 18 nodes per leaf, fan-out 8, 72-node NVLink domains; ``synth``, what ``topocast synth``
writes by default, 3 tiers; ``sparse``, 4 tiers of fan-out 4, 18-node capacity blocks and 1% of the
nodes without topology; generated here, see :mod:`graphgen`) are written as compact graph JSON. For each size and
case, a run is a *pair* of fresh processes started back to back: ``python -c 'json.load(f)'`` and
``topocast render --graph FILE -f ... --out DIR``; the ratio is taken per pair and the median of
the pairs is printed, for wall time and for CPU time (user + system, from ``wait4``: steadier on
a shared machine). Peak memory is the render process's max RSS. The in-process line compares
``load_graph`` with ``json.load`` of the same file inside this process (median of paired runs).

Goals at 100k nodes (README): tree+block+labels <= 3x, every format alone <= 6x, ``-f all`` (every
format, HTML and graph included, in one process) <= 6x with peak memory <= 500 MB, in-process load <= 1.5x.

    .venv/bin/python bench/render.py [--sizes 1000,10000,100000] [--pairs 3] [--cases goal,each,all]
        [--shapes compact,synth,sparse]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from graphgen import write_graph

from topocast.renderers import RENDERERS

GOAL_FORMATS = ["slurm-tree", "slurm-block", "k8s-labels"]
ALL_FORMATS = list(RENDERERS)  # every registered format, in --format all order
BASELINE = "import json, sys\nwith open(sys.argv[1], 'rb') as f:\n    json.load(f)\n"
TOPOCAST = [sys.executable, "-m", "topocast.cli"]
#: graph shape -> :func:`topocast.model.synth.synthetic_data` keywords
SHAPES: dict[str, dict[str, float | int]] = {
    "compact": {"levels": 4, "nodes_per_leaf": 18, "fanout": 8, "domain_size": 72},
    "synth": {"levels": 3, "nodes_per_leaf": 18, "fanout": 8, "domain_size": 72},
    "sparse": {"levels": 4, "nodes_per_leaf": 18, "fanout": 4, "domain_size": 18, "missing_fraction": 0.01},
}


def timed(argv: list[str]) -> tuple[float, float, float]:
    """Run ``argv``; return (wall s, cpu s, max RSS MB) of that one child process."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode() if proc.stderr else ""
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({proc.returncode}): {err}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def paired(path: Path, formats: list[str], out: Path, pairs: int) -> tuple[float, float, float, float]:
    """Median wall ratio, median CPU ratio, median baseline wall (s), max render RSS (MB)."""
    walls, cpus, base_walls, rss = [], [], [], 0.0
    argv = [*TOPOCAST, "render", "--graph", str(path), *(x for f in formats for x in ("-f", f)), "--out", str(out)]
    for _ in range(pairs):
        b_wall, b_cpu, _ = timed([sys.executable, "-c", BASELINE, str(path)])
        r_wall, r_cpu, r_rss = timed(argv)
        walls.append(r_wall / b_wall)
        cpus.append(r_cpu / b_cpu)
        base_walls.append(b_wall)
        rss = max(rss, r_rss)
    return statistics.median(walls), statistics.median(cpus), statistics.median(base_walls), rss


def in_process_load(path: Path, pairs: int) -> float:
    """Median of paired (load_graph time / json.load time); results stay alive until timed (freeing
    them is not part of loading, and a process that exits after its work never pays it)."""
    from topocast.model.graph import load_graph

    ratios = []
    for _ in range(pairs):
        t = time.perf_counter()
        with open(path, "rb") as f:
            data = json.load(f)
        t_json = time.perf_counter() - t
        del data
        t = time.perf_counter()
        graph = load_graph(path)
        ratios.append((time.perf_counter() - t) / t_json)
        del graph
    return statistics.median(ratios)


def verdict(value: float, goal: float | None) -> str:
    if goal is None:
        return ""
    return f"goal <= {goal:g}: {'OK' if value <= goal else 'OVER'}"


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--pairs", type=int, default=3, help="paired runs per case (median is printed)")
    ap.add_argument("--cases", default="goal,each,all", help="goal (tree+block+labels), each (every format), all")
    ap.add_argument("--shapes", default="compact,synth", help=f"graph shapes: {', '.join(SHAPES)}")
    args = ap.parse_args()
    cases = set(args.cases.split(","))
    shapes = args.shapes.split(",")
    unknown = [s for s in shapes if s not in SHAPES]
    if unknown:
        raise SystemExit(f"unknown shape(s) {', '.join(unknown)}; known: {', '.join(SHAPES)}")
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} ({os.cpu_count()} CPUs)")
    print(f"{'nodes':>7}  {'case':<18} {'wall x':>7} {'cpu x':>7} {'peak MB':>8}  (x = ratio to a json.load process)")
    with tempfile.TemporaryDirectory() as tmp:
        for shape, n in ((shape, int(s)) for shape in shapes for s in args.sizes.split(",")):
            print(f"-- {shape}: {SHAPES[shape]}")
            path = Path(tmp) / f"graph-{shape}-{n}.json"
            write_graph(path, n, **SHAPES[shape])
            big = n >= 100_000
            load = in_process_load(path, max(args.pairs, 3))
            print(
                f"{n:>7}  {'load (in process)':<18} {load:>7.2f} {'':>7} {'':>8}  {verdict(load, 1.5 if big else None)}"
            )
            runs: list[tuple[str, list[str], float | None, float | None]] = []
            if "goal" in cases:
                runs.append(("tree+block+labels", GOAL_FORMATS, 3.0 if big else None, None))
            if "each" in cases:
                runs += [(f, [f], 6.0 if big else None, None) for f in ALL_FORMATS]
            if "all" in cases:
                runs.append(("all", ["all"], 6.0 if big else None, 500.0 if big else None))
            base = 0.0
            for label, formats, goal, mem_goal in runs:
                wall, cpu, base, rss = paired(path, formats, Path(tmp) / "out", args.pairs)
                notes = [verdict(wall, goal)] + ([f"peak MB {verdict(rss, mem_goal)}"] if mem_goal else [])
                note = "; ".join(n for n in notes if n)
                print(f"{n:>7}  {label:<18} {wall:>7.2f} {cpu:>7.2f} {rss:>8.0f}  {note}", flush=True)
            print(f"{n:>7}  (json.load process: {base * 1000:.0f} ms wall, file {path.stat().st_size / 1e6:.1f} MB)")


if __name__ == "__main__":
    main()
