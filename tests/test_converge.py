"""Crash anywhere and still converge: discover -> debounce -> render -> publish on both clouds.

A crash-point table (:data:`POINTS`) names every store write and every send of one generation's
way through the pipeline. Each wave changes the cluster (a new generation), arms one point and
lets the pipeline run: at that point the real adapter either raises an ``Exception`` or the
process **dies** (:class:`Died`, a ``BaseException`` that no ``except Exception`` catches, as
a Lambda timeout or OOM). After a death the delivery is redelivered (AWS: the SQS message turns
visible again; GCP: Cloud Tasks retries the connection that broke) to a **fresh** composition
root over the same stores, as a new Lambda / Function instance would be. No reconcile runs:
after the redeliveries the published file must be the newest generation.

AWS runs the Lambda handlers against moto (``botocore``'s API call is intercepted); GCP runs the
functions under functions-framework with the Cloud Storage emulator and the Cloud Tasks local
(``GcsObjects.put`` / ``TaskQueue.send_event`` are intercepted). The lease is 1 s instead of
180 s so a render that died is redelivered after its lease within the test.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

import pytest
from scenario_clouds import AwsCloud, GcpCloud

from topocast.pipeline.debounce import DebounceState, on_change, on_render_failed, on_timer
from topocast.pipeline.debounce_runner import DebounceRunner
from topocast.ports.debounce import DebouncePolicy, Timer

LEASE = 1.0

#: the debounce policies these tests run with (the transitions take one whole)
QUIET_5, QUIET_15 = DebouncePolicy(quiet=5), DebouncePolicy(quiet=15)
LEASE_60, LEASE_180 = DebouncePolicy(quiet=15, lease=60), DebouncePolicy(quiet=15, lease=180)


class Died(BaseException):
    """The process died here: no ``except Exception`` runs, nothing after it happens."""


# ----- the crash points -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Call:
    """One write or send of the pipeline, described the same way on both clouds."""

    kind: str  # "put" (an object / parameter), "state" (the debounce state), "send" (a task / message)
    what: str  # put: the key or parameter name; state: the phase written; send: "timer" | "publish"
    unconfirmed: bool = False  # state: the write names a timer whose send is not confirmed yet


#: (name, the call it fires at): in the order one generation meets them
POINTS: list[tuple[str, Callable[[Call], bool]]] = [
    ("graph generation", lambda c: c.kind == "put" and "/graphs/" in c.what and "latest" not in c.what),
    ("graph latest", lambda c: c.kind == "put" and c.what.endswith("/graphs/latest.json")),
    ("debounce state: timer armed", lambda c: c.kind == "state" and c.what == "waiting" and c.unconfirmed),
    ("timer send", lambda c: c.kind == "send" and c.what == "timer"),
    ("debounce state: timer confirmed", lambda c: c.kind == "state" and c.what == "waiting" and not c.unconfirmed),
    ("debounce state: render claimed", lambda c: c.kind == "state" and c.what == "rendering"),
    ("rendered file", lambda c: c.kind == "put" and "/rendered/" in c.what and "manifest" not in c.what),
    ("rendered manifest", lambda c: c.kind == "put" and "/rendered/" in c.what and "manifest" in c.what),
    ("publish hand-off", lambda c: c.kind == "send" and c.what == "publish"),
    ("debounce state: rendered", lambda c: c.kind == "state" and c.what == "idle"),
    ("published file", lambda c: c.kind == "put" and "/slurm/" in c.what),
    ("published record", lambda c: c.kind == "put" and c.what.endswith("/published.json")),
]


class Injector:
    """Fires once at the armed point: raises an error, or kills the process (fresh root first)."""

    def __init__(self, fresh_root: Callable[[], None]) -> None:
        self.fresh_root = fresh_root
        self.lock = threading.Lock()
        self.armed: tuple[str, Callable[[Call], bool], str] | None = None
        self.fired: list[str] = []

    def arm(self, name: str, match: Callable[[Call], bool], how: str) -> None:
        self.armed = (name, match, how)

    def check(self, call: Call) -> None:
        with self.lock:
            if self.armed is None or not self.armed[1](call):
                return
            name, _, how = self.armed
            self.armed = None
            self.fired.append(name)
        if how == "error":
            raise RuntimeError(f"injected failure at {name}")
        self.fresh_root()
        raise Died(name)


# ----- AWS: the Lambda handlers on moto -------------------------------------------------------------------
def _aws_call(service: str, op: str, params: dict[str, Any]) -> Call | None:
    if service == "s3" and op == "PutObject":
        return Call("put", str(params.get("Key", "")))
    if service == "ssm" and op == "PutParameter":
        return Call("put", str(params.get("Name", "")))
    if service == "dynamodb" and op == "PutItem":
        item = params.get("Item", {})
        return Call("state", item.get("phase", {}).get("S", ""), "unconfirmed_timer" in item)
    if service == "sqs" and op == "SendMessage":
        url = str(params.get("QueueUrl", ""))
        return Call("send", "timer" if "-timer-" in url else "publish" if "-publish-" in url else "other")
    return None


class AwsDriver:
    """Plays Lambda's event source mappings; a death leaves the batch in flight until its visibility ends."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        import botocore.client

        from topocast.aws.root import AwsRuntime

        self.cloud = AwsCloud(quiet=0.5, max_wait=3.0, real_time=False)  # windows and leases on the simulated clock
        self.injector = Injector(self._fresh_root)
        self._runtime_type = AwsRuntime
        self._set_lease()
        real = botocore.client.BaseClient._make_api_call
        injector = self.injector

        def intercepted(client: Any, op: str, params: dict[str, Any]) -> Any:
            call = _aws_call(client.meta.service_model.service_name, op, params)
            if call is not None:
                injector.check(call)
            return real(client, op, params)

        monkeypatch.setattr(botocore.client.BaseClient, "_make_api_call", intercepted)

    def _set_lease(self) -> None:
        deb = self.cloud.pl.runtime.debouncer
        deb.policy = replace(deb.policy, lease=LEASE)  # a dead render is retried within the test

    def _fresh_root(self) -> None:
        pl = self.cloud.pl
        pl.runtime = self._runtime_type(pl.runtime.settings, region=pl.region, clock=pl.runtime.clock)
        self._set_lease()

    def settle(self, timeout: float = 60.0) -> None:
        from topocast.aws.handlers import discover_batch, publish_batch, render_batch

        pl = self.cloud.pl
        stages = [
            (pl.queues.events, 10_000, lambda ev: discover_batch(ev, pl.runtime)),
            (pl.queues.timer, 10, lambda ev: render_batch(ev, pl.runtime)),
            (pl.queues.publish, 10, lambda ev: publish_batch(ev, pl.runtime)),
        ]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            moved = 0
            for url, size, handler in stages:
                msgs = pl._receive_batch(url, size, 0.0)
                moved += len(msgs)
                if not msgs:
                    continue
                # after a death the batch stays in flight; SQS redelivers it when its visibility timeout runs out
                with contextlib.suppress(Died):
                    pl._invoke(url, msgs, handler)
            if not moved and pl.pending() == 0:
                return
            # a record that failed returns after its queue's visibility timeout, a timer after its delay
            if not moved and not pl.skip_long_wait():
                time.sleep(0.2)
        raise AssertionError(f"aws: the pipeline did not settle in {timeout:g}s")

    def stop(self) -> None:
        pass


