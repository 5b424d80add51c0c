"""Debounce: the pure decision table, a simulated timeline, and DynamoDB + SQS on a moto server."""

from __future__ import annotations

import json
import random
import threading
import time
from typing import Any

import pytest
from pipeline_helpers import client, unique

from topocast.aws.debounce import DynamoSqsDebouncer, create_state_table
from topocast.pipeline.debounce import DebounceState, decide, on_change, on_rendered, on_timer
from topocast.ports.debounce import DebouncePolicy, Timer
from topocast_sim import moto_fast, simclock

Q, MAX = 15.0, 120.0
POLICY = DebouncePolicy(quiet=Q, max_wait=MAX)

# ----- the decision table ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("first", "last", "now", "action", "wait"),
    [
        (None, None, 50.0, "idle", 0.0),  # nothing changed
        (100.0, 100.0, 105.0, "wait", 10.0),  # quiet window still open
        (100.0, 110.0, 120.0, "wait", 5.0),  # a later change pushed the quiet window out
        (100.0, 110.0, 125.0, "render", 0.0),  # quiet for 15 s
        (100.0, 215.0, 218.0, "wait", 2.0),  # churn: the max-wait cap (100 + 120) comes first
        (100.0, 219.0, 220.0, "render", 0.0),  # churn: capped at max_wait even though never quiet
    ],
)
def test_decide(first, last, now, action, wait) -> None:
    d = decide(DebounceState(first_change_at=first, last_change_at=last, latest_generation=3), now, POLICY)
    assert d.action == action
    assert d.wait_seconds == pytest.approx(wait)
    if action == "render":
        assert d.generation == 3


def test_transitions_one_timer_and_harmless_duplicates() -> None:
    s = DebounceState()
    step = on_change(s, 1, 0.0, new_timer_id="t1", policy=POLICY)
    assert step.arm == pytest.approx(Q) and step.state.timer_id == "t1"
    s = step.state
    for gen, now in ((2, 3.0), (3, 9.0)):
        step = on_change(s, gen, now, new_timer_id="unused", policy=POLICY)
        assert step.arm is None and step.state.timer_id == "t1"
        s = step.state
    assert (
        on_change(s, 2, 10.0, new_timer_id="x", policy=DebouncePolicy()).decision.action == "drop"
    )  # late, older notification
    # t1 fires at 15: the last change was at 9, so one re-arm for 9 s under a new id
    step = on_timer(s, "t1", 15.0, new_timer_id="t2", policy=POLICY)
    assert step.arm == pytest.approx(9.0) and step.state.timer_id == "t2"
    s = step.state
    assert (
        on_timer(s, "t1", 16.0, new_timer_id="x", policy=DebouncePolicy()).decision.action == "drop"
    )  # duplicate of the old timer
    step = on_timer(s, "t2", 24.0, new_timer_id="x", policy=DebouncePolicy(quiet=Q, max_wait=MAX, lease=60))
    assert step.decision.render and step.decision.generation == 3 and step.decision.timer_id == "t2"
    s = step.state
    # a redelivered copy during the lease asks to be retried (it renders after the lease if the render died)
    assert on_timer(s, "t2", 25.0, new_timer_id="x", policy=DebouncePolicy(lease=60)).decision.action == "retry"
    # a change during the render is remembered but arms nothing: the render reports back first
    step = on_change(s, 4, 30.0, new_timer_id="x", policy=POLICY)
    assert step.arm is None
    s = step.state
    step = on_rendered(s, "t2", 3, 32.0, new_timer_id="t3", policy=POLICY)
    assert step.state.timer_id == "t3" and step.arm == pytest.approx(13.0)  # 30 + 15 - 32
    s = step.state
    step = on_timer(s, "t3", 45.0, new_timer_id="x", policy=DebouncePolicy(quiet=Q, max_wait=MAX, lease=60))
    assert step.decision.render
    step = on_rendered(step.state, "t3", 4, 47.0, new_timer_id="x", policy=DebouncePolicy())
    assert step.state.phase == "idle" and step.state.last_rendered_generation == 4 and step.arm is None


def test_render_that_died_is_retried_after_its_lease() -> None:
    s = on_change(DebounceState(), 1, 0.0, new_timer_id="t1", policy=DebouncePolicy(quiet=Q)).state
    s = on_timer(s, "t1", 15.0, new_timer_id="x", policy=DebouncePolicy(quiet=Q, lease=60)).state
    assert s.phase == "rendering"
    again = on_timer(
        s, "t1", 80.0, new_timer_id="x", policy=DebouncePolicy(quiet=Q, lease=60)
    )  # redelivered after the lease
    assert again.decision.render
    # a change long after a dead render (lease over) does not wait for it: it arms a fresh timer
    step = on_change(s, 2, 200.0, new_timer_id="t9", policy=DebouncePolicy(quiet=Q))
    assert step.arm is not None and step.state.timer_id == "t9"


