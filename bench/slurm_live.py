"""Live topology update vs reconfigure on a real slurmctld 26.05 with 10,000 nodes.

One scratch controller (Debian sid chroot, see docs/slurm-pull.md) runs a 3-level
tree: root -> 10 spines -> 200 leaves of 50 nodes. Each round moves one node to
another leaf, alternately

* **live**: the pull agent's live path (:func:`topocast.slurm.live.apply_topology`):
  atomic file swap, one ``scontrol update NodeName=.. Topology=..``, ``scontrol
  show topology`` compared with the file;
* **reconfigure**: the same agent forced down the reconfigure path (the 22.05-era
  behaviour): atomic swap, ``scontrol reconfigure``, ping, the same comparison.

Validation with a throwaway controller is off for both (it costs the same either
way; ``--validate`` turns it on). After every round the controller must still be
the same process, answer ping, and show the moved node under its new leaf. The
script prints per-path times (median of the rounds) and the ratio.

    .venv/bin/python bench/slurm_live.py [--nodes 10000] [--rounds 3] [--root /var/cache/topocast/slurm-sid]
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import sys
import time
from pathlib import Path

from topocast.model.hostlist import compact_str
from topocast.slurm import scontrol as sc
from topocast.slurm.controller import SlurmController, SlurmInstall
from topocast.slurm.live import apply_topology
from topocast.slurm.validate import format_version

PER_LEAF = 50
LEAVES_PER_SPINE = 20


def tree(nodes: list[str], leaf_of: dict[str, int]) -> str:
    leaves: dict[int, list[str]] = {}
    for n in nodes:
        leaves.setdefault(leaf_of[n], []).append(n)
    count = max(leaves) + 1
    spines = -(-count // LEAVES_PER_SPINE)
    lines = [f"SwitchName=root Switches=spine[{0:02d}-{spines - 1:02d}]"]
    for s in range(spines):
        first, last = s * LEAVES_PER_SPINE, min(count, (s + 1) * LEAVES_PER_SPINE) - 1
        lines.append(f"SwitchName=spine{s:02d} Switches=leaf[{first:03d}-{last:03d}]")
    for leaf in range(count):
        lines.append(f"SwitchName=leaf{leaf:03d} Nodes={compact_str(leaves.get(leaf, []))}")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--root", type=Path, default=Path("/var/cache/topocast/slurm-sid"))
    ap.add_argument("--validate", action="store_true", help="also validate each file with a throwaway controller")
    args = ap.parse_args()
    try:
        install = SlurmInstall.find(args.root)
    except Exception as exc:
        print(f"no current Slurm: {exc}", file=sys.stderr)
        return 2
    nodes = [f"gpu{i:05d}" for i in range(args.nodes)]
    leaf_of = {n: i // PER_LEAF for i, n in enumerate(nodes)}
    text = tree(nodes, leaf_of)
    t0 = time.perf_counter()
    ctl = SlurmController(nodes, topology=text, install=install, start_timeout=120, message_timeout=10)
    with ctl:
        started = time.perf_counter() - t0
        pid = ctl.pid
        print(
            f"slurmctld {format_version(install.version())}: {args.nodes} nodes, "
            f"{len(ctl.show_topology())} switches, started in {started:.2f} s (pid {pid})"
        )
        times: dict[str, list[float]] = {"live": [], "reconfigure": []}
        leaves = max(leaf_of.values()) + 1
        for r in range(args.rounds):
            for path in ("live", "reconfigure"):
                node = nodes[(2 * r + (path == "reconfigure")) * 37 % len(nodes)]
                target = (leaf_of[node] + leaves // 2 + r) % leaves
                leaf_of[node] = target
                text = tree(nodes, leaf_of)
                data = text.encode()
                start = time.perf_counter()
                result = apply_topology(
                    data,
                    ctl.topology_path,
                    expected_sha256=hashlib.sha256(data).hexdigest(),
                    validate=args.validate,
                    slurm_conf=ctl.conf_path,
                    install=install,
                    # max_share 0 sends every change down the reconfigure path
                    max_share=1.0 if path == "live" else 0.0,
                )
                elapsed = time.perf_counter() - start
                if not result.ok or result.applied != path:
                    print(f"round {r} {path}: FAILED: {result.message}", file=sys.stderr)
                    return 1
                up = ctl.ping() and ctl.is_running() and ctl.pid == pid
                placed = node in ctl.show_topology()[f"leaf{target:03d}"].nodes
                if not (up and placed):
                    print(f"round {r} {path}: controller up={up}, {node} placed={placed}", file=sys.stderr)
                    return 1
                times[path].append(elapsed)
                print(f"round {r} {path:<11} {node} -> leaf{target:03d}: {elapsed * 1000:8.1f} ms  (controller up)")
        # the controller's part alone: one scontrol update vs scontrol reconfigure until ping answers
        env = ctl.env()
        raw: dict[str, list[float]] = {"update": [], "reconfigure": []}
        for r in range(args.rounds):
            node = nodes[(2 * r + 1) * 101 % len(nodes)]
            spec = f"default:root:spine{r % 10:02d}:leaf{r * LEAVES_PER_SPINE % leaves:03d}"
            start = time.perf_counter()
            sc.update_node_topology(node, spec, ctl.scontrol_path, env)
            raw["update"].append(time.perf_counter() - start)
            start = time.perf_counter()
            sc.reconfigure(ctl.scontrol_path, env)
            while not ctl.ping():
                time.sleep(0.01)
            raw["reconfigure"].append(time.perf_counter() - start)
        up, rc = statistics.median(raw["update"]), statistics.median(raw["reconfigure"])
        print(
            f"controller only: scontrol update {up * 1000:.1f} ms, reconfigure until ping {rc * 1000:.1f} ms "
            f"({rc / up:.1f}x); still pid {ctl.pid}, up={ctl.ping()}"
        )
    live_s, reconf_s = statistics.median(times["live"]), statistics.median(times["reconfigure"])
    print(
        f"median live update {live_s * 1000:.1f} ms, reconfigure {reconf_s * 1000:.1f} ms: "
        f"reconfigure / live = {reconf_s / live_s:.2f}x"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
