"""A seeded chaos run of the whole AWS pipeline: a churning cluster, an unreliable event bus, crashes.

One :func:`run` drives :class:`topocast_sim.aws_pipeline.LocalAwsPipeline` (the real Lambda handlers
on moto, Terraform's queue timeouts) through ``rounds`` rounds. Each round the world changes
(launches, terminations, stops, starts that move the instance to another leaf) and the EC2 events of
those changes reach the events queue the way EventBridge delivers them at its worst: each one 1-3
times, shuffled, some held back until the others were processed (late), some never (dropped, only
when the run allows it). EC2 may throttle for a round, and in some rounds one write of the pipeline (an S3 put,
a DynamoDB write, an SQS send, an SSM put) fails: with an exception, or with the process dying
there (:class:`Died`, a ``BaseException`` no handler catches, as a Lambda timeout or OOM), after which
the batch returns after its visibility timeout to a fresh composition root.

What is checked (:class:`Outcome`): at the idle point that ends each round, when no event was
dropped so far, the published ``topology-tree.conf`` places every node
exactly as a fresh full discovery of the cluster does; after the last round and one reconcile, it does
so in every run; published generations never go backwards; the dead-letter queue
stays empty (nothing malformed is sent). ``tests/test_chaos.py`` runs a few seeds, ``bench/chaos.py``
soaks many and prints every seed's faults and outcome.
"""

from __future__ import annotations

import json
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

from topocast_sim import ec2 as ec2_sim

T = TypeVar("T")

__all__ = ["Crasher", "Died", "Outcome", "placements", "run", "split_deliveries"]

#: each run is a cluster of its own (its tag, its parameters), so runs sharing one moto server never meet
CLUSTER = "chaos-{seed}-{run}"
#: the writes a crash may hit: (service, operation)
WRITES = {
    ("s3", "PutObject"),
    ("dynamodb", "PutItem"),
    ("dynamodb", "UpdateItem"),
    ("sqs", "SendMessage"),
    ("sqs", "SendMessageBatch"),
    ("ssm", "PutParameter"),
}


class Died(BaseException):
    """The process died here: no ``except Exception`` runs."""


@dataclass
class Outcome:
    seed: int
    rounds: int
    faults: list[str] = field(default_factory=list)
    #: idle checks where everything emitted had been delivered and nothing dropped: (right, total)
    idle_checks: list[bool] = field(default_factory=list)
    converged: bool = False
    generations: list[int] = field(default_factory=list)
    dlq: int = 0
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def note_generation(self, generation: int | None) -> None:
        """The generation published at an idle point: it must never go back."""
        if generation is None:
            return
        if self.generations and generation < self.generations[-1]:
            self.problems.append(f"generation went back: {self.generations[-1]} -> {generation}")
        self.generations.append(generation)

    @property
    def ok(self) -> bool:
        return self.converged and all(self.idle_checks) and not self.problems

    def line(self) -> str:
        right = sum(self.idle_checks)
        return (
            f"seed {self.seed}: {'ok' if self.ok else 'FAILED'}; idle checks right {right}/{len(self.idle_checks)}, "
            f"converged {self.converged}, generations {self.generations[:1]}..{self.generations[-1:]}, "
            f"dlq {self.dlq}, {self.seconds:.1f}s; faults: {', '.join(self.faults) or 'none'}"
            + (f"; problems: {'; '.join(self.problems)}" if self.problems else "")
        )


class Crasher:
    """Arms one failure at the ``n``-th write from now: ``error(what)`` raised, or the process dies."""

    def __init__(self, error: Callable[[str], Exception]) -> None:
        self.error = error
        self.countdown: int | None = None
        self.kind = "exception"
        self.fired: list[str] = []
        self.lock = threading.Lock()  # the GCP functions write from several request threads

    def arm(self, after: int, kind: str) -> None:
        with self.lock:
            self.countdown, self.kind = after, kind

    def check(self, what: str) -> None:
        with self.lock:
            if self.countdown is None:
                return
            if self.countdown > 0:
                self.countdown -= 1
                return
            self.countdown = None
            self.fired.append(f"{self.kind} at {what}")
            kind = self.kind
        raise Died(what) if kind == "death" else self.error(what)

    def end_round(self, rnd: int, faults: list[str]) -> None:
        """Disarm; what fired this round goes to ``faults``."""
        with self.lock:
            faults += [f"r{rnd}: {f}" for f in self.fired]
            self.fired.clear()
            self.countdown = None


