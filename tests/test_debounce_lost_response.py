"""A debounce state write that landed on the server but whose response was lost still sends its timer.

The client retries such a write (botocore, our retry layer, google-cloud-storage);
the retry then fails its own condition, which looks exactly like losing a race.
Were that taken at face value, the runner would re-read, see its own change
("generation already noted") and drop it: no timer, no render until the
lost-timer grace. Each case below injects exactly that sequence against the
real service emulators and checks that the change arms one timer and renders.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from pipeline_helpers import client, unique

from topocast.aws.debounce import DynamoSqsDebouncer, create_state_table
from topocast.pipeline.debounce import DebounceState
from topocast.pipeline.debounce_runner import DebounceRunner
from topocast.ports.debounce import DebouncePolicy, Timer


@pytest.fixture
def aws(moto_server: Any) -> dict[str, Any]:
    ddb, sqs = client(moto_server, "dynamodb"), client(moto_server, "sqs")
    table = unique("debounce")
    create_state_table(ddb, table)
    queue_url = sqs.create_queue(QueueName=unique("timers"))["QueueUrl"]
    sent: list[dict[str, Any]] = []
    sqs.meta.events.register("before-parameter-build.sqs.SendMessage", lambda params, **_: sent.append(params))
    puts: list[int] = []
    ddb.meta.events.register("before-send.dynamodb.PutItem", lambda **_: puts.append(1))
    return {"ddb": ddb, "sqs": sqs, "table": table, "queue": queue_url, "sent": sent, "puts": puts}


def _lose_first_response_botocore_retries(ddb: Any) -> None:
    """botocore's retry handler resends the PutItem whose (successful) response it did not get."""
    lost = []

    def needs_retry(response: Any = None, **_: Any) -> float | None:
        if not lost and response is not None and response[0].status_code == 200:
            lost.append(True)
            return 0.0  # "retry after 0 s", as botocore does after a read timeout
        return None

    ddb.meta.events.register("needs-retry.dynamodb.PutItem", needs_retry)


def _lose_first_response_our_retry(ddb: Any) -> None:
    """The call times out after the server applied it; topocast's retry layer (with_retries) resends."""
    from botocore.exceptions import ReadTimeoutError

    lost = []

    def after_call(http_response: Any, **_: Any) -> None:
        if not lost and http_response.status_code == 200:
            lost.append(True)
            raise ReadTimeoutError(endpoint_url="injected: the response was lost")

    ddb.meta.events.register("after-call.dynamodb.PutItem", after_call)


@pytest.mark.parametrize("inject", [_lose_first_response_botocore_retries, _lose_first_response_our_retry])
def test_dynamodb_lost_write_response_still_sends_the_timer(aws: dict[str, Any], inject: Any) -> None:
    deb = DynamoSqsDebouncer(aws["table"], aws["queue"], aws["ddb"], aws["sqs"], DebouncePolicy(quiet=1, max_wait=5))
    inject(aws["ddb"])
    decision = deb.note_change("c1", 1)
    # the state write twice (the injection), then the write that confirms the timer was sent
    assert len(aws["puts"]) == 3, "the injection must make the client send the write twice"
    assert decision.action == "wait" and decision.reason == "timer armed"
    state = deb.state("c1")
    assert state.phase == "waiting" and state.latest_generation == 1
    assert len(aws["sent"]) == 1, "exactly one timer for the change"
    assert state.timer_id in aws["sent"][0]["MessageBody"]
    # ...and it fires: the change is rendered after the quiet window, not after the lost-timer grace
    deadline = time.time() + 10
    rendered = None
    while rendered is None and time.time() < deadline:
        resp = aws["sqs"].receive_message(QueueUrl=aws["queue"], WaitTimeSeconds=1)
        for msg in resp.get("Messages", []):
            got = deb.on_timer(Timer.parse(msg["Body"]))
            aws["sqs"].delete_message(QueueUrl=aws["queue"], ReceiptHandle=msg["ReceiptHandle"])
            rendered = got if got.render else rendered
    assert rendered is not None and rendered.generation == 1
    assert deb.note_change("c1", 1).action == "drop"  # a retried notification stays idempotent
    assert len(aws["sent"]) <= 2  # the timer may re-arm once when the quiet window moved; never more


