"""``topocast demo --cloud gcp``: the whole GCP pipeline on an embedded, simulated project.

No credentials and no network: a local Compute Engine REST endpoint serving a
generated cluster with blocks and sub-blocks (:mod:`topocast_sim.gce_server`),
gcp-storage-emulator behind a generation-precondition proxy
(:mod:`topocast_sim.gcs`), a local Cloud Tasks (:mod:`topocast_sim.cloudtasks`),
and the three functions served by functions-framework from
``functions/*/main.py`` (:mod:`topocast_sim.gcp_pipeline`). The run:

1. a Cloud Scheduler reconcile (Pub/Sub CloudEvent) discovers the first VMs;
2. a managed instance group adds the rest: for each VM the first and the last
   audit-log entry of its ``instances.insert`` (project number in
   ``resourceName``), POSTed concurrently like Eventarc does;
3. discover batches them per window, render waits for the quiet window,
   publish writes ``topology.conf`` / ``topology.yaml`` objects;
4. the head-node pull agent installs ``gcs://.../topology.conf`` (validated by
   a throwaway slurmctld when one is installed).

Outputs in ``out``: ``topology.conf``, ``labels.json``, ``topology.html``,
``topology-block.conf``, ``graph.json`` and ``report.json`` (the same files, progress lines and
report keys as the AWS demo: ``api_calls``, ``settle_seconds``; ``compute_api_calls`` is an alias).
"""

from __future__ import annotations

import shutil
import sys
import threading
import time
from pathlib import Path
from typing import Any

from topocast.safeio.files import out_directory

CLUSTER = "demo"


def run_gcp_demo(
    nodes: int = 256,
    events: int | None = None,
    out: Path = Path("out/demo-gcp"),
    report: Path | None = None,
    quiet: float = 2.0,
    *,
    without_topology: int = 2,
    max_wait: float = 20.0,
    window: float = 1.0,
    progress: bool | None = None,
    watch: bool = False,
    leading_edge: bool = False,
) -> dict[str, Any]:
    """Run the GCP pipeline and write ``out``; returns the report (also written to ``report``).

    ``events``: VMs added by the managed instance group after the first
    reconcile (default: half of ``nodes``); each one is two audit-log events.
    ``watch``: the head node's agent runs ``pull --watch`` on its Pub/Sub subscription to the
    bucket's finalize notifications (:mod:`topocast_sim.watch_agent`) during the burst, instead of
    one pull after the pipeline settled. ``leading_edge``: ``TOPOCAST_DEBOUNCE_LEADING_EDGE`` on.
    """
    import os

    from topocast_sim.pubsub import FakePubSub

    pubsub = FakePubSub().start() if watch else None
    saved = os.environ.get("PUBSUB_EMULATOR_HOST")
    if pubsub is not None:  # where Cloud Storage (the proxy, maybe in its own process) sends notifications
        os.environ["PUBSUB_EMULATOR_HOST"] = pubsub.url.removeprefix("http://")
    try:
        return _run(nodes, events, out, report, quiet, without_topology, max_wait, window, progress, pubsub,
                    leading_edge)  # fmt: skip
    finally:
        if pubsub is not None:
            pubsub.stop()
            if saved is None:
                os.environ.pop("PUBSUB_EMULATOR_HOST", None)
            else:
                os.environ["PUBSUB_EMULATOR_HOST"] = saved


