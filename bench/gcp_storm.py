"""GCP discovery benchmark: Compute calls of a 1,000-VM MIG storm against the listing floor.

The whole GCP pipeline runs locally (``topocast_sim.gcp_pipeline.LocalGcpPipeline``: the three
functions under functions-framework, the Compute REST fake, the Cloud Storage emulator, Cloud
Tasks delivering over HTTP). A cluster of ``--existing`` VMs is discovered first; then a managed
instance group creates ``--storm`` VMs and Eventarc delivers the completing audit-log entry of
each (concurrently, as fast as the functions take them). Counted: the Compute requests the fake
served from the first storm event until the pipeline is idle.

The floor is what one full listing of the grown cluster costs: ``ceil((existing + storm) / 500)``
``aggregatedList`` pages. Goal: <= 2x, the same figure every run. ``read=get`` (one
``instances.get`` per changed VM, the behaviour before list-or-get) is shown for comparison.

Run by hand (about a minute per run on two cores):

    .venv/bin/python bench/gcp_storm.py [--existing 1000] [--storm 1000] [--runs 2] [--window 1.0]
"""

from __future__ import annotations

import argparse
import logging
import math
import time

from topocast_sim.gce import generate_cluster
from topocast_sim.gcp_pipeline import LocalGcpPipeline

PAGE = 500


def storm(existing: int, size: int, window: float, read: str) -> tuple[int, dict[str, int], int, float]:
    """(Compute calls during the storm, by operation, nodes at the end, seconds)."""
    gen = generate_cluster(existing + size, label=("topocast-cluster", "bench"), hosts_per_subblock=16)
    vms, gen.instances = gen.instances, gen.instances[:existing]
    env = {"TOPOCAST_GCP_READ": read, "TOPOCAST_FORMATS": "slurm-tree"}
    with LocalGcpPipeline(gen, name="bench", quiet=2.0, max_wait=60.0, window=window, full_scan_threshold=10**6,
                          extra_env=env, gcs_process=True) as pl:  # fmt: skip
        pl.reconcile()
        if not pl.run_until_idle(timeout=300):
            raise SystemExit("the first discovery did not finish")
        pl.compute.add(vms[existing:])
        pl.compute.reset_counts()
        started = time.monotonic()
        pl.emit(pl.insert_events(vms[existing:], origin="mig")[1::2], concurrency=8)
        if not pl.run_until_idle(timeout=600):
            raise SystemExit("the storm did not settle")
        seconds = time.monotonic() - started
        stored = pl.runtime().graphs.latest()
        nodes = len(stored.graph.nodes) if stored else 0
        return pl.compute.total_calls(), dict(pl.compute.calls), nodes, seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--existing", type=int, default=1000)
    ap.add_argument("--storm", type=int, default=1000)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--window", type=float, default=1.0, help="TOPOCAST_DISCOVER_WINDOW_SECONDS")
    ap.add_argument("--modes", default="auto,get", help="TOPOCAST_GCP_READ values to run")
    args = ap.parse_args()
    for name in ("topocast", "werkzeug", "gcp_storage_emulator", "google"):
        logging.getLogger(name).setLevel(logging.ERROR)
    floor = math.ceil((args.existing + args.storm) / PAGE)
    print(f"MIG storm of {args.storm} VMs on a cluster of {args.existing}: listing floor {floor} call(s)")
    print(f"{'read':>5} {'run':>3} {'calls':>6} {'x floor':>8} {'nodes':>6} {'seconds':>8}  by operation")
    for mode in args.modes.split(","):
        for run in range(1, args.runs + 1):
            calls, by_op, nodes, seconds = storm(args.existing, args.storm, args.window, mode)
            ops = ", ".join(f"{k}={v}" for k, v in sorted(by_op.items()))
            print(f"{mode:>5} {run:>3} {calls:>6} {calls / floor:>7.2f}x {nodes:>6} {seconds:>8.1f}  {ops}")


if __name__ == "__main__":
    main()
