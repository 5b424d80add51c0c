"""``topocast pull --watch``: a published parameter is installed seconds later, woken by its change event.

AWS path on a moto server: SSM (the published parameter), EventBridge (a rule on Parameter Store
change events for the cluster's Slurm path, targeting an SQS queue, as Terraform wires it) and
SQS (the head node's queue, long-polled). moto does not emit Parameter Store change events
itself, so after each ``PutParameter`` the test plays SSM's part: it puts the event Systems
Manager sends (``source: aws.ssm``, ``detail-type: Parameter Store Change``, ``detail``: name,
type, operation - the shape of the AWS Systems Manager User Guide's event examples) on the
default bus, and EventBridge's rule routes it to the queue.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import boto3
import pytest

from topocast.agents.pull import pull
from topocast.agents.pull_watch import SqsWaker, WatchStats, watch
from topocast.publish import envelope
from topocast_sim.watch_agent import aws_watch_queue

PARAM = "/topocast/c1/slurm/topology-tree.conf"


def conf(n: int) -> bytes:
    return ("SwitchName=leaf0 Nodes=" + ",".join(f"gpu-{i}" for i in range(n)) + "\n").encode()


def publish(ssm: Any, events: Any, content: bytes, generation: int) -> None:
    env = envelope.plan_value(content, generation=generation, file="topology.conf", fmt="slurm-tree", s3_uri="-")
    ssm.put_parameter(Name=PARAM, Value=env.dumps(), Type="String", Overwrite=True)
    # SSM's change event (moto does not send it): what EventBridge receives from Parameter Store
    detail = {"name": PARAM, "type": "String", "operation": "Update" if generation > 1 else "Create"}
    resp = events.put_events(
        Entries=[{"Source": "aws.ssm", "DetailType": "Parameter Store Change", "Detail": json.dumps(detail),
                  "Resources": [f"arn:aws:ssm:us-east-1:123456789012:parameter{PARAM}"]}]
    )  # fmt: skip
    assert resp["FailedEntryCount"] == 0


class _ShortPolls:
    """The agent's SQS client with its long polls cut to 1 s: stopping the agent then takes a second,
    not the 20 s of a long poll in progress. Everything else is the real client."""

    def __init__(self, sqs: Any) -> None:
        self._sqs = sqs

    def receive_message(self, **kw: Any) -> dict[str, Any]:
        return self._sqs.receive_message(**{**kw, "WaitTimeSeconds": min(1, kw.get("WaitTimeSeconds", 0))})

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sqs, name)


def test_a_publish_is_installed_by_the_notification_not_the_fallback(aws_env: str, tmp_path: Path) -> None:
    """How many seconds the install takes is bench/latency.py's to measure; here the proof it was the
    notification is that the fallback pull (600 s away) never ran."""
    ssm, sqs, events = (boto3.client(s, region_name="us-east-1") for s in ("ssm", "sqs", "events"))
    # the head node's queue and the rule that feeds it (what infra/terraform/modules/aws/pull_watch.tf creates)
    url = aws_watch_queue(events, sqs, name="topocast-c1", ssm_path="/topocast/c1/slurm")
    publish(ssm, events, conf(2), 1)
    etc = tmp_path / "etc"
    etc.mkdir(mode=0o755)
    dest, state = etc / "topology.conf", tmp_path / "state.json"
    installed: list[bytes] = []

    def pull_once() -> int:
        out = pull(f"ssm://{PARAM}", dest, reconfigure=False, validate=False,
                   slurm_conf=None, state_file=state, ssm=ssm)  # fmt: skip
        if out.action == "installed":
            installed.append(dest.read_bytes())
        return 0 if out.ok else 1

    stop = threading.Event()
    stats = WatchStats()
    # the fallback is far away: only the notification can explain a prompt install
    agent = threading.Thread(
        target=watch, args=(pull_once, SqsWaker(url, _ShortPolls(sqs))),
        kwargs={"fallback_seconds": 600.0, "stop": stop.is_set, "stats": stats}, daemon=True,
    )  # fmt: skip
    agent.start()
    try:
        deadline = time.monotonic() + 30
        while not installed and time.monotonic() < deadline:
            time.sleep(0.05)
        assert installed and installed[-1] == conf(2), "the start-up pull installs what is published"
        for generation in (2, 3):
            published_at = time.monotonic()
            publish(ssm, events, conf(generation + 2), generation)
            while installed[-1] != conf(generation + 2) and time.monotonic() - published_at < 30:
                time.sleep(0.02)
            assert installed[-1] == conf(generation + 2)
        assert stats.notified >= 2 and stats.fallbacks == 0
    finally:
        stop.set()
        agent.join(5.0)  # the short poll in progress returns within its 1 s
    assert not agent.is_alive()


class _DeadQueue:
    def receive_message(self, **kw: Any) -> dict[str, Any]:
        raise ConnectionError("queue unreachable")


def test_an_unreachable_queue_leaves_the_fallback_pulling() -> None:
    now = [0.0]
    pulls: list[float] = []

    def pull_once() -> int:
        pulls.append(now[0])
        return 0

    def sleep(seconds: float) -> None:
        now[0] += max(seconds, 0.5)

    watch(pull_once, SqsWaker("q", _DeadQueue()), fallback_seconds=60.0, clock=lambda: now[0], sleep=sleep,
          stop=lambda: now[0] > 130)  # fmt: skip
    assert [round(p) for p in pulls] == [0, 60, 120]


@pytest.mark.parametrize("body", ["{not json", json.dumps({"detail-type": "Parameter Store Change"})])
def test_any_message_only_wakes_the_agent(body: str) -> None:
    from topocast.agents.pull_watch import describe_event

    assert isinstance(describe_event(body), str)


class _PubSubSession:
    """The Pub/Sub REST API's two calls the waker makes, answering one finalize notification once."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.pending = [{"ackId": "a1", "message": {"attributes": {
            "eventType": "OBJECT_FINALIZE", "bucketId": "b", "objectId": "topocast/c1/slurm/topology-tree.conf",
        }}}]  # fmt: skip

    def post(self, url: str, json: dict[str, Any], timeout: float) -> Any:
        self.calls.append((url, json))
        body = {"receivedMessages": self.pending} if url.endswith(":pull") else {}
        self.pending = [] if url.endswith(":pull") else self.pending

        class Resp:
            def raise_for_status(self) -> None: ...

            def json(self) -> dict[str, Any]:
                return body

        return Resp()


