"""``topocast demo``: the whole AWS pipeline on an embedded, simulated account.

No credentials and no network: a moto server in this process (S3, SQS, SSM,
EventBridge, DynamoDB, EC2) with topocast's wire-compatible
``DescribeInstanceTopology`` (:mod:`topocast_sim.ec2`), a generated GPU cluster,
a launch burst of EventBridge events, the real Lambda handlers invoked the way
Lambda invokes them (:mod:`topocast_sim.aws_pipeline`), and the head-node pull
agent installing ``topology.conf`` (validated by a throwaway slurmctld when one
is installed).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
import time
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from topocast.errors import TopocastError
from topocast.safeio.files import out_directory, write_file

CLUSTER = "demo"


@contextmanager
def quiet_logs(*names: str) -> Any:
    """The functions log JSON lines for CloudWatch / Cloud Logging; a demo shows a summary instead."""
    try:  # the Powertools logger owns "topocast" and keeps its level once built: build it, then lower it
        from topocast.aws.lambda_tools import tools

        tools()
    except ImportError:  # an install without the aws extra has no Powertools logger
        pass
    saved = {name: logging.getLogger(name).level for name in ("topocast", "werkzeug", *names)}
    for name in saved:
        logging.getLogger(name).setLevel(logging.ERROR)
    try:
        yield
    finally:
        for name, level in saved.items():
            logging.getLogger(name).setLevel(level)


def copy_outputs(artifacts: Any, out: Path, graph: Any = None) -> None:
    """labels.json, topology.html and the block file from the latest rendered manifest, into ``out``, and
    ``graph.json`` (the stored graph, for ``render --graph``, ``diff`` and ``render --previous``)."""
    if graph is not None:
        from topocast.model.graph import dump_graph

        write_file(out / "graph.json", dump_graph(graph))
    manifest = artifacts.latest_manifest()
    for fmt, name in (("k8s-labels", "labels.json"), ("html", "topology.html"), ("slurm-block", None)):
        entry = manifest.entry(fmt) if manifest else None
        if entry is not None:
            write_file(out / (name or entry.file), artifacts.get_artifact(manifest.generation, entry.file))


def write_report(result: dict[str, Any], out: Path, report: Path | None, started: float) -> dict[str, Any]:
    """Finish the report (seconds, outputs) and write it to ``report`` (default ``out/report.json``)."""
    path = report or out / "report.json"
    result["seconds"] = round(time.monotonic() - started, 2)
    result["outputs"] = sorted({q.name for q in out.iterdir()} | ({path.name} if path.parent == out else set()))
    write_file(path, json.dumps(result, indent=2) + "\n")
    return result


def _local_aws_env(endpoint: str) -> dict[str, str | None]:
    env = {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": "demo",
        "AWS_SECRET_ACCESS_KEY": "demo",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_REGION": "us-east-1",
        "AWS_SESSION_TOKEN": None,
        "AWS_PROFILE": None,
        "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent/topocast-demo",
        "AWS_CONFIG_FILE": "/nonexistent/topocast-demo",
        "AWS_EC2_METADATA_DISABLED": "true",
        "POWERTOOLS_METRICS_DISABLED": "true",
        "MOTO_EC2_LOAD_DEFAULT_AMIS": "false",
    }
    saved = {k: os.environ.get(k) for k in env}
    for k, v in env.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    return saved


def _restore_env(saved: dict[str, str | None]) -> None:
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


class Progress:
    """A rich progress display on a terminal, plain lines otherwise."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self._progress: Any = None
        self._task: Any = None

    def __enter__(self) -> Progress:
        if self.enabled:
            from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

            self._progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn())
            self._progress.__enter__()
            self._task = self._progress.add_task("starting", total=None)
        return self

    def step(self, text: str) -> None:
        if self._progress is not None:
            self._progress.update(self._task, description=text)
        else:
            print(f"  {text}", file=sys.stderr)

    def __exit__(self, *exc: Any) -> None:
        if self._progress is not None:
            self._progress.__exit__(*exc)


class DemoNotSettled(TopocastError):
    """The simulated pipeline still had work queued when the demo's wait ran out."""


def settle_timeout(events: int, max_wait: float) -> float:
    """How long the demo waits for the pipeline: the debounce's worst case, and more for a large storm."""
    return max(60.0, 4 * max_wait, events / 40)


def not_settled(pipeline: Any, waited: float, idle: bool) -> str:
    """One line saying what is still pending, instead of a ParameterNotFound from the pull later."""
    pending = pipeline.pending_by_queue()
    parts = [
        f"{queue} queue {counts['visible']} visible, {counts['in_flight']} in flight, {counts['delayed']} delayed"
        for queue, counts in pending.items()
        if any(counts.values())
    ]
    counters = pipeline.runtime.counters
    done = f"{counters.discover_runs} discover run(s), {counters.renders} render(s), {counters.publishes} publish(es)"
    if idle:
        return f"the pipeline settled after {waited:.0f} s but published nothing ({done}); see the held/failed log"
    return f"the pipeline did not settle within {waited:.0f} s: {'; '.join(parts) or 'nothing queued'} ({done})"


