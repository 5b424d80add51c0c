"""Soak the AWS pipeline in seeded chaos runs (topocast_sim.chaos_aws) and print every seed's outcome.

    python bench/chaos.py --seeds 20 --rounds 15            # no dropped events: right at every idle point
    python bench/chaos.py --seeds 20 --rounds 15 --drops    # 5% dropped: converged after one reconcile
    python bench/chaos.py --cloud gcp --seeds 10            # the GCP twin (topocast_sim.chaos_gcp)

Each line names the seed, the idle checks that were right, whether one reconcile converged, the
generations published, the dead-letter queue, and the faults the seed injected (late and dropped
events, EC2 throttling, the write that failed or killed the process). A failing seed is reproduced
with ``--first SEED --seeds 1``. Exit status 1 when any seed failed.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "shared"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=10, help="how many seeds (default: 10)")
    parser.add_argument("--first", type=int, default=1000, help="the first seed (default: 1000)")
    parser.add_argument("--rounds", type=int, default=15, help="rounds of churn per seed (default: 15)")
    parser.add_argument("--nodes", type=int, default=60, help="instances at the start (default: 60)")
    parser.add_argument("--drops", action="store_true", help="drop 5%% of the events (idle checks stop at a drop)")
    parser.add_argument("--cloud", choices=["aws", "gcp"], default="aws", help="which pipeline (default: aws)")
    a = parser.parse_args()
    os.environ["POWERTOOLS_METRICS_DISABLED"] = "true"
    if a.cloud == "gcp":
        import logging

        from topocast_sim.chaos_gcp import run as run_gcp

        logging.disable(logging.ERROR)  # the functions log every injected failure with its traceback
        failed = 0
        started = time.monotonic()
        for seed in range(a.first, a.first + a.seeds):
            outcome = run_gcp(seed, rounds=a.rounds, start=a.nodes, drops=a.drops)
            failed += not outcome.ok
            print(outcome.line(), flush=True)
        print(f"{a.seeds - failed}/{a.seeds} seeds ok in {time.monotonic() - started:.0f}s")
        return 1 if failed else 0

    from moto.server import ThreadedMotoServer

    from topocast_sim import ec2 as ec2_sim
    from topocast_sim.chaos_aws import run
    from topocast_sim.demo import _local_aws_env, quiet_logs

    ec2_sim.install()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    failed = 0
    started = time.monotonic()
    try:
        host, port = server.get_host_and_port()
        _local_aws_env(f"http://{host}:{port}")
        with quiet_logs("botocore"):
            for seed in range(a.first, a.first + a.seeds):
                outcome = run(seed, rounds=a.rounds, start=a.nodes, drops=a.drops)
                failed += not outcome.ok
                print(outcome.line(), flush=True)
    finally:
        server.stop()
    print(f"{a.seeds - failed}/{a.seeds} seeds ok in {time.monotonic() - started:.0f}s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