def test_the_gcp_waker_pulls_its_subscription_and_acknowledges_after_the_pull() -> None:
    from topocast.agents.pull_watch import PubSubWaker

    session = _PubSubSession()
    sub = "projects/p/subscriptions/topocast-c1-pull-head0"
    waker = PubSubWaker(sub, session, "http://pubsub.test")
    assert waker.wait(20) == 1
    assert session.calls == [(f"http://pubsub.test/v1/{sub}:pull", {"maxMessages": 100})]
    waker.done()
    assert session.calls[-1] == (f"http://pubsub.test/v1/{sub}:acknowledge", {"ackIds": ["a1"]})
    with pytest.raises(ValueError, match="projects/<project>/subscriptions/<name>"):
        PubSubWaker("topocast-c1-pull-head0", session)


class _BacklogQueue:
    """SQS's two calls the waker makes over a queue already holding ``bodies``.

    ``ReceiveMessage`` returns at most 10 messages per call (``MaxNumberOfMessages``: "Valid values: 1 to
    10", botocore's sqs model); a received message is in flight until ``DeleteMessageBatch`` (at most 10
    entries per call, same model) deletes it by its receipt handle.
    """

    def __init__(self, bodies: list[str]) -> None:
        self.queued = {f"r{i}": body for i, body in enumerate(bodies)}
        self.in_flight: dict[str, str] = {}
        self.receives = 0

    def receive_message(self, QueueUrl: str, MaxNumberOfMessages: int, WaitTimeSeconds: int) -> dict[str, Any]:
        assert 1 <= MaxNumberOfMessages <= 10
        self.receives += 1
        batch = list(self.queued.items())[:MaxNumberOfMessages]
        for receipt, _ in batch:
            self.in_flight[receipt] = self.queued.pop(receipt)
        return {"Messages": [{"ReceiptHandle": r, "Body": b} for r, b in batch]}

    def delete_message_batch(self, QueueUrl: str, Entries: list[dict[str, str]]) -> dict[str, Any]:
        assert 1 <= len(Entries) <= 10
        for entry in Entries:
            del self.in_flight[entry["ReceiptHandle"]]
        return {"Successful": [{"Id": e["Id"]} for e in Entries]}


def _change(name: str) -> str:
    return json.dumps({"detail-type": "Parameter Store Change", "detail": {"operation": "Update", "name": name}})


def test_a_deep_json_message_costs_none_of_the_notifications_that_came_with_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    deep = "[" * 100_000 + "]" * 100_000  # 200 KB, legal in SQS (256 KiB)
    queue = _BacklogQueue([_change("/topocast/c1/slurm/a"), deep, _change("/topocast/c1/slurm/b")])
    waker = SqsWaker("q", queue)
    with caplog.at_level("INFO", logger="topocast.agents.pull_watch"):
        assert waker.wait(20) == 3
    waker.done()
    assert queue.queued == {} and queue.in_flight == {}  # all three deleted: the poison one does not come back


