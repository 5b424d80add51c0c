"""A large change on a real slurmctld 26.05 with 10,000 nodes: live calls vs the reconfigure they replace,
and the pull agent choosing by the cost it measured.

bench/slurm_live.py's tree (root -> 10 spines -> 200 leaves of 50 nodes). Three changes, each moving
``--moved`` nodes (default 1,000) to 100 existing leaves, through :func:`topocast.slurm.live.apply_topology`
as ``topocast pull --live --live-max-share 0.1`` runs it, with the costs a state file would carry:

1. live (no reconfigure measured yet: the 10 % share decides);
2. by reconfigure (forced, as a change the share sends there would be): now one is measured;
3. the next such change: the agent compares ``move_call`` x calls + ``check`` with that reconfigure.

After each: the controller is the same process and every node is where the file says.

    .venv/bin/python bench/slurm_cost.py [--nodes 10000] [--moved 1000] [--root /var/cache/topocast/slurm-sid]
"""

from __future__ import annotations

import argparse
import hashlib
import random
import sys
import time
from pathlib import Path

from slurm_live import PER_LEAF, tree

from topocast.slurm.controller import SlurmController, SlurmInstall
from topocast.slurm.converge import shown_specs
from topocast.slurm.live import Costs, apply_topology, placements
from topocast.slurm.scontrol import show_topology_text


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=10_000)
    ap.add_argument("--moved", type=int, default=1_000)
    ap.add_argument("--root", type=Path, default=Path("/var/cache/topocast/slurm-sid"))
    a = ap.parse_args()
    install = SlurmInstall.find(a.root)
    nodes = [f"gpu{i:05d}" for i in range(a.nodes)]
    leaf_of = {n: i // PER_LEAF for i, n in enumerate(nodes)}
    leaves = max(leaf_of.values()) + 1
    rng = random.Random(28)
    costs = Costs()
    with SlurmController(nodes, topology=tree(nodes, leaf_of), install=install, start_timeout=300) as ctl:
        pid = ctl.pid
        print(f"slurmctld {install.release()}: {a.nodes} nodes, pid {pid}")
        for step, share in (("1 live", 0.1), ("2 reconfigure", 0.0), ("3 by measured cost", 0.1)):
            targets = rng.sample(range(leaves), 100)
            for i, node in enumerate(rng.sample(nodes, a.moved)):
                leaf_of[node] = targets[i % len(targets)]
            data = tree(nodes, leaf_of).encode()
            started = time.perf_counter()
            result = apply_topology(
                data, ctl.topology_path, expected_sha256=hashlib.sha256(data).hexdigest(), validate=False,
                slurm_conf=ctl.conf_path, install=install, max_share=share, costs=costs,
            )  # fmt: skip
            took = time.perf_counter() - started
            costs = costs.learn(result.timings)
            shown = show_topology_text(ctl.scontrol_path, ctl.env())
            right = shown_specs("default", "tree", shown) == placements(data.decode()).specs
            print(
                f"{step}: {result.applied} in {took:.2f} s, {a.nodes if right else 'NOT all'} nodes right, "
                f"pid {'same' if ctl.pid == pid else 'CHANGED'}; {result.why[:140]}"
            )
            print(f"    learned: {costs.as_dict()}")
            if not (result.ok and right and ctl.pid == pid):
                print(result.message[:500], file=sys.stderr)
                return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
