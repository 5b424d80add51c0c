"""What the pull agent's drift check costs on every run, on a real slurmctld 26.05 with 10,000 nodes.

The check (:mod:`topocast.slurm.converge`) reads the controller once and compares it with the
installed file's placements. One scratch controller with slurmrestd (Debian sid chroot, JWT auth)
runs bench/slurm_live.py's tree (root -> 10 spines -> 200 leaves of 50 nodes); the script times

* **scontrol**: ``scontrol show topology`` parsed into each node's place, compared with the file
  (the complete view: what a timer run or a watch wake pays);
* **slurmrestd**: one ``GET /slurm/vX/nodes/`` (the partial view: live ``Topology=`` values only);
* the file's own parse (``placements``), which every run pays once.

It then moves ``--drift`` nodes live behind the agent's back and checks the scontrol view finds
exactly them. Medians of ``--rounds``.

    .venv/bin/python bench/slurm_drift.py [--nodes 10000] [--rounds 3] [--root /var/cache/topocast/slurm-sid]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from slurm_live import PER_LEAF, tree

from topocast.slurm.controller import SlurmInstall, ensure_proc
from topocast.slurm.converge import find_drift
from topocast.slurm.live import ScontrolUpdater, placements
from topocast.slurm.rest import RestUpdater, connect
from topocast.slurm.rest_token import SlurmToken
from topocast_sim.slurmrest import RestCluster


def timed(fn: object, rounds: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(rounds):
        started = time.perf_counter()
        out = fn()  # type: ignore[operator]
        times.append(time.perf_counter() - started)
    return statistics.median(times), out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--drift", type=int, default=6)
    ap.add_argument("--root", type=Path, default=Path("/var/cache/topocast/slurm-sid"))
    a = ap.parse_args()
    install = SlurmInstall.find(a.root)
    ensure_proc(a.root)
    nodes = [f"n{i:05d}" for i in range(a.nodes)]
    text = tree(nodes, {n: i // PER_LEAF for i, n in enumerate(nodes)})
    parent = a.root / "srv" / "topocast-bench"
    parent.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="drift-", dir=parent))
    ctl = RestCluster(nodes, install=install, workdir=workdir, topology=text, start_timeout=300)
    try:
        ctl.start()
        ctl.url = ctl.start_rest(timeout=120)
        os.environ.update(ctl.env())  # auth/slurm: scontrol needs the controller's sack socket
        rest = RestUpdater(connect(ctl.url, SlurmToken(ctl.token, "root"), timeout=120))
        local = ScontrolUpdater(install, ctl.conf_path)
        kinds = [("default", "tree")]
        parse_s, found = timed(lambda: placements(text), a.rounds)
        specs = found.specs  # type: ignore[attr-defined]
        sc_s, drift = timed(lambda: find_drift(specs, local.view(kinds), nodes), a.rounds)
        rest_s, rdrift = timed(lambda: find_drift(specs, rest.view(kinds), nodes), a.rounds)
        assert not drift and not rdrift, (drift, rdrift)
        moved = nodes[: a.drift]
        local.move(",".join(moved), "default:root:spine09:leaf199")
        _, drift = timed(lambda: find_drift(specs, local.view(kinds), nodes), 1)
        _, rdrift = timed(lambda: find_drift(specs, rest.view(kinds), nodes), 1)
        found_sc = sorted(drift.misplaced)  # type: ignore[attr-defined]
        found_rest = sorted(rdrift.misplaced)  # type: ignore[attr-defined]
        print(f"slurmctld {install.release()}, {a.nodes} nodes, medians of {a.rounds}")
        print(f"  parse the installed file:               {parse_s * 1000:8.0f} ms")
        print(f"  drift check, scontrol show topology:    {sc_s * 1000:8.0f} ms")
        print(f"  drift check, slurmrestd GET nodes:      {rest_s * 1000:8.0f} ms")
        print(f"  {a.drift} nodes moved behind its back: scontrol finds {len(found_sc)}, slurmrestd {len(found_rest)}")
        return 0 if found_sc == moved and found_rest == moved else 1
    finally:
        ctl.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
