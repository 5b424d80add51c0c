"""Time to the scheduler: seconds from each instance event to the graph, the published file and the head node.

The AWS pipeline on an in-process moto server (:class:`topocast_sim.aws_pipeline.LocalAwsPipeline`:
the Lambda handlers, EventBridge -> SQS -> discover -> debounce -> render -> publish to SSM) and
the pull agent in watch mode (:func:`topocast.agents.pull_watch.watch` with its SQS waker) on the
queue an EventBridge rule on Parameter Store change events feeds, as Terraform wires it. moto
does not emit Parameter Store change events, so after each ``PutParameter`` of the publisher the
bench puts the event Systems Manager would send (``aws.ssm`` / ``Parameter Store Change``).

For every event, the time from its emission (the ``PutEvents`` call returned) to

* (a) ``graph``: the first stored graph generation that holds the instance's node,
* (b) ``published``: the first published topology-tree.conf (SSM) that lists it,
* (c) ``installed``: the agent's install of a file that lists it,

as p50 / p99 / max, for three loads, each with the leading-edge option off and on:

* ``idle``: one event after the pipeline was quiet for longer than the quiet window;
* ``burst``: 1,000 events (1,000 new instances) at once;
* ``storm``: 10,000 events (2,000 new instances, five deliveries each: EventBridge is at least once).

Renders and publishes per load are counted (goal: at most two each).

    .venv/bin/python bench/latency.py [--quiet 15] [--loads idle,burst,storm] [--edge off,on] [--scale 1.0]
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from topocast_sim.watch_agent import conf_node_names

os.environ.setdefault("MOTO_EC2_LOAD_DEFAULT_AMIS", "false")
REGION = "us-east-1"
CLUSTER = "lat"
PARAM = f"/topocast/{CLUSTER}/slurm/topology-tree.conf"


def _env(endpoint: str) -> None:
    os.environ.update(
        AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION=REGION, AWS_REGION=REGION,
        AWS_ENDPOINT_URL=endpoint, AWS_EC2_METADATA_DISABLED="true", POWERTOOLS_METRICS_DISABLED="true",
    )  # fmt: skip


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


class Run:
    """One pipeline + watching agent; :meth:`load` emits events and times them to (a), (b), (c)."""

    def __init__(self, quiet: float, max_wait: float, leading_edge: bool, tmp: Path) -> None:
        import boto3

        from topocast.agents.pull import pull
        from topocast.agents.pull_watch import SqsWaker
        from topocast_sim.aws_pipeline import LocalAwsPipeline
        from topocast_sim.watch_agent import WatchingAgent, aws_watch_queue, play_parameter_store

        self.pl = LocalAwsPipeline(
            CLUSTER, quiet=quiet, max_wait=max_wait, extra_settings={"debounce_leading_edge": leading_edge}
        )
        self.events = boto3.client("events", region_name=REGION)
        self.sqs = boto3.client("sqs", region_name=REGION)
        self.ssm = boto3.client("ssm", region_name=REGION)
        self.queue = aws_watch_queue(self.events, self.sqs, name=CLUSTER, ssm_path=f"/topocast/{CLUSTER}/slurm")
        play_parameter_store(self.pl.runtime.ssm, self.events)
        etc = tmp / "etc"
        etc.mkdir(mode=0o755, exist_ok=True)
        dest, state = etc / "topology.conf", tmp / "pull-state.json"
        self.agent = WatchingAgent(
            lambda: pull(f"ssm://{PARAM}", dest, reconfigure=False, validate=False, slurm_conf=None,
                         state_file=state, ssm=self.ssm),
            dest,
            SqsWaker(self.queue, self.sqs),
        )  # fmt: skip

    def launch(self, n: int, prefix: str) -> list[tuple[str, str]]:
        """``n`` new instances: (instance id, node name)."""
        from topocast_sim import ec2 as ec2_sim

        ids = ec2_sim.generate_cluster(self.pl.ec2, n, cluster_tag=("topocast:cluster", CLUSTER), name_prefix=prefix)
        out = []
        for start in range(0, len(ids), 500):
            resp = self.pl.ec2.describe_instances(InstanceIds=ids[start : start + 500])
            for r in resp["Reservations"]:
                for i in r["Instances"]:
                    out.append((i["InstanceId"], next(t["Value"] for t in i["Tags"] if t["Key"] == "Name")))
        return out

    def load(self, instances: list[tuple[str, str]], copies: int, timeout: float) -> dict[str, Any]:
        """Emit ``copies`` events per instance; pump until every node is installed; the times per event."""
        pl = self.pl
        counts = pl.runtime.counters
        before = (counts.renders, counts.publishes)
        emitted: dict[str, float] = {}
        by_id = dict(instances)
        ids = [iid for iid, _ in instances] * copies
        times: list[float] = []
        for start in range(0, len(ids), 10):  # PutEvents takes 10 entries
            pl.emit_state_changes(ids[start : start + 10])
            now = time.time()
            for iid in ids[start : start + 10]:
                times.append(now)
                emitted.setdefault(by_id[iid], now)
        nodes = set(emitted)
        seen: dict[str, dict[str, float]] = {"graph": {}, "published": {}, "installed": {}}
        last_gen = 0
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pl.pump_discover()
            stored = pl.runtime.graphs.latest()
            if stored is not None and stored.generation != last_gen:
                last_gen = stored.generation
                now = time.time()
                for n in stored.graph.nodes:
                    if n.name in nodes:
                        seen["graph"].setdefault(n.name, now)
            pl.pump_render()
            if pl.pump_publish():
                from topocast.agents.pull import fetch

                now = time.time()
                for name in conf_node_names(fetch(f"ssm://{PARAM}", ssm=self.ssm).content) & nodes:
                    seen["published"].setdefault(name, now)
            for install in list(self.agent.installs):
                for name in install.names & nodes:
                    seen["installed"].setdefault(name, install.at)
            if len(seen["installed"]) == len(nodes):
                break
            time.sleep(0.05)
        # every event of a node counts from its own emission to the node's first appearance
        stage = {k: [v[name] - t for (iid, t) in zip(ids, times, strict=True) if (name := by_id[iid]) in v]
                 for k, v in seen.items()}  # fmt: skip
        missing = {k: len(ids) - len(v) for k, v in stage.items() if len(v) < len(ids)}
        return {
            "events": len(ids), "stage": stage, "missing": missing,
            "renders": counts.renders - before[0], "publishes": counts.publishes - before[1],
        }  # fmt: skip

    def settle(self, timeout: float = 300.0) -> None:
        assert self.pl.run_until_idle(timeout=timeout), "the pipeline did not settle"


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--quiet", type=float, default=15.0, help="debounce quiet window (s), the default setting")
    ap.add_argument("--max-wait", type=float, default=120.0)
    ap.add_argument("--loads", default="idle,burst,storm")
    ap.add_argument("--edge", default="off,on", help="leading-edge option runs: off, on or both")
    ap.add_argument("--scale", type=float, default=1.0, help="shrink the burst and storm (0.1: 100 and 1,000 events)")
    args = ap.parse_args()

    from moto.server import ThreadedMotoServer

    from topocast_sim import ec2 as ec2_sim

    ec2_sim.install()
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    logging.getLogger("topocast").setLevel(logging.ERROR)  # the pipeline's own warnings are not the figures
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    _env(f"http://{host}:{port}")
    loads = {"idle": (1, 1), "burst": (round(1000 * args.scale), 1), "storm": (round(2000 * args.scale), 5)}
    print(f"quiet window {args.quiet:g} s, max wait {args.max_wait:g} s (load average {os.getloadavg()[0]:.1f} "
          f"on {os.cpu_count()} CPUs); seconds from each event's emission to:")  # fmt: skip
    head = f"{'load':<7}{'edge':<5}{'events':>7}  " + "".join(
        f"{s + ' p50/p99/max':>24}" for s in ("(a) graph", "(b) published", "(c) installed")
    )
    print(head + f"{'renders':>9}{'publishes':>10}")
    try:
        for edge in args.edge.split(","):
            reset = urllib.request.Request(f"http://{host}:{port}/moto-api/reset", method="POST")
            urllib.request.urlopen(reset, timeout=30).close()  # each run starts from an empty account
            with tempfile.TemporaryDirectory() as tmp:
                run = Run(args.quiet, args.max_wait, edge == "on", Path(tmp))
                run.agent.start()
                run.launch(64, f"{edge}-base-gpu-")
                warm = run.launch(16, f"{edge}-warm-gpu-")  # the first run (cold) is not what is timed
                run.load(warm, 1, timeout=300)
                run.settle()
                for i, name in enumerate(args.loads.split(",")):
                    n, copies = loads[name]
                    instances = run.launch(n, f"{edge}-{name}{i}-gpu-")
                    time.sleep(args.quiet + 1.0)  # idle for longer than the quiet window
                    r = run.load(instances, copies, timeout=args.max_wait + 10 * args.quiet + 300)
                    cols = ""
                    for stage in ("graph", "published", "installed"):
                        v = r["stage"][stage]
                        cell = f"{statistics.median(v):.1f} / {pct(v, 0.99):.1f} / {max(v):.1f}" if v else "-"
                        cols += f"{cell:>24}"
                    note = f"  missing {r['missing']}" if r["missing"] else ""
                    print(f"{name:<7}{edge:<5}{r['events']:>7}  {cols}{r['renders']:>9}{r['publishes']:>10}{note}",
                          flush=True)  # fmt: skip
                    run.settle()
                run.agent.stop(1)
    finally:
        server.stop()


if __name__ == "__main__":
    main()