def test_lost_timer_is_rearmed_after_the_grace() -> None:
    s = on_change(DebounceState(), 1, 0.0, new_timer_id="t1", policy=DebouncePolicy(quiet=Q)).state
    assert on_change(s, 2, 100.0, new_timer_id="t2", policy=DebouncePolicy(quiet=Q, lost_timer_grace=300)).arm is None
    step = on_change(s, 2, 400.0, new_timer_id="t2", policy=DebouncePolicy(quiet=Q, lost_timer_grace=300))
    assert step.arm is not None and step.state.timer_id == "t2"


@pytest.mark.parametrize("seed", range(6))
def test_simulated_timeline(seed: int) -> None:
    """Random bursts and churn with an ideal delay queue: one timer at a time, no change waits past max_wait."""
    rng = random.Random(seed)
    quiet, max_wait, render_time = 5.0, 30.0, 2.0
    changes: list[float] = []
    t = 0.0
    while t < 600:
        if rng.random() < 0.3:
            t += rng.uniform(20, 80)  # a quiet gap
        t += rng.expovariate(1 / rng.choice([0.5, 3.0, 8.0]))
        changes.append(t)
    state, queue, renders = DebounceState(), [], []  # queue: (fire_at, timer_id); renders: (at, generation)
    running: tuple[float, str | None, int] | None = None  # (done_at, timer_id, generation)
    ids = (f"t{i}" for i in range(10**6))
    pending = list(enumerate(changes, start=1))
    while pending or queue or running:
        candidates = [(pending[0][1], 0)] if pending else []
        candidates += [(queue[0][0], 1)] if queue else []
        candidates += [(running[0], 2)] if running else []
        now, kind = min(candidates)
        if kind == 0:
            gen, _ = pending.pop(0)
            step = on_change(
                state, gen, now, new_timer_id=next(ids), policy=DebouncePolicy(quiet=quiet, max_wait=max_wait)
            )
        elif kind == 1:
            _, tid = queue.pop(0)
            step = on_timer(
                state, tid, now, new_timer_id=next(ids), policy=DebouncePolicy(quiet=quiet, max_wait=max_wait, lease=60)
            )
            if step.decision.render:
                running = (now + render_time, tid, state.latest_generation)
                renders.append((now, state.latest_generation))
        else:
            _, tid, gen = running
            running = None
            step = on_rendered(
                state, tid, gen, now, new_timer_id=next(ids), policy=DebouncePolicy(quiet=quiet, max_wait=max_wait)
            )
        state = step.state
        if step.arm is not None:
            queue.append((now + step.arm, state.timer_id))
            queue.sort()
        assert len(queue) <= 1, "more than one timer in flight"
    for gen, at in enumerate(changes, start=1):
        covering = [r for r, g in renders if g >= gen and r >= at]
        assert covering, f"change {gen} at {at:.1f} never rendered"
        assert covering[0] - at <= max_wait + render_time + 1e-9
    # a render never starts while the graph is still changing, unless max_wait forced it
    for r, _ in renders:
        recent = [c for c in changes if r - quiet + 1e-9 < c <= r]
        first_unrendered = min(c for c in changes if c > max([p for p, _ in renders if p < r], default=-1.0))
        assert not recent or r - first_unrendered >= max_wait - 1e-9


# ----- DynamoDB + SQS on a moto server ------------------------------------------------------------


@pytest.fixture
def aws(moto_server) -> dict[str, Any]:
    moto_fast.install()  # moto's SQS delays and visibility on the simulated clock
    ddb, sqs = client(moto_server, "dynamodb"), client(moto_server, "sqs")
    table = unique("debounce")
    create_state_table(ddb, table)
    queue_url = sqs.create_queue(QueueName=unique("timers"))["QueueUrl"]
    sent: list[dict[str, Any]] = []
    sqs.meta.events.register("before-parameter-build.sqs.SendMessage", lambda params, **_: sent.append(params))
    return {"ddb": ddb, "sqs": sqs, "table": table, "queue": queue_url, "sent": sent}


def _poll(
    aws: dict[str, Any],
    deb: DynamoSqsDebouncer,
    seconds: float,
    on_render: Any,
    each: Any = lambda: None,
    real_time: bool = False,
) -> None:
    """Act as the render function: consume timer messages for ``seconds`` of the simulated clock, which
    the debouncer and moto's SQS delays read (``simclock``: 50 ms a round, nothing slept), or of the wall
    clock with ``real_time``; ``each`` runs first in every round."""
    clock = time.time if real_time else simclock.now
    end = clock() + seconds
    while clock() < end:
        each()
        resp = aws["sqs"].receive_message(QueueUrl=aws["queue"], MaxNumberOfMessages=10, WaitTimeSeconds=0)
        for msg in resp.get("Messages", []):
            decision = deb.on_timer(Timer.parse(msg["Body"]))
            aws["sqs"].delete_message(QueueUrl=aws["queue"], ReceiptHandle=msg["ReceiptHandle"])
            if decision.render:
                on_render(decision)
        time.sleep(0.05) if real_time else simclock.advance(0.05)


def timer_ids(sent: list[dict[str, Any]]) -> set[str]:
    """The distinct timers among the sent SQS messages (a re-sent copy names the same timer)."""
    return {json.loads(m["MessageBody"])["timer_id"] for m in sent}


