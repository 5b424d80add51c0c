"""Demo load benchmark: a launch storm through the whole simulated AWS pipeline, idle and beside a CPU hog.

Each case runs ``topocast demo --nodes N --events E`` in a fresh process (moto in
process, the real handlers, the Lambda-like SQS poller of
:mod:`topocast_sim.aws_pipeline`) and reads its report. The goal for every case:
it settles, with exactly one render and one publish, and the EC2 calls stay
within 2x the minimum of one full discovery: ``ceil(n/1000)`` DescribeInstances
pages + ``ceil(n/100)`` DescribeInstanceTopology calls for the n instances
(N GPU nodes + the demo's 2 login nodes). ``--hog`` adds the same cases with a
busy-looping process beside the demo (on a 2-core machine: half the CPU gone).

Columns: s = wall seconds of the demo, settle = seconds until the queues were
empty, disc = discover invocations, held = longest a gathered batch was held
before its invocation (the queue's visibility timeout is 60 s), ratio = EC2
calls / minimum.

Run by hand (the 10,000-event storm takes a minute or two on a busy 2-core machine):

    .venv/bin/python bench/demo_load.py [--nodes 1000] [--events 1000,10000] [--hog]
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

LOGIN_NODES = 2  # run_demo's cpu_nodes


def minimum_calls(instances: int) -> int:
    return math.ceil(instances / 1000) + math.ceil(instances / 100)


def run_case(nodes: int, events: int, hog: bool) -> dict[str, object]:
    hog_proc = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if hog else None
    try:
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "demo"
            started = time.monotonic()
            proc = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "topocast.cli.commands",
                    "demo",
                    *("--nodes", str(nodes), "--events", str(events)),
                    "--out",
                    str(out),
                ],
                capture_output=True,
                text=True,
                check=False,
                timeout=900,
            )
            wall = time.monotonic() - started
            if proc.returncode != 0 or not (out / "report.json").exists():
                return {"events": events, "hog": hog, "error": (proc.stderr.strip().splitlines() or ["?"])[-1]}
            report = json.loads((out / "report.json").read_text())
    finally:
        if hog_proc is not None:
            hog_proc.kill()
            hog_proc.wait()
    minimum = minimum_calls(nodes + LOGIN_NODES)
    return {
        "events": events,
        "hog": hog,
        "seconds": round(wall, 1),
        "settle": report.get("settle_seconds"),
        "discover": report.get("discover_invocations"),
        "held": report.get("max_batch_held_seconds"),
        "ec2": report["ec2_api_calls"],
        "min": minimum,
        "ratio": round(report["ec2_api_calls"] / minimum, 2),
        "renders": report["renders"],
        "publishes": report["publishes"],
        "pull": report["pull"]["action"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--events", default="1000,10000", help="comma-separated storm sizes")
    parser.add_argument("--hog", action="store_true", help="also run every case beside a CPU hog")
    args = parser.parse_args()
    storms = [int(e) for e in args.events.split(",") if e.strip()]
    cases = [(e, False) for e in storms] + ([(e, True) for e in storms] if args.hog else [])
    print(f"{'events':>7} {'hog':>4} {'s':>6} {'settle':>7} {'disc':>5} {'held':>5} {'ec2':>4} {'min':>4} "
          f"{'ratio':>5} {'rend':>4} {'pub':>4}  pull")  # fmt: skip
    ok = True
    for events, hog in cases:
        row = run_case(args.nodes, events, hog)
        if "error" in row:
            print(f"{events:>7} {'yes' if hog else 'no':>4}  FAILED: {row['error']}")
            ok = False
            continue
        good = row["renders"] == 1 and row["publishes"] == 1 and float(row["ratio"]) <= 2.0  # type: ignore[arg-type]
        ok = ok and good
        print(
            f"{events:>7} {'yes' if hog else 'no':>4} {row['seconds']:>6} {row['settle']:>7} {row['discover']:>5} "
            f"{row['held']:>5} {row['ec2']:>4} {row['min']:>4} {row['ratio']:>5} {row['renders']:>4} "
            f"{row['publishes']:>4}  {row['pull']}{'' if good else '  <- goal missed'}"
        )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