def _aws_write_failed(what: str) -> Exception:
    from botocore.exceptions import EndpointConnectionError

    return EndpointConnectionError(endpoint_url=f"http://{what.split('.', 1)[0]}.injected")


def split_deliveries(
    rng: random.Random, bodies: list[T], *, drops: bool, drop: float, late: float
) -> tuple[list[T], list[T], list[T]]:
    """(sent now, held back until the others were processed, dropped: only when ``drops``)."""
    sent: list[T] = []
    held: list[T] = []
    lost: list[T] = []
    for body in bodies:
        r = rng.random()
        (lost if drops and r < drop else held if r < drop + late else sent).append(body)
    return sent, held, lost


@contextmanager
def _intercepted(crasher: Crasher) -> Iterator[None]:
    import botocore.client

    base: Any = botocore.client.BaseClient  # _make_api_call is botocore's private hook, not in its stubs
    real = base._make_api_call

    def call(client: Any, op: str, params: dict[str, Any]) -> Any:
        service = client.meta.service_model.service_name
        if (service, op) in WRITES:
            crasher.check(f"{service}.{op}")
        return real(client, op, params)

    base._make_api_call = call
    try:
        yield
    finally:
        base._make_api_call = real


def _event(region: str, iid: str, state: str, when: float) -> str:
    return json.dumps(
        {
            "version": "0",
            "id": str(uuid.uuid4()),
            "detail-type": "EC2 Instance State-change Notification",
            "source": "aws.ec2",
            "account": "123456789012",
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(when)),
            "region": region,
            "resources": [f"arn:aws:ec2:{region}:123456789012:instance/{iid}"],
            "detail": {"instance-id": iid, "state": state},
        }
    )


def placements(text: str) -> dict[str, str]:
    """node -> the leaf switch a topology-tree.conf puts it under (as Slurm's parser reads it)."""
    from topocast.slurm.topofile import parse_topology

    topo = parse_topology(text)
    return {node: name for name, sw in topo.switches.items() for node in sw.nodes}