def run_demo(
    nodes: int = 256,
    events: int | None = None,
    out: Path = Path("out/demo"),
    report: Path | None = None,
    *,
    cpu_nodes: int = 2,
    quiet: float = 2.0,
    max_wait: float = 20.0,
    progress: bool | None = None,
    watch: bool = False,
    leading_edge: bool = False,
) -> dict[str, Any]:
    """Run the pipeline and write ``out``; returns the report (also written to ``report``).

    ``watch``: the head node's agent runs ``pull --watch`` while the pipeline works, woken by the
    published parameter's change event (:mod:`topocast_sim.watch_agent`), instead of one pull after
    the pipeline settled. ``leading_edge``: ``TOPOCAST_DEBOUNCE_LEADING_EDGE`` on.
    """
    from moto.server import ThreadedMotoServer

    from topocast.agents.pull import pull
    from topocast_sim import ec2 as ec2_sim
    from topocast_sim.aws_pipeline import LocalAwsPipeline

    started = time.monotonic()
    events = nodes if events is None else events
    out_directory(out)  # root may run the demo: no directory another user could plant links in
    show = sys.stderr.isatty() if progress is None else progress
    ec2_sim.install()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    saved: dict[str, str | None] = {}
    agent: Any = None
    with quiet_logs("botocore"), Progress(show) as prog:
        server.start()
        try:
            host, port = server.get_host_and_port()
            saved = _local_aws_env(f"http://{host}:{port}")
            prog.step(f"simulated AWS account on http://{host}:{port}")
            pipeline = LocalAwsPipeline(
                CLUSTER, quiet=quiet, max_wait=max_wait, extra_settings={"debounce_leading_edge": leading_edge}
            )
            source = f"ssm:///topocast/{CLUSTER}/slurm/topology-tree.conf"
            slurmctld = shutil.which("slurmctld") is not None
            pointer: dict[str, Any] = {
                "pointer_bucket": pipeline.bucket,
                "pointer_prefix": f"{pipeline.runtime.settings.prefix}/{CLUSTER}/published",
            }
            if watch:
                import boto3

                from topocast.agents.pull_watch import SqsWaker
                from topocast_sim.watch_agent import WatchingAgent, aws_watch_queue, play_parameter_store

                sqs, bus = boto3.client("sqs"), boto3.client("events")
                queue = aws_watch_queue(bus, sqs, name=f"topocast-{CLUSTER}", ssm_path=f"/topocast/{CLUSTER}/slurm")
                play_parameter_store(pipeline.runtime.ssm, bus)
                dest = out / "topology.conf"
                agent = WatchingAgent(
                    lambda: pull(source, dest, reconfigure=False, validate=slurmctld, slurm_conf=None, **pointer),
                    dest,
                    SqsWaker(queue, sqs),
                ).start()
                prog.step(f"head node: pull --watch on {queue.rsplit('/', 1)[-1]} (Parameter Store change events)")
            prog.step(f"launching {nodes} {ec2_sim.ULTRASERVER_TYPE} instances (3-level fabric, UltraServers of 18)")
            ids = ec2_sim.generate_cluster(pipeline.ec2, nodes, cluster_tag=("topocast:cluster", CLUSTER))
            if cpu_nodes:  # login/CPU nodes: members of the cluster, but EC2 has no topology for them
                ids += ec2_sim.generate_cluster(
                    pipeline.ec2,
                    cpu_nodes,
                    instance_type="m5.xlarge",
                    block_size=None,
                    cluster_tag=("topocast:cluster", CLUSTER),
                    name_prefix="login-",
                )
            burst = (ids * (events // max(len(ids), 1) + 1))[:events]
            prog.step(f"launch burst: {len(burst)} EC2 state-change events through EventBridge")
            emitted: list[float] = []  # each event's emission (its PutEvents call returned)
            for start in range(0, len(burst), 10):
                pipeline.emit_state_changes(burst[start : start + 10])
                emitted += [time.time()] * len(burst[start : start + 10])
            prog.step(f"discover -> render (quiet window {quiet:g} s) -> publish")
            settle = settle_timeout(len(burst), max_wait)
            settle_started = time.monotonic()
            reached: dict[str, float] = {}

            def tick() -> None:  # when the graph holding the burst and its publish first appeared
                counters = pipeline.runtime.counters
                if "graph" not in reached and counters.discover_runs:
                    latest = pipeline.runtime.graphs.latest()
                    if latest is not None and len(latest.graph.nodes) >= len(ids):
                        reached["graph"] = time.time()
                if "published" not in reached and counters.publishes:
                    reached["published"] = time.time()

            idle = pipeline.run_until_idle(timeout=settle, on_tick=tick)
            if not idle or pipeline.runtime.counters.publishes == 0:
                raise DemoNotSettled(not_settled(pipeline, time.monotonic() - settle_started, idle))
            if agent is not None:
                prog.step("pull agent (watch): woken by the publish -> verify -> validate -> install")
                from topocast.agents.pull import fetch

                pulled, watched = watched_install(agent, lambda: fetch(source, **pointer).content, reached)
            else:
                prog.step("pull agent: SSM -> verify -> validate -> install")
                pulled = pull(source, out / "topology.conf", reconfigure=False, validate=slurmctld, slurm_conf=None,
                              **pointer)  # fmt: skip
                reached["installed"] = time.time()
                watched = None
            stored = pipeline.runtime.graphs.latest()
            graph = stored.graph if stored else None
            copy_outputs(pipeline.runtime.artifacts, out, graph)
            counters = pipeline.runtime.counters
            result: dict[str, Any] = {
                "cloud": "aws",
                "events": len(burst),
                "discover_runs": counters.discover_runs,
                "api_calls": counters.api_calls,
                "ec2_api_calls": counters.api_calls,  # the older name, kept
                "renders": counters.renders,
                "publishes": counters.publishes,
                "held_publishes": counters.held,
                "nodes": len(graph.nodes) if graph else 0,
                "nodes_without_topology": len(graph.nodes_without_topology()) if graph else 0,
                "generation": stored.generation if stored else None,
                "malformed_events": counters.malformed,
                "pull": {
                    "action": pulled.action,
                    "ok": pulled.ok,
                    # only an install is validated: an unchanged file was checked when it was installed
                    "validated_by_slurmctld": slurmctld and pulled.action == "installed",
                    "sha256": pulled.sha256,
                    "mode": "watch" if watched else "once",
                    **({"watch": watched} if watched else {}),
                },
                "idle": idle,
                "settle_seconds": round(time.monotonic() - settle_started, 2),
                "discover_invocations": pipeline.stats.discover_invocations,
                "max_batch_held_seconds": round(pipeline.stats.max_held_seconds, 2),
                "latency": event_latency(emitted, reached),
            }
        finally:
            if agent is not None:
                agent.stop(5)
            server.stop()
            _restore_env(saved)
    return write_report(result, out, report, started)


def watched_install(
    agent: Any, published: Callable[[], bytes], reached: dict[str, float], timeout: float = 60.0
) -> tuple[Any, dict[str, Any]]:
    """Wait for the watching agent to install the published file; note when (``reached["installed"]``).

    Returns the agent's last pull and what the watch did (pulls, notifications, fallbacks).
    """
    from topocast_sim.watch_agent import conf_node_names

    names = conf_node_names(published())
    at = agent.wait_installed(names, timeout)
    agent.stop()
    if at is not None:
        reached["installed"] = at
    stats = agent.stats
    watched = {"pulls": stats.pulls, "notified": stats.notified, "fallbacks": stats.fallbacks,
               "installed_in_time": at is not None}  # fmt: skip
    last = agent.last_install if at is not None else agent.last
    if last is None or at is None:
        why = "no pull ran" if last is None else f"the last pull: {last.action} ({last.detail})"
        raise DemoNotSettled(f"pull --watch did not install the published file within {timeout:.0f} s; {why}")
    return last, watched


def event_latency(emitted: list[float], reached: dict[str, float]) -> dict[str, dict[str, float]]:
    """Seconds from each event's emission to each stage's moment (graph, published, installed): p50/p99/max.

    The graph is the first generation holding every instance; published, the first publish; installed,
    the pull agent's install (with ``--watch`` the watching agent's; else one pull after the pipeline settled).
    """
    out: dict[str, dict[str, float]] = {}
    for stage, at in reached.items():
        waits = sorted(at - t for t in emitted)
        if waits:
            p50, p99 = (waits[min(len(waits) - 1, round(q * (len(waits) - 1)))] for q in (0.5, 0.99))
            out[stage] = {"p50": round(p50, 2), "p99": round(p99, 2), "max": round(waits[-1], 2)}
    return out


def watch_note(pulled: dict[str, Any]) -> str:
    w = pulled.get("watch")
    return f" by pull --watch ({w['pulls']} pulls, {w['notified']} notified)" if w else ""


def summary(result: dict[str, Any], out: Path) -> str:
    """Three lines for the terminal; the files are the report's ``outputs`` (what is really in ``out``)."""
    calls = result.get("api_calls", result.get("ec2_api_calls"))
    api = "Compute" if result.get("cloud") == "gcp" else "EC2"
    return (
        f"{result['events']} events -> {result['discover_runs']} discover run(s), "
        f"{calls} {api} calls -> {result['renders']} render(s) -> {result['publishes']} publish(es)\n"
        f"{result['nodes']} nodes ({result['nodes_without_topology']} without topology), "
        f"generation {result['generation']}, pull: {result['pull']['action']}"
        f"{' (validated by slurmctld)' if result['pull']['validated_by_slurmctld'] else ''}"
        f"{watch_note(result['pull'])}, "
        f"{result['seconds']} s\n"
        f"wrote {out}/: {', '.join(result['outputs'])} ({result.get('cloud', 'aws')})"
        + "".join(
            f"\nevent -> {stage}: p50 {v['p50']} s, p99 {v['p99']} s, max {v['max']} s"
            for stage, v in result.get("latency", {}).items()
        )
    )