# ----- GCP: the functions under functions-framework -------------------------------------------------------
class GcpDriver:
    """Cloud Tasks delivers on its own; a death breaks the function's connection, so Cloud Tasks retries."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from topocast.gcp import handlers
        from topocast.gcp.events import DEBOUNCE_TIMER, PUBLISH
        from topocast.gcp.gcs import GcsObjects
        from topocast.gcp.tasks import TaskQueue

        self.handlers = handlers
        self.cloud = GcpCloud(quiet=0.5, max_wait=3.0, pool=80, real_time=False).start()  # as AwsDriver
        self.injector = Injector(self._fresh_root)
        self._set_lease()
        injector = self.injector
        real_put, real_send = GcsObjects.put, TaskQueue.send_event

        def put(objects: Any, key: str, data: bytes, *args: Any, **kwargs: Any) -> Any:
            if key.endswith("/state/debounce.json"):
                state = json.loads(data)
                injector.check(Call("state", state["phase"], state.get("unconfirmed_timer") is not None))
            else:
                injector.check(Call("put", key))
            return real_put(objects, key, data, *args, **kwargs)

        def send(queue: Any, url: str, ce_type: str, *args: Any, **kwargs: Any) -> Any:
            what = {DEBOUNCE_TIMER: "timer", PUBLISH: "publish"}.get(ce_type, "other")
            injector.check(Call("send", what))
            return real_send(queue, url, ce_type, *args, **kwargs)

        monkeypatch.setattr(GcsObjects, "put", put)
        monkeypatch.setattr(TaskQueue, "send_event", send)
        # a death ends the request thread: the connection closes unanswered, as when an instance dies
        monkeypatch.setattr(threading, "excepthook", lambda args: None)

    def _set_lease(self) -> None:
        deb = self.handlers.runtime().debouncer
        deb.policy = replace(deb.policy, lease=LEASE)  # a dead render is retried within the test

    def _fresh_root(self) -> None:
        self.handlers._RUNTIMES.clear()  # the next delivery builds a new runtime over the same stores
        self._set_lease()

    def settle(self, timeout: float = 60.0) -> None:
        assert self.cloud.idle(timeout), f"gcp: the pipeline did not settle in {timeout:g}s"

    def stop(self) -> None:
        self.cloud.stop()


Driver = AwsDriver | GcpDriver


@pytest.fixture
def driver(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[Driver]:
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "true")
    if request.param == "aws":
        request.getfixturevalue("aws_env")
        d: Driver = AwsDriver(monkeypatch)
    else:
        d = GcpDriver(monkeypatch)
    yield d
    d.stop()


def _published(d: Driver) -> tuple[int, int]:
    """(the published generation, the newest graph generation)."""
    got = d.cloud.published()
    latest = d.cloud.runtime.graphs.latest()
    return (got.generation if got else 0), (latest.generation if latest else 0)


@pytest.mark.parametrize("how", ["error", "death"])
@pytest.mark.parametrize(
    "driver",
    # GCP runs on the simulated clock too (5-7 s a run, was 22-24 s in real time), but a run is still 13
    # waves through the functions over HTTP: the slow tier's; the crash points' rules are shared
    # (topocast.app, topocast.pipeline) and the AWS runs cover them in the default run
    ["aws", pytest.param("gcp", marks=pytest.mark.slow)],
    indirect=True,
)
def test_a_crash_at_any_write_or_send_still_publishes_the_newest_generation(driver: Driver, how: str) -> None:
    c = driver.cloud
    c.announce(c.launch(4))
    driver.settle()
    outcomes: dict[str, tuple[int, int]] = {}
    for name, match in POINTS:
        driver.injector.arm(name, match, how)
        c.announce(c.launch(2))  # a new generation meets the armed point on its way
        driver.settle()
        outcomes[name] = _published(driver)
    assert driver.injector.fired == [name for name, _ in POINTS], "every point must have fired once"
    newest = {name: (gen, gen) for name, (_, gen) in outcomes.items()}
    assert outcomes == newest
    # 12 waves after the first: generation 13, published, no dead letter
    assert {"published": _published(driver), "dead letters": c.dead_letters()} == {
        "published": (13, 13), "dead letters": [],
    }  # fmt: skip


# ----- the rules, on the pure core and the runner ---------------------------------------------------------
class _States:
    def __init__(self) -> None:
        self.state, self.token = DebounceState(), 0

    def load(self, cluster: str) -> tuple[DebounceState, int | None]:
        return self.state, self.token or None

    def save(self, cluster: str, state: DebounceState, token: int | None) -> int | None:
        if (token or 0) != self.token:
            return None
        self.state, self.token = state, self.token + 1
        return self.token


class _DyingTimers:
    def __init__(self, die: int = 0) -> None:
        self.die = die
        self.sent: list[str] = []

    def send(self, timer: Timer, delay: float) -> None:
        if self.die:
            self.die -= 1
            raise Died("timer send")
        self.sent.append(timer.timer_id)


def test_a_death_in_the_timer_send_is_repaired_by_the_retried_notification() -> None:
    states = _States()
    with pytest.raises(Died):
        DebounceRunner(states, _DyingTimers(die=1), QUIET_5).note_change("c1", 2)
    stuck = states.state
    assert (stuck.phase, stuck.latest_generation, stuck.unconfirmed_timer == stuck.timer_id) == ("waiting", 2, True)
    timers = _DyingTimers()
    again = DebounceRunner(states, timers, QUIET_5).note_change("c1", 2)  # the redelivered batch: same generation
    assert (again.reason, timers.sent, states.state.unconfirmed_timer) == (
        "timer re-sent: its send was never confirmed", [stuck.timer_id], None,
    )  # fmt: skip
    # confirmed now: a third notification of the same generation arms nothing
    assert DebounceRunner(states, timers, QUIET_5).note_change("c1", 2).reason == "generation 2 already noted"
    assert timers.sent == [stuck.timer_id]


def test_an_unchanged_reconcile_rearms_a_timer_past_its_grace_and_a_dead_render_after_its_lease() -> None:
    s = on_change(DebounceState(), 2, 0.0, new_timer_id="t1", policy=QUIET_15).state
    assert on_change(s, 2, 100.0, new_timer_id="t2", policy=QUIET_15).decision.reason == "generation 2 already noted"
    late = on_change(s, 2, 400.0, new_timer_id="t2", policy=DebouncePolicy(quiet=15, lost_timer_grace=300))
    assert (late.decision.reason, late.arm, late.state.timer_id) == (
        "timer re-armed: the waiting timer was lost",
        0.0,
        "t2",
    )
    claimed = on_timer(s, "t1", 15.0, new_timer_id="x", policy=LEASE_60).state
    assert on_change(claimed, 2, 70.0, new_timer_id="t3", policy=QUIET_15).arm is None  # the lease still runs
    dead = on_change(claimed, 2, 80.0, new_timer_id="t3", policy=QUIET_15)
    assert (dead.decision.reason, dead.arm) == ("timer re-armed: the rendering timer was lost", 0.0)
    assert on_timer(dead.state, "t3", 80.0, new_timer_id="x", policy=QUIET_15).decision.render  # due at once


def test_a_failed_render_releases_its_claim_and_the_retried_timer_renders_at_once() -> None:
    s = on_change(DebounceState(), 2, 0.0, new_timer_id="t1", policy=QUIET_15).state
    claimed = on_timer(s, "t1", 15.0, new_timer_id="x", policy=LEASE_180).state
    assert on_timer(claimed, "t1", 20.0, new_timer_id="x", policy=LEASE_180).decision.action == "retry"
    failed = on_render_failed(claimed, "t1", 21.0, policy=QUIET_15)
    assert (failed.decision.action, failed.arm, failed.state.phase, failed.state.timer_id) == (
        "retry", None, "waiting", "t1",
    )  # fmt: skip
    again = on_timer(failed.state, "t1", 26.0, new_timer_id="x", policy=LEASE_180)  # 5 s later, not 180
    assert (again.decision.action, again.decision.generation) == ("render", 2)


# ----- a reconcile that finds the graph unchanged publishes what was rendered but never published ---------
def test_an_unchanged_reconcile_hands_a_never_published_manifest_to_publish() -> None:
    from memory_stores import MemoryArtifactStore, MemoryGraphStore, MemoryPublishState
    from test_app_follow import ScriptedProvider

    from topocast.app.discover import discover
    from topocast.app.metrics import MetricCounts
    from topocast.model.changes import Reconcile
    from topocast.ports.debounce import Decision
    from topocast.ports.protocols import DiscoverPorts
    from topocast.ports.records import Manifest, PublishedRecord

    class Noting:
        def note_change(self, cluster: str, generation: int) -> Decision:
            return Decision("drop", reason=f"generation {generation} already noted")

    class Handoff:
        def __init__(self) -> None:
            self.asked: list[tuple[int, str]] = []

        def request_publish(self, generation: int, reason: str, dedup: str) -> None:
            self.asked.append((generation, reason))

    provider, handoff = ScriptedProvider(), Handoff()
    provider.state = {"gpu-1": ("running", "leaf-a"), "gpu-2": ("running", "leaf-a")}
    artifacts, published = MemoryArtifactStore(), MemoryPublishState()
    p = DiscoverPorts(
        cluster="c1", graphs=MemoryGraphStore(), provider=lambda: provider, debouncer=Noting(),  # type: ignore[arg-type]
        publish_state=published, artifacts=artifacts, handoff=handoff, metrics=MetricCounts(),
        full_scan_threshold=100, rechecks=None, follow_rechecks=6, follow_interval=30.0, set_aside_limit=0.10,
    )  # fmt: skip
    reconcile = [Reconcile(kind="schedule")]
    assert discover(p, reconcile).detail["changed"] is True  # generation 1, handed to the debouncer
    sha = p.graphs.latest().content_hash
    artifacts.put_manifest(Manifest(generation=1, graph_sha256=sha, artifacts=(), rendered_at="t"))
    # the render's hand-off to publish was lost: the next reconcile finds the same graph
    outcome = discover(p, reconcile)
    assert (outcome.detail["changed"], outcome.detail["catch_up_publish"], handoff.asked) == (
        False, 1, [(1, "reconcile: never published")],
    )  # fmt: skip
    published.save_published(PublishedRecord(generation=1, graph_sha256=sha, nodes=["gpu-1", "gpu-2"]))
    assert discover(p, reconcile).detail["catch_up_publish"] is None  # published: nothing to hand off
    assert len(handoff.asked) == 1