def run(
    seed: int,
    *,
    rounds: int = 6,
    start: int = 60,
    drops: bool = False,
    late: float = 0.12,
    drop: float = 0.05,
    crash_share: float = 1 / 3,
    log: Callable[[str], None] | None = None,
) -> Outcome:
    """One seeded run (see the module docstring); needs ``AWS_ENDPOINT_URL`` pointing at a moto server."""
    from topocast.agents.pull import fetch
    from topocast.aws.root import AwsRuntime
    from topocast.providers.aws.provider import AwsDiscoveryConfig, discover_full
    from topocast.renderers import render
    from topocast_sim.aws_pipeline import LocalAwsPipeline

    rng = random.Random(seed)
    began = time.monotonic()
    out = Outcome(seed, rounds)
    cluster = CLUSTER.format(seed=seed, run=uuid.uuid4().hex[:6])
    tag = ("topocast:cluster", cluster)
    tree = f"ssm:///topocast/{cluster}/slurm/topology-tree.conf"
    pl = LocalAwsPipeline(cluster, quiet=0.3, max_wait=2.0)
    region = pl.region
    crasher = Crasher(_aws_write_failed)
    ec2 = pl.ec2

    def fresh_root() -> None:
        pl.runtime = AwsRuntime(pl.runtime.settings, region=region, clock=pl.runtime.clock)

    def settle(limit: float = 180.0) -> None:
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            moved = 0
            for pump in (pl.pump_discover, pl.pump_render, pl.pump_publish):
                try:
                    moved += pump()
                except Died:  # the batch stays in flight; a new instance of the function takes the retry
                    fresh_root()
                    moved += 1
            if not moved and pl.pending() == 0:
                return
            if not moved:
                pl.skip_long_wait()
                time.sleep(0.05)
        out.problems.append(f"the pipeline did not settle in {limit:g}s: {pl.pending_by_queue()}")

    def truth() -> dict[str, str]:
        config = AwsDiscoveryConfig.from_data(
            {"cluster": cluster, "filters": [f"tag:{tag[0]}={tag[1]}"], "name_from": "tag:Name"}
        )
        ec2_sim.clear_faults()
        graph = discover_full(ec2, config).graph
        return placements(render(graph, "slurm-tree").content)

    def published() -> tuple[dict[str, str], int | None]:
        try:
            art = fetch(tree, ssm=pl.ssm, s3=pl.s3)
        except Exception as exc:
            if "ParameterNotFound" not in repr(exc):  # else: nothing published yet
                out.problems.append(f"fetch {tree}: {exc}")
            return {}, None
        return placements(art.content.decode()), art.generation

    def check(kind: str) -> bool:
        expected, (got, generation) = truth(), published()
        out.note_generation(generation)
        if got != expected:
            wrong = sorted(n for n in set(got) | set(expected) if got.get(n) != expected.get(n))
            if log:
                sample = ", ".join(f"{n}: {got.get(n)} (truth {expected.get(n)})" for n in wrong[:3])
                log(f"  {kind}: generation {generation}: {len(wrong)} node(s) wrong, e.g. {sample}")
        return got == expected

    index = 0

    def launch(n: int) -> list[str]:
        nonlocal index
        ids = ec2_sim.generate_cluster(ec2, n, cluster_tag=tag, name_prefix=f"r{index:03d}-", nodes_per_leaf=8)
        index += 1
        return ids

    with _intercepted(crasher):
        running = launch(start)
        pl.emit_state_changes(running)
        settle()
        stopped: list[str] = []
        dropped_any = False
        for rnd in range(rounds):
            now = time.time()
            events: list[tuple[str, str]] = []
            new = launch(rng.randint(1, 4))
            running += new
            events += [(i, s) for i in new for s in ("pending", "running")]
            for _ in range(rng.randint(0, 2)):
                if len(running) > 4:
                    gone = running.pop(rng.randrange(len(running)))
                    ec2.terminate_instances(InstanceIds=[gone])
                    events += [(gone, "shutting-down"), (gone, "terminated")]
            for _ in range(rng.randint(0, 2)):
                if len(running) > 4:
                    iid = running.pop(rng.randrange(len(running)))
                    ec2.stop_instances(InstanceIds=[iid])
                    stopped.append(iid)
                    events += [(iid, "stopping"), (iid, "stopped")]
            for _ in range(rng.randint(0, 2)):
                if stopped:
                    iid = stopped.pop(rng.randrange(len(stopped)))
                    leaf = rng.randrange(8)  # a start lands the instance on another host: maybe another leaf
                    nodes = ec2_sim.network_path(leaf * 8, seed=tag[1], levels=3, nodes_per_leaf=8, leaves_per_spine=8)
                    ec2.create_tags(
                        Resources=[iid], Tags=[{"Key": ec2_sim.NETWORK_NODES_TAG, "Value": ",".join(nodes)}]
                    )
                    ec2.start_instances(InstanceIds=[iid])
                    running.append(iid)
                    events += [(iid, "pending"), (iid, "running")]
            bodies = [
                _event(region, iid, state, now + k * 0.001)
                for k, (iid, state) in enumerate(events)
                for _ in range(rng.randint(1, 3))
            ]
            rng.shuffle(bodies)
            sent, late_events, lost = split_deliveries(rng, bodies, drops=drops, drop=drop, late=late)
            dropped_any = dropped_any or bool(lost)
            out.faults += [f"r{rnd}: dropped {json.loads(body)['detail']['state']}" for body in lost]
            for body in sent:
                pl.sqs.send_message(QueueUrl=pl.queues.events, MessageBody=body)
            if late_events:
                out.faults.append(f"r{rnd}: {len(late_events)} late")
            if rng.random() < 0.25:
                ec2_sim.inject_faults(0.2, code="RequestLimitExceeded")
                out.faults.append(f"r{rnd}: EC2 throttles 20%")
            if rng.random() < crash_share:
                crasher.arm(rng.randint(0, 6), rng.choice(["exception", "death"]))
            settle()
            for body in late_events:  # delivered after the newer events were processed
                pl.sqs.send_message(QueueUrl=pl.queues.events, MessageBody=body)
            settle()
            ec2_sim.clear_faults()
            crasher.end_round(rnd, out.faults)
            if not dropped_any:
                out.idle_checks.append(check(f"round {rnd}"))
        pl.request_reconcile()
        settle()
        out.converged = check("after the reconcile")
    out.dlq = len(pl.dlq_messages())
    if out.dlq:
        out.problems.append(f"{out.dlq} message(s) in the dead-letter queue")
    out.seconds = time.monotonic() - began
    out.faults.append(f"{pl.stats.skipped_seconds:.0f}s of visibility timeouts skipped on the simulated clock")
    return out
