"""AWS discovery benchmark: EC2 calls per discovery vs the minimum, and import cost vs boto3.

For each size N a fake GPU cluster is launched in an in-process moto server with
topocast's DescribeInstanceTopology simulator (``topocast_sim.ec2``), then:

* full discovery: EC2 calls made vs the minimum ``ceil(N/1000)`` DescribeInstances
  pages + ``ceil(N/100)`` DescribeInstanceTopology calls (ratio 1.00 = optimal),
  for both topology strategies, cross-checked with the calls the server saw;
* one instance event (a launch): calls made by the incremental update;
* import time of ``topocast.providers.aws.provider`` and ``topocast.aws.events`` in fresh
  interpreters, net of interpreter start-up, as a ratio to ``import boto3``
  (best of 5); pydantic with one model and ``topocast.model.graph`` are shown as the
  floor every topocast function pays anyway. Neither module imports boto3.

Columns: DI = DescribeInstances pages, DIT = DescribeInstanceTopology calls, min =
``ceil(N/1000) + ceil(N/100)``, server = calls the simulator saw (retries included).
moto pages DescribeInstances by *reservation* (the generator launches 1,000
instances per reservation), so at 10k it answers in 1 page where EC2 would use 10;
ratios below 1.00 come from that, not from topocast.

Run by hand (10k instances take about 4 minutes, mostly moto building XML):

    .venv/bin/python bench/aws.py [--sizes 1000,10000] [--no-names]
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

os.environ.setdefault("MOTO_EC2_LOAD_DEFAULT_AMIS", "false")  # before moto builds a backend: see sim.ec2
os.environ.update(AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench", AWS_EC2_METADATA_DISABLED="true")

REGION = "us-east-1"
REPO = Path(__file__).resolve().parent.parent


def import_seconds(code: str, repeat: int = 5) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True)
        best = min(best, time.perf_counter() - t)
    return best


IMPORTS = {
    "boto3": "import boto3",
    "pydantic + 1 model": "import pydantic\nclass M(pydantic.BaseModel):\n    x: int",
    "topocast.model.graph": "import topocast.model.graph",
    "topocast.aws.events": "import topocast.aws.events",
    "topocast.providers.aws.provider": "import topocast.providers.aws.provider",
    # the Lambda entry points exactly as the runtime loads them (handler.py at the zip root)
    **{
        f"functions/{stage}/handler.py": (
            f"import sys; sys.path.insert(0, {str(REPO / 'functions' / stage)!r}); import handler"
        )
        for stage in ("discover", "render", "publish")
    },
}


def imports_table() -> None:
    base = import_seconds("pass")
    net = {name: import_seconds(code) - base for name, code in IMPORTS.items()}
    print(f"\n{'import (fresh interpreter)':<28} {'ms net':>7} {'x boto3':>8}")
    print(f"{'(interpreter start-up)':<28} {base * 1000:>7.1f}")
    for name, t in net.items():
        print(f"{name:<28} {t * 1000:>7.1f} {t / net['boto3']:>8.2f}")


def row(n: int, what: str, api_calls: dict[str, int], minimum: int, seconds: float) -> str:
    from topocast_sim import ec2 as sim

    di, dit = api_calls.get("DescribeInstances", 0), api_calls.get("DescribeInstanceTopology", 0)
    seen = sum(sim.call_counts().values())
    calls = di + dit
    ratio = calls / minimum
    return f"{n:>6} {what:<24} {di:>4} {dit:>4} {calls:>5} {minimum:>5} {ratio:>5.2f} {seen:>6} {seconds:>6.2f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,10000")
    ap.add_argument("--no-names", action="store_true", help="skip Name tags (saves one CreateTags per instance)")
    ap.add_argument("--no-imports", action="store_true")
    args = ap.parse_args()

    from moto.server import ThreadedMotoServer

    from topocast.model.changes import InstanceChange
    from topocast.providers.aws.provider import AwsDiscoveryConfig, discover_full, discover_instances
    from topocast.providers.aws.sdk import ec2_client
    from topocast_sim import ec2 as sim

    sim.install()
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    os.environ["AWS_ENDPOINT_URL"] = f"http://{host}:{port}"
    name_from = "private-dns" if args.no_names else "tag:Name"
    cfg = AwsDiscoveryConfig(cluster="demo", region=REGION, filters=["tag:topocast:cluster=demo"], name_from=name_from)
    print(f"{'N':>6} {'what':<24} {'DI':>4} {'DIT':>4} {'calls':>5} {'min':>5} {'ratio':>5} {'server':>6} {'s':>6}")
    try:
        for n in [int(s) for s in args.sizes.split(",")]:
            urllib.request.urlopen(urllib.request.Request(f"http://{host}:{port}/moto-api/reset", method="POST"))
            ec2 = ec2_client(REGION)
            t = time.perf_counter()
            sim.generate_cluster(ec2, n, name_prefix=None if args.no_names else "gpu-")
            t_gen = time.perf_counter() - t
            print(f"{n:>6} {'launch + tag (moto)':<24} {'':>35} {t_gen:>6.1f}")
            minimum = math.ceil(n / 1000) + math.ceil(n / 100)
            graph = None
            for strategy in ("ids", "listing"):
                sim.reset_counts()
                t = time.perf_counter()
                res = discover_full(ec2, cfg.model_copy(update={"topology_strategy": strategy}))
                took = time.perf_counter() - t
                assert len(res.graph.nodes) == n and not res.warnings, res.warnings
                graph = graph or res.graph
                assert res.graph == graph, "strategies disagree"
                print(row(n, f"full discovery ({strategy})", res.api_calls, minimum, took))
            new = sim.generate_cluster(ec2, 1, name_prefix=None)
            sim.reset_counts()
            t = time.perf_counter()
            res = discover_instances(ec2, cfg, graph, [InstanceChange(new[0], "upsert", "bench")])
            took = time.perf_counter() - t
            print(row(n, "one launch event", res.api_calls, 2, took))
    finally:
        server.stop()
    if not args.no_imports:
        imports_table()


if __name__ == "__main__":
    main()