def test_gcs_lost_write_response_still_sends_the_timer(
    local_gcs: Any, gcs_objects: Any, fake_tasks: Any, tasks_client: Any
) -> None:
    from gcp_fixtures import QUEUE

    from topocast.gcp.debounce import gcp_debouncer
    from topocast.gcp.tasks import TaskQueue

    proxy = local_gcs.proxy
    queue = TaskQueue(QUEUE, tasks_client)
    # a long quiet window: the task stays queued, so the test only counts what was created
    deb = gcp_debouncer(gcs_objects, "p", queue, "http://127.0.0.1:9/render", DebouncePolicy(quiet=600, max_wait=900))
    key = deb.states.key("c1")
    proxy.lose_responses, proxy.lose_match, proxy.lost = 1, key, 0
    try:
        decision = deb.note_change("c1", 1)
    finally:
        proxy.lose_responses, proxy.lose_match = 0, ""
    assert proxy.lost == 1, "the injection must drop the response of one state write"
    assert decision.action == "wait" and decision.reason == "timer armed"
    state = deb.state("c1")
    assert state.phase == "waiting" and state.latest_generation == 1
    assert fake_tasks.counts["created"] == 1, "exactly one timer for the change"
    (task_name,) = fake_tasks.tasks
    assert state.timer_id in task_name
    assert deb.note_change("c1", 1).action == "drop" and fake_tasks.counts["created"] == 1


# ----- the same, with another writer in between (in memory, so the interleaving is exact) ----------------


class _LossyStates:
    """A StateBackend whose next save lands but answers "lost the race", after ``meanwhile`` wrote on top."""

    def __init__(self) -> None:
        self.state, self.token = DebounceState(), 0
        self.lose_next = False
        self.meanwhile: Any = None

    def load(self, cluster: str) -> tuple[DebounceState, int | None]:
        return self.state, self.token or None

    def save(self, cluster: str, state: DebounceState, token: int | None) -> int | None:
        if (token or 0) != self.token:
            return None
        self.state, self.token = state, self.token + 1
        if self.lose_next:
            self.lose_next = False
            if self.meanwhile is not None:
                self.meanwhile()
            return None
        return self.token


class _Timers:
    def __init__(self, fail: bool = False) -> None:
        self.sent: list[str] = []
        self.fail = fail

    def send(self, timer: Timer, delay: float) -> None:
        if self.fail:
            raise ConnectionError("injected: timer service down")
        self.sent.append(timer.timer_id)


def test_lost_response_with_another_writer_on_top_still_sends_the_timer() -> None:
    states, timers = _LossyStates(), _Timers()
    mine, other = (
        DebounceRunner(states, timers, DebouncePolicy(quiet=5)),
        DebounceRunner(states, _Timers(), DebouncePolicy(quiet=5)),
    )
    states.lose_next = True
    states.meanwhile = lambda: other.note_change("c1", 2)  # sees our timer alive: records, arms nothing
    decision = mine.note_change("c1", 1)
    assert decision.reason == "timer armed" and timers.sent == [states.state.timer_id]
    assert states.state.latest_generation == 2


def test_failed_send_after_a_lost_response_does_not_roll_back_over_another_writer() -> None:
    states, timers = _LossyStates(), _Timers(fail=True)
    mine, other = (
        DebounceRunner(states, timers, DebouncePolicy(quiet=5)),
        DebounceRunner(states, _Timers(), DebouncePolicy(quiet=5)),
    )
    states.lose_next = True
    states.meanwhile = lambda: other.note_change("c1", 2)
    with pytest.raises(ConnectionError):
        mine.note_change("c1", 1)
    assert states.state.latest_generation == 2  # the other writer's change survives
