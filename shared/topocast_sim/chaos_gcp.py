"""The GCP twin of :mod:`topocast_sim.chaos_aws`: a seeded chaos run of the whole GCP pipeline.

:class:`topocast_sim.gcp_pipeline.LocalGcpPipeline` runs the real functions under functions-framework
against the Compute REST fake, the Cloud Storage emulator and the local Cloud Tasks (Terraform's
retry policy, compressed). Each round creates, deletes, stops and starts VMs (a start, or a live
migration for host maintenance, lands the VM under another sub-block) and delivers their audit-log
events the way Eventarc does at its worst: each 1-3 times, shuffled, some held back until the others
were processed, some never (only when the run allows it); a delivery that fails (5xx, or the
connection broken by a dying instance) is delivered again after the others, as Eventarc retries.
Compute may answer 429 for a round, and in some rounds one write (a Cloud Storage object, a Cloud
Tasks task) fails with an exception or the instance dies in it (:class:`~topocast_sim.chaos_aws.Died`),
after which a fresh composition root serves the retry.

Checked as on AWS: right at each round's idle point when nothing was dropped, converged after one
reconcile, generations never going back, no delivery dropped by Cloud Tasks.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from topocast_sim import eventarc
from topocast_sim.chaos_aws import Crasher, Outcome, placements, split_deliveries
from topocast_sim.gce import Placement, generate_cluster

__all__ = ["run"]

CLUSTER = "chaos"
LABEL = ("topocast-cluster", CLUSTER)


@contextmanager
def _intercepted(crasher: Crasher) -> Iterator[None]:
    from topocast.gcp.gcs import GcsObjects
    from topocast.gcp.tasks import TaskQueue

    real_put, real_send, real_hook = GcsObjects.put, TaskQueue.send_event, threading.excepthook

    def put(objects: Any, key: str, *args: Any, **kwargs: Any) -> Any:
        crasher.check(f"gcs put {key.rsplit('/', 2)[-2]}/{key.rsplit('/', 1)[-1]}")
        return real_put(objects, key, *args, **kwargs)

    def send(queue: Any, *args: Any, **kwargs: Any) -> Any:
        crasher.check("cloud tasks create")
        return real_send(queue, *args, **kwargs)

    GcsObjects.put = put  # type: ignore[method-assign, assignment]
    TaskQueue.send_event = send  # type: ignore[method-assign, assignment]
    # a death ends the request thread: the connection closes unanswered, as when an instance dies
    threading.excepthook = lambda args: None
    try:
        yield
    finally:
        GcsObjects.put = real_put  # type: ignore[method-assign]
        TaskQueue.send_event = real_send  # type: ignore[method-assign]
        threading.excepthook = real_hook


def run(
    seed: int,
    *,
    rounds: int = 6,
    start: int = 60,
    drops: bool = False,
    late: float = 0.12,
    drop: float = 0.05,
    crash_share: float = 1 / 3,
) -> Outcome:
    """One seeded run (see the module docstring)."""
    from topocast.agents.pull import fetch
    from topocast.gcp import handlers
    from topocast.gcp.clients import storage_client
    from topocast.providers.gcp.provider import GcpDiscoveryConfig, discover_full
    from topocast.providers.gcp.sdk import compute_client
    from topocast.renderers import render
    from topocast_sim.gcp_pipeline import LocalGcpPipeline

    rng = random.Random(seed)
    began = time.monotonic()
    out = Outcome(seed, rounds)
    gen = generate_cluster(start + 4 * rounds, label=LABEL, hosts_per_subblock=8, subblocks_per_block=4)
    pool, gen.instances = list(gen.instances), []
    subblocks = sorted({(p.cluster, p.block, p.subblock) for p in gen.placements.values() if p is not None})
    pl = LocalGcpPipeline(gen, name=CLUSTER, quiet=0.3, max_wait=2.0, window=0.3)
    crasher = Crasher(lambda what: ConnectionError(f"injected failure at {what}"))
    zone_of = {inst["name"]: str(inst["zone"]).rsplit("/", 1)[-1] for inst in pool}

    def event(inst: dict[str, Any], method: str) -> tuple[dict[str, Any], Any]:
        return eventarc.audit_log_event(
            project=gen.project, project_number=gen.project_number, zone=zone_of[inst["name"]],
            name=inst["name"], instance_id=inst["id"], method=method,
        )  # fmt: skip

    def deliver(events: list[tuple[dict[str, Any], Any]]) -> None:
        """Eventarc's push: a delivery not answered 2xx is retried after the others (up to 5 attempts)."""
        url = pl.servers["discover"].url
        for attempt in range(5):
            failed, died = [], False
            for attrs, data in events:
                try:
                    status = eventarc.post(url, attrs, data)
                except OSError:  # the instance died mid-request: the connection closed unanswered
                    status, died = 0, True
                if not 200 <= status < 300:
                    failed.append((attrs, data))
            if not failed:
                return
            if died:
                handlers._RUNTIMES.clear()  # a new instance serves the retry
            out.faults.append(f"{len(failed)} delivery(ies) retried (attempt {attempt + 2})")
            events = failed
        out.problems.append(f"{len(events)} event(s) never accepted after 5 attempts")

    def settle() -> None:
        if not pl.run_until_idle(timeout=180):
            out.problems.append(f"the pipeline did not settle: {pl.tasks.pending()} task(s) left")
        handlers._RUNTIMES.clear()  # whatever died, later deliveries meet a fresh root

    def truth() -> dict[str, str]:
        pl.compute.inject_faults(0)
        config = GcpDiscoveryConfig.from_data(
            {"cluster": CLUSTER, "project": gen.project, "labels": [f"{LABEL[0]}={LABEL[1]}"]}
        )
        graph = discover_full(compute_client(pl.compute.url), config).graph
        return placements(render(graph, "slurm-tree").content)

    def published() -> tuple[dict[str, str], int | None]:
        try:
            source = f"gcs://{pl.bucket}/topocast/{CLUSTER}/slurm/topology-tree.conf"
            art = fetch(source, gcs=storage_client("t", pl.gcs.url))
        except Exception as exc:
            out.problems.append(f"fetch the published tree: {exc}")
            return {}, None
        return placements(art.content.decode()), art.generation

    def check() -> bool:
        expected, (got, generation) = truth(), published()
        out.note_generation(generation)
        return got == expected

    def move(inst: dict[str, Any]) -> None:
        cl, block, sub = rng.choice(subblocks)
        where = Placement(cluster=cl, block=block, subblock=sub, host=f"h-{rng.randrange(10**6)}")
        inst["resourceStatus"] = {
            "physicalHost": f"/{where.block}/{where.subblock}/{where.host}",
            "physicalHostTopology": {"cluster": cl, "block": block, "subblock": sub, "host": where.host},
        }

    with pl, _intercepted(crasher):
        running, pool = pool[:start], pool[start:]
        pl.compute.add(running)
        deliver([event(i, "v1.compute.instances.insert") for i in running])
        settle()
        stopped: list[dict[str, Any]] = []
        dropped_any = False
        for rnd in range(rounds):
            events: list[tuple[dict[str, Any], Any]] = []
            k = rng.randint(1, 4)
            new, pool = pool[:k], pool[k:]
            pl.compute.add(new)
            running += new
            events += [event(i, "v1.compute.instances.insert") for i in new]
            for _ in range(rng.randint(0, 2)):
                inst = running.pop(rng.randrange(len(running)))
                pl.compute.remove(zone_of[inst["name"]], inst["name"])
                events.append(event(inst, "v1.compute.instances.delete"))
            for _ in range(rng.randint(0, 2)):
                inst = running.pop(rng.randrange(len(running)))
                pl.compute.set_status(zone_of[inst["name"]], inst["name"], "TERMINATED")
                inst["scheduling"] = {**inst.get("scheduling", {}), "automaticRestart": False}
                stopped.append(inst)
                events.append(event(inst, "v1.compute.instances.stop"))
            for _ in range(rng.randint(0, 2)):
                if stopped:
                    inst = stopped.pop(rng.randrange(len(stopped)))
                    move(inst)  # a start lands the VM on another host
                    pl.compute.set_status(zone_of[inst["name"]], inst["name"], "RUNNING")
                    running.append(inst)
                    events.append(event(inst, "v1.compute.instances.start"))
            if rng.random() < 0.5:  # a live migration for host maintenance moves a running VM
                inst = rng.choice(running)
                move(inst)
                events.append(
                    eventarc.system_event(
                        project=gen.project, zone=zone_of[inst["name"]], name=inst["name"], instance_id=inst["id"],
                        method="compute.instances.migrateOnHostMaintenance",
                    )
                )  # fmt: skip
            bodies = [e for e in events for _ in range(rng.randint(1, 3))]
            rng.shuffle(bodies)
            sent, held, lost = split_deliveries(rng, bodies, drops=drops, drop=drop, late=late)
            dropped_any = dropped_any or bool(lost)
            out.faults += [f"r{rnd}: dropped {body[0].get('methodname') or 'a system event'}" for body in lost]
            if held:
                out.faults.append(f"r{rnd}: {len(held)} late")
            if rng.random() < 0.25:
                pl.compute.inject_faults(0.2, status=429)
                out.faults.append(f"r{rnd}: Compute answers 429 to 20%")
            if rng.random() < crash_share:
                crasher.arm(rng.randint(0, 6), rng.choice(["exception", "death"]))
            deliver(sent)
            settle()
            deliver(held)
            settle()
            pl.compute.inject_faults(0)
            crasher.end_round(rnd, out.faults)
            if not dropped_any:
                out.idle_checks.append(check())
        pl.reconcile()
        settle()
        out.converged = check()
        dropped = pl.tasks.counts["failed"]
        if dropped:
            out.problems.append(f"Cloud Tasks dropped {dropped} task(s) after their last attempt")
    out.seconds = time.monotonic() - began
    return out