def _run(
    nodes: int,
    events: int | None,
    out: Path,
    report: Path | None,
    quiet: float,
    without_topology: int,
    max_wait: float,
    window: float,
    progress: bool | None,
    pubsub: Any,
    leading_edge: bool,
) -> dict[str, Any]:
    from topocast.agents.pull import pull
    from topocast.gcp import handlers
    from topocast_sim.demo import (
        DemoNotSettled,
        Progress,
        copy_outputs,
        event_latency,
        quiet_logs,
        watched_install,
        write_report,
    )
    from topocast_sim.gce import DEFAULT_MACHINE_TYPE, generate_cluster
    from topocast_sim.gcp_pipeline import LocalGcpPipeline

    started = time.monotonic()
    burst_size = nodes // 2 if events is None else min(events, nodes)
    out_directory(out)  # root may run the demo: no directory another user could plant links in
    generated = generate_cluster(
        nodes, label=("topocast-cluster", CLUSTER), without_topology=min(without_topology, nodes), seed=CLUSTER
    )
    everything = list(generated.instances)
    first, burst = everything[: nodes - burst_size], everything[nodes - burst_size :]
    generated.instances = first
    handlers.STATS.clear()
    show = sys.stderr.isatty() if progress is None else progress
    with (
        quiet_logs("topocast.gcp", "gcp_storage_emulator", "google"),
        Progress(show) as prog,
        LocalGcpPipeline(
            generated, name=CLUSTER, quiet=quiet, max_wait=max_wait, window=window, gcs_process=True,
            extra_env={"TOPOCAST_DEBOUNCE_LEADING_EDGE": "true"} if leading_edge else None,
        ) as p,
    ):  # fmt: skip
        from topocast.gcp.clients import storage_client

        source = f"gs://{p.bucket}/topocast/{CLUSTER}/slurm/topology-tree.conf"
        slurmctld = shutil.which("slurmctld") is not None
        agent: Any = None
        prog.step(f"simulated GCP project: Compute on {p.compute.url}, Cloud Storage on {p.gcs.url}")
        prog.step(f"launching {nodes} {DEFAULT_MACHINE_TYPE} VMs (blocks and sub-blocks, {len(first)} at first)")
        idle = True
        settle_started = time.monotonic()
        if first:
            prog.step("Cloud Scheduler reconcile through Pub/Sub")
            p.reconcile()
            idle = p.run_until_idle(timeout=max(60.0, 4 * max_wait))
            # the burst comes after an idle period longer than the quiet window (what a lone event after
            # a quiet hour sees; with --leading-edge it renders at once)
            prog.step(f"idle for {quiet + 1:g} s (longer than the quiet window)")
            time.sleep(quiet + 1.0)
        if pubsub is not None:
            import requests

            from topocast.agents.pull_watch import PubSubWaker
            from topocast_sim.watch_agent import WatchingAgent, gcs_notification_subscription

            gcs = storage_client("local", p.gcs.url)
            subscription = gcs_notification_subscription(
                pubsub.url, gcs, bucket=p.bucket, object_prefix=f"topocast/{CLUSTER}/slurm/",
                project=generated.project, name=f"topocast-{CLUSTER}",
            )  # fmt: skip
            dest = out / "topology.conf"
            agent = WatchingAgent(
                lambda: pull(source, dest, reconfigure=False, validate=slurmctld, slurm_conf=None, gcs=gcs),
                dest,
                PubSubWaker(subscription, requests.Session(), pubsub.url),
            ).start()
            prog.step(f"head node: pull --watch on {subscription.rsplit('/', 1)[-1]} (object finalize notifications)")
        p.compute.add(burst)
        audit = p.insert_events(burst, origin="mig")
        prog.step(f"launch burst: {len(audit)} audit-log events of {len(burst)} VMs through Eventarc")
        before = handlers.STATS.get("publishes", 0)
        p.emit(audit)
        emitted = [time.time()] * len(audit)  # Eventarc's deliveries are posted in one go: their end
        reached: dict[str, float] = {}
        went_idle = threading.Event()

        def watch() -> None:  # the functions run on their own: look for the graph and the publish
            while True:
                finished = went_idle.is_set()  # one more look after the pipeline went idle
                latest = p.runtime().graphs.latest()
                if "graph" not in reached and latest is not None and len(latest.graph.nodes) >= nodes:
                    reached["graph"] = time.time()
                if "published" not in reached and handlers.STATS.get("publishes", 0) > before:
                    reached["published"] = time.time()
                if finished or len(reached) == 2:
                    return
                went_idle.wait(0.02)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        prog.step(f"discover -> render (quiet window {quiet:g} s) -> publish")
        idle = p.run_until_idle(timeout=max(60.0, 4 * max_wait)) and idle
        went_idle.set()
        watcher.join(5)
        settle_seconds = round(time.monotonic() - settle_started, 2)
        if not idle or not handlers.STATS.get("publishes"):
            done = f"{handlers.STATS.get('discover_runs', 0)} discover run(s), {handlers.STATS.get('renders', 0)} "
            done += f"render(s), {handlers.STATS.get('publishes', 0)} publish(es); tasks {dict(p.tasks.counts)}"
            state = "settled but published nothing" if idle else "did not settle"
            raise DemoNotSettled(f"the pipeline {state} within {settle_seconds:.0f} s ({done})")
        rt = p.runtime()
        watched = None
        if agent is not None:
            from topocast.agents.pull import fetch

            prog.step("pull agent (watch): woken by the publish -> verify -> validate -> install")
            try:
                pulled, watched = watched_install(agent, lambda: fetch(source, gcs=gcs).content, reached)
            finally:
                agent.stop(5)
        else:
            prog.step("pull agent: Cloud Storage -> verify -> validate -> install")
            pulled = pull(source, out / "topology.conf", reconfigure=False, validate=slurmctld, slurm_conf=None,
                          gcs=storage_client("local", p.gcs.url))  # fmt: skip
            reached["installed"] = time.time()
        stored = rt.graphs.latest()
        graph = stored.graph if stored else None
        copy_outputs(rt.artifacts, out, graph)
        stats = dict(handlers.STATS)
        result: dict[str, Any] = {
            "cloud": "gcp",
            "events": p.sent,
            "discover_runs": stats.get("discover_runs", 0),
            "api_calls": p.compute.total_calls(),
            "compute_api_calls": p.compute.total_calls(),  # the older name, kept
            "renders": stats.get("renders", 0),
            "publishes": stats.get("publishes", 0),
            "held_publishes": stats.get("held", 0),
            "nodes": len(graph.nodes) if graph else 0,
            "nodes_without_topology": len(graph.nodes_without_topology()) if graph else 0,
            "generation": stored.generation if stored else None,
            "ignored_events": stats.get("ignored", 0),
            "malformed_events": stats.get("malformed", 0),
            "tasks": dict(p.tasks.counts),
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
            "settle_seconds": settle_seconds,
            "latency": event_latency(emitted, reached),
        }
    return write_report(result, out, report, started)