@pytest.mark.slow  # 1,000 conditional writes racing on moto's DynamoDB; test_aws_pipeline's burst covers the rule
def test_burst_of_1000_changes_is_one_timer_and_one_render(aws) -> None:
    deb = DynamoSqsDebouncer(aws["table"], aws["queue"], aws["ddb"], aws["sqs"], DebouncePolicy(quiet=1, max_wait=60))
    counter = iter(range(1, 1001))
    lock = threading.Lock()
    last_change = [0.0]

    def burst() -> None:
        while True:
            with lock:
                gen = next(counter, None)
            if gen is None:
                return
            deb.note_change("c1", gen)
            last_change[0] = time.time()

    threads = [threading.Thread(target=burst) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    # one timer; under load a second copy of it may go out: an observer that finds its send not yet confirmed
    # re-sends it under its own ID (crash-anywhere, docs/architecture.md), which renders once
    assert len(timer_ids(aws["sent"])) == 1, "a burst must arm exactly one timer"
    state = deb.state("c1")
    assert state.latest_generation == 1000 and state.phase == "waiting"
    renders: list[tuple[float, Any]] = []

    def on_render(decision: Any) -> None:
        renders.append((time.time(), decision))
        deb.mark_rendered("c1", decision, decision.generation)

    _poll(aws, deb, 3.5, on_render, real_time=True)  # the race runs on the wall clock, as before
    assert len(renders) == 1
    at, decision = renders[0]
    assert decision.generation == 1000 and decision.cluster == "c1"
    assert at - last_change[0] >= 1.0  # only after the quiet window
    # the expired timer was re-armed at most once, and only one timer was ever live
    assert len(timer_ids(aws["sent"])) <= 2
    assert deb.state("c1").phase == "idle" and deb.state("c1").last_rendered_generation == 1000
    # a duplicate delivery of a timer after the render is dropped harmlessly
    again = deb.on_timer(Timer.parse(aws["sent"][-1]["MessageBody"]))
    assert again.action == "drop"


def test_churn_renders_at_least_every_max_wait(aws) -> None:
    quiet, max_wait = 1.0, 3.0
    deb = DynamoSqsDebouncer(
        aws["table"],
        aws["queue"],
        aws["ddb"],
        aws["sqs"],
        DebouncePolicy(quiet=quiet, max_wait=max_wait),
        clock=simclock.now,
    )
    renders: list[float] = []
    changes = {"generation": 0, "next": simclock.now()}

    def churn() -> None:  # a change every 0.3 s: never quiet for 1 s
        if simclock.now() >= changes["next"]:
            changes["generation"] += 1
            deb.note_change("c2", changes["generation"])
            changes["next"] += 0.3

    def on_render(decision: Any) -> None:
        renders.append(simclock.now())
        deb.mark_rendered("c2", decision, decision.generation)

    start = simclock.now()
    _poll(aws, deb, 10.0, on_render, each=churn)
    assert len(renders) >= 2, renders
    # DelaySeconds are whole seconds and the poller sleeps between receives: allow ~1.5 s of slack
    gaps = [b - a for a, b in zip([start, *renders], renders, strict=False)]
    assert max(gaps) <= max_wait + 1.5, gaps
    assert min(gaps[1:], default=max_wait) >= max_wait - 0.5, gaps  # ...but no more often than max_wait


def test_failed_timer_send_rolls_back_so_a_retry_rearms(aws) -> None:
    from botocore.exceptions import EndpointConnectionError

    broken = client(aws["sqs"].meta.endpoint_url, "sqs", retries={"total_max_attempts": 1})

    def fail(**_: Any) -> None:
        raise EndpointConnectionError(endpoint_url="injected")

    broken.meta.events.register("before-send.sqs.SendMessage", fail)
    deb = DynamoSqsDebouncer(aws["table"], aws["queue"], aws["ddb"], broken, DebouncePolicy(quiet=1, max_wait=5))
    with pytest.raises(EndpointConnectionError):
        deb.note_change("c3", 1)
    assert deb.state("c3").phase == "idle" and deb.state("c3").latest_generation == 0
    good = DynamoSqsDebouncer(aws["table"], aws["queue"], aws["ddb"], aws["sqs"], DebouncePolicy(quiet=1, max_wait=5))
    assert good.note_change("c3", 1).action == "wait"
    assert deb.state("c3").phase == "waiting" and len(aws["sent"]) == 1


def test_a_timer_that_is_not_the_live_one_is_dropped(aws) -> None:
    deb = DynamoSqsDebouncer(aws["table"], aws["queue"], aws["ddb"], aws["sqs"], DebouncePolicy(quiet=1, max_wait=5))
    assert deb.on_timer(Timer("zz", "nope")).action == "drop"


def test_a_timer_body_round_trips_as_the_same_timer_on_every_cloud() -> None:
    timer = Timer("c1", "t1", armed_at=100.0, due_at=115.0)
    body = {"kind": "topocast.debounce.timer", "cluster": "c1", "timer_id": "t1", "armed_at": 100.0, "due_at": 115.0}
    assert timer.to_json() == body
    assert Timer.parse(json.dumps(body)) == Timer.parse(body) == timer