def test_a_backlog_is_drained_into_one_pull_with_one_log_line(caplog: pytest.LogCaptureFixture) -> None:
    queue = _BacklogQueue([_change(f"/topocast/c1/slurm/p{i}") for i in range(3_000)])
    now = [0.0]
    pulls: list[float] = []

    def pull_once() -> int:
        pulls.append(now[0])
        now[0] += 1.0
        return 0

    with caplog.at_level("INFO", logger="topocast.agents.pull_watch"):
        watch(pull_once, SqsWaker("q", queue), fallback_seconds=60.0, clock=lambda: now[0], sleep=lambda s: None,
              stop=lambda: len(pulls) >= 2)  # fmt: skip
    assert len(pulls) == 2  # the start's pull and one for the whole backlog
    assert queue.queued == {} and queue.in_flight == {}
    notified = [r.getMessage() for r in caplog.records if r.getMessage().startswith("notified")]
    assert len(notified) == 1 and notified[0].startswith("notified: 3000 message(s)")


@pytest.mark.parametrize(("length", "shown"), [(10_000, "(10000 chars)"), (100_000, "not parsed")])
def test_an_echoed_field_is_cut(caplog: pytest.LogCaptureFixture, length: int, shown: str) -> None:
    queue = _BacklogQueue([_change("n" * length)])
    with caplog.at_level("INFO", logger="topocast.agents.pull_watch"):
        assert SqsWaker("q", queue).wait(0) == 1
    (line,) = [r.getMessage() for r in caplog.records]
    assert len(line) < 400 and shown in line


@pytest.mark.parametrize(
    "body",
    ["[" * 100_000, "x" * 250_000, json.dumps({"detail": "not a mapping"}), json.dumps([1, 2]), "\udcff", "1e999999"],
)
def test_a_hostile_body_is_described_in_one_short_line(body: str) -> None:
    from topocast.agents.pull_watch import describe_event

    line = describe_event(body)
    assert "\n" not in line and len(line) < 400


def test_the_gcp_waker_drains_a_backlog_and_a_hostile_message_costs_no_ack(caplog: pytest.LogCaptureFixture) -> None:
    from topocast.agents.pull_watch import PubSubWaker

    def message(i: int) -> dict[str, Any]:
        name = "o" * 100_000 if i == 0 else f"x/{i}"
        return {"ackId": f"a{i}", "message": {"attributes": {"eventType": "OBJECT_FINALIZE", "objectId": name}}}

    backlog: list[Any] = [message(i) for i in range(120)]
    backlog[5] = {"ackId": "a5", "message": ["not", "a", "mapping"]}  # still acknowledged: it only wakes the agent
    posts: list[tuple[str, dict[str, Any]]] = []

    class Session:
        def post(self, url: str, json: dict[str, Any], timeout: float) -> Any:
            posts.append((url, json))
            taken = backlog[: json["maxMessages"]] if url.endswith(":pull") else []
            del backlog[: len(taken)]

            class Resp:
                def raise_for_status(self) -> None: ...

                def json(self) -> dict[str, Any]:
                    return {"receivedMessages": taken} if taken else {}

            return Resp()

    waker = PubSubWaker("projects/p/subscriptions/s", Session(), "http://pubsub.test")
    with caplog.at_level("INFO", logger="topocast.agents.pull_watch"):
        assert waker.wait(20) == 120  # one page of 100 (Pub/Sub's limit is 1,000 a pull) and the 20 behind it
    (line,) = [r.getMessage() for r in caplog.records]
    assert line.startswith("notified: 120 message(s)") and len(line) < 400
    waker.done()
    assert posts[-1][1] == {"ackIds": [f"a{i}" for i in range(120)]}


def test_watch_a_local_file_installs_each_new_version_within_a_second(tmp_path: Path) -> None:
    """``pull --watch --source file://...``: no queue, no cloud; the agent polls the file and installs each change."""
    import signal
    import subprocess
    import sys
    import time

    etc = tmp_path / "etc"
    etc.mkdir(mode=0o755)
    dest = etc / "topology.conf"
    src = tmp_path / "published.conf"
    src.write_text("SwitchName=leaf1 Nodes=gpu-[01-04]\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", "topocast.cli", "pull", "--watch", "--source", f"file://{src}", "--dest", str(dest),
         "--no-validate", "--fallback-seconds", "3600"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 20
        while not dest.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert dest.read_text() == "SwitchName=leaf1 Nodes=gpu-[01-04]\n"
        new = tmp_path / "next.conf"
        new.write_text("SwitchName=leaf1 Nodes=gpu-[01-05]\n")
        new.replace(src)  # how a publisher writes: a rename
        deadline = time.monotonic() + 20
        while "gpu-[01-05]" not in dest.read_text() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert dest.read_text() == "SwitchName=leaf1 Nodes=gpu-[01-05]\n"
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert out.count("installed") == 2, out
