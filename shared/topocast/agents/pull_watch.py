"""``topocast pull --watch``: install a new topology seconds after it is published, not at the next timer.

The agent blocks on the publisher's change notification and runs the ordinary single pull
(:func:`topocast.agents.pull.pull` through the ``pull`` command) each time one arrives:

* AWS: Parameter Store emits a ``Parameter Store Change`` event for every write of the
  published parameter; an EventBridge rule (``source: aws.ssm``, the parameter names of the
  cluster's Slurm path) sends it to an SQS queue per head node (Terraform,
  ``pull_watch_head_nodes``). :class:`SqsWaker` long-polls that queue (``ReceiveMessage``,
  ``WaitTimeSeconds=20``).
* GCP: the bucket's ``OBJECT_FINALIZE`` notification (object prefix ``<prefix>/<cluster>/slurm/``)
  goes to a Pub/Sub topic with a pull subscription per head node. :class:`PubSubWaker` pulls it
  over the Pub/Sub REST API with the host's application-default credentials
  (``PUBSUB_EMULATOR_HOST`` points it at an emulator).

A notification only wakes the agent: what it installs is whatever the source holds then, with
every check of a single pull (sha256, validation, generation order, node-loss guard), so a
duplicate, late or foreign message does no harm. Messages are deleted / acknowledged after the
pull ran. The agent also pulls at start and every ``--fallback-seconds`` (default 60, the
timer's period) without a notification, so a lost event, a queue that is not there yet or a
notification service outage costs at most the timer's delay; the systemd timer can stay
enabled as well (the pull is idempotent and serialised by the destination's lock).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import unquote, urlparse

from topocast.errors import TopocastError
from topocast.safeio.validation import load_json

log = logging.getLogger(__name__)

#: SQS's longest long poll
SQS_WAIT_SECONDS = 20
#: Pub/Sub's synchronous pull returns at most this many messages per call (its limit is 1,000)
PUBSUB_MAX_MESSAGES = 100
#: a backlog is drained into one pull up to this many messages; the rest wake the next pull
MAX_DRAIN_MESSAGES = 10_000
#: a body longer than this is not parsed at all (a Parameter Store Change event is < 2 KB; SQS allows 256 KiB)
MAX_NOTIFICATION_CHARS = 16 * 1024
#: what of a message's fields is echoed to the journal
MAX_ECHO_CHARS = 200
DEFAULT_FALLBACK_SECONDS = 60.0


class Waker(Protocol):
    def wait(self, timeout: float) -> int:
        """Block up to ``timeout`` seconds for notifications; how many arrived (0: none)."""
        ...

    def done(self) -> None:
        """The pull the last notifications asked for ran: delete / acknowledge them."""
        ...


class SqsWaker:
    """Long-polls the head node's SQS queue (EventBridge delivers the Parameter Store change events)."""

    def __init__(self, queue_url: str, sqs: Any, max_drain: int = MAX_DRAIN_MESSAGES) -> None:
        self.queue_url = queue_url
        self.sqs = sqs
        self.max_drain = max_drain
        self._receipts: list[str] = []

    def wait(self, timeout: float) -> int:
        wait = max(0, min(SQS_WAIT_SECONDS, int(timeout)))
        bodies: list[str] = []
        count = 0
        while True:
            resp = self.sqs.receive_message(QueueUrl=self.queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=wait)
            messages = resp.get("Messages", [])
            # the receipts first: nothing that follows (a hostile body, the log) may cost them
            self._receipts += [m["ReceiptHandle"] for m in messages if m.get("ReceiptHandle")]
            count += len(messages)
            bodies += [m.get("Body", "") for m in messages[:1] if not bodies]
            # more may wait (a short poll samples some of the queue's servers): drain the backlog, without
            # waiting, into the one pull that follows; bounded, so a flood still pulls
            if not messages or count >= self.max_drain:
                break
            wait = 0
        if count:
            log.info("notified: %d message(s), e.g. %s", count, describe_event(bodies[0]))
        return count

    def done(self) -> None:
        while self._receipts:
            batch, self._receipts = self._receipts[:10], self._receipts[10:]
            entries = [{"Id": str(i), "ReceiptHandle": r} for i, r in enumerate(batch)]
            self.sqs.delete_message_batch(QueueUrl=self.queue_url, Entries=entries)


class PubSubWaker:
    """Pulls the head node's Pub/Sub subscription (the bucket's OBJECT_FINALIZE notifications), REST API."""

    def __init__(
        self,
        subscription: str,
        session: Any,
        endpoint: str = "https://pubsub.googleapis.com",
        max_drain: int = MAX_DRAIN_MESSAGES,
    ) -> None:
        if not subscription.startswith("projects/") or "/subscriptions/" not in subscription:
            raise ValueError(f"--subscription {subscription!r}: expected projects/<project>/subscriptions/<name>")
        self.subscription = subscription
        self.session = session
        self.endpoint = endpoint.rstrip("/")
        self.max_drain = max_drain
        self._acks: list[str] = []

    def wait(self, timeout: float) -> int:
        # a synchronous pull without returnImmediately waits on the server for messages (seconds)
        url = f"{self.endpoint}/v1/{self.subscription}:pull"
        first: dict[str, Any] | None = None
        count = 0
        while True:
            resp = self.session.post(url, json={"maxMessages": PUBSUB_MAX_MESSAGES}, timeout=max(1.0, timeout) + 10)
            resp.raise_for_status()
            body = resp.json()
            received = body.get("receivedMessages", []) if isinstance(body, dict) else []
            received = received if isinstance(received, list) else []
            self._acks += [m["ackId"] for m in received if isinstance(m, dict) and isinstance(m.get("ackId"), str)]
            count += len(received)
            first = first or next((m for m in received if isinstance(m, dict)), None)
            # a full pull means a backlog: drain it into the one pull that follows
            if len(received) < PUBSUB_MAX_MESSAGES or count >= self.max_drain:
                break
        if count:
            log.info("notified: %d message(s), e.g. %s", count, describe_finalize(first or {}))
        elif timeout > 0:
            time.sleep(min(timeout, 1.0))  # an emulator answers at once: do not spin
        return count

    def done(self) -> None:
        if self._acks:
            url = f"{self.endpoint}/v1/{self.subscription}:acknowledge"
            self.session.post(url, json={"ackIds": self._acks}, timeout=30).raise_for_status()
            self._acks = []


def cut(value: Any, limit: int = MAX_ECHO_CHARS) -> str:
    """``value`` as text of at most ``limit`` characters (a hostile field is echoed, never printed whole)."""
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} chars)"


def describe_event(body: Any) -> str:
    """One line for an EventBridge ``Parameter Store Change`` event (or what the body is instead).

    Never raises: the body is bounded before it is parsed (a 100,000-deep body is refused by the
    depth check, not by a RecursionError) and every echoed field is cut to ``MAX_ECHO_CHARS``.
    """
    try:
        if not isinstance(body, str):
            return f"a message whose body is not text ({type(body).__name__})"
        if len(body) > MAX_NOTIFICATION_CHARS:
            return f"a message of {len(body)} chars, not parsed (limit {MAX_NOTIFICATION_CHARS})"
        event = load_json(body, "message", TopocastError)
        if not isinstance(event, dict):
            return f"a message that is not an EventBridge event ({cut(body, 80)!r})"
        detail = event.get("detail")
        detail = detail if isinstance(detail, dict) else {}
        return f"{cut(event.get('detail-type'))}: {cut(detail.get('operation'))} {cut(detail.get('name'))}"
    except TopocastError as exc:
        return f"a message that is not an EventBridge event ({cut(str(exc))})"
    except Exception as exc:  # whatever else a body can do, it never costs the batch
        return f"a message that could not be read ({type(exc).__name__})"


def describe_finalize(message: dict[str, Any]) -> str:
    """One line for a Pub/Sub ``OBJECT_FINALIZE`` notification, every field cut."""
    inner = message.get("message")
    attrs = inner.get("attributes") if isinstance(inner, dict) else None
    attrs = attrs if isinstance(attrs, dict) else {}
    return f"{cut(attrs.get('eventType'))} gs://{cut(attrs.get('bucketId'))}/{cut(attrs.get('objectId'))}"


@dataclass
class FileWaker:
    """A local ``file://`` source: wakes when the file changes (its inode, size or modification time), read by
    polling every ``interval`` seconds, so watch mode can be tried without a cloud queue. A file replaced by a
    rename (how every writer here installs one) is a new inode: seen as a change even within one second."""

    path: Path
    interval: float = 0.5
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic
    _seen: tuple[int, int, int] | None = None

    def __post_init__(self) -> None:
        self._seen = self._stamp()

    def _stamp(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None  # not there (yet): its appearance is the change
        return (st.st_ino, st.st_size, st.st_mtime_ns)

    def wait(self, timeout: float) -> int:
        until = self.clock() + min(timeout, 1.0)  # back within a second: a stop request is seen in time
        while True:
            now = self._stamp()
            if now != self._seen:
                self._seen = now
                return 1
            left = until - self.clock()
            if left <= 0:
                return 0
            self.sleep(min(self.interval, left))

    def done(self) -> None:
        pass


@dataclass
class WatchStats:
    pulls: int = 0
    notified: int = 0
    fallbacks: int = 0
    waker_errors: int = 0


def watch(
    pull_once: Callable[[], int],
    waker: Waker,
    *,
    fallback_seconds: float = DEFAULT_FALLBACK_SECONDS,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    stop: Callable[[], bool] = lambda: False,
    stats: WatchStats | None = None,
) -> int:
    """Pull at start, then on every notification and after ``fallback_seconds`` without one, until ``stop()``.

    A failed pull is reported by ``pull_once`` and retried at the next wake-up; an error of the
    notification service is one warning line and a pause, the fallback keeps installing.
    Returns the last pull's exit code.
    """
    stats = stats if stats is not None else WatchStats()
    code = pull_once()
    stats.pulls += 1
    next_fallback = clock() + fallback_seconds
    backoff = 1.0
    while not stop():
        try:
            woke = waker.wait(max(0.0, next_fallback - clock()))
            backoff = 1.0
        except Exception as exc:  # the queue / subscription is unreachable: the fallback still pulls
            stats.waker_errors += 1
            print(f"topocast: warning: pull --watch: notifications unavailable ({exc}); retrying", file=sys.stderr)
            sleep(min(backoff, max(0.0, next_fallback - clock())))
            backoff = min(backoff * 2, 30.0)
            woke = 0
        if not woke and clock() < next_fallback:
            continue
        stats.notified += bool(woke)
        stats.fallbacks += not woke
        code = pull_once()
        stats.pulls += 1
        next_fallback = clock() + fallback_seconds
        try:
            waker.done()
        except Exception as exc:  # redelivered later: one more (idempotent) pull
            print(f"topocast: warning: pull --watch: could not acknowledge ({exc})", file=sys.stderr)
    return code


def waker_from_args(
    queue_url: str | None, subscription: str | None, pubsub_endpoint: str | None = None, source: str | None = None
) -> Waker:
    """The waker for ``--queue-url`` (AWS), ``--subscription`` (GCP) or, without either, a ``file://`` source."""
    if queue_url and subscription:
        raise ValueError("pull --watch: give --queue-url (AWS) or --subscription (GCP), not both")
    if not queue_url and not subscription and source and source.startswith("file://"):
        return FileWaker(Path(unquote(urlparse(source).path)))
    if queue_url:
        import boto3

        return SqsWaker(queue_url, boto3.client("sqs"))
    if subscription:
        import google.auth
        from google.auth.transport.requests import AuthorizedSession

        emulator = os.environ.get("PUBSUB_EMULATOR_HOST")
        if emulator:
            import requests

            return PubSubWaker(subscription, requests.Session(), f"http://{emulator}")
        credentials, _ = google.auth.default(scopes=["https://www.googleapis.com/auth/pubsub"])
        return PubSubWaker(
            subscription, AuthorizedSession(credentials), pubsub_endpoint or "https://pubsub.googleapis.com"
        )
    raise ValueError(
        "pull --watch needs --queue-url (AWS: the head node's SQS queue), --subscription (GCP) or a file:// source"
    )


def run_watch(
    queue_url: str | None,
    subscription: str | None,
    fallback_seconds: float,
    pull_once: Callable[[], int],
    source: str | None = None,
) -> int:
    """The ``pull --watch`` command: build the waker, stop cleanly on SIGTERM / SIGINT."""
    try:
        waker = waker_from_args(queue_url, subscription, source=source)
    except ValueError as exc:
        raise TopocastError(str(exc)) from None
    stopping = {"now": False}

    def stop(signum: int, frame: Any) -> None:
        stopping["now"] = True

    before = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    # the notifications go to stderr; a handler of this module's logger, not the root's, and taken off
    # again: a command run in-process (tests, a wrapper) leaves no handler on a stream that may close
    handler = _StderrHandler()
    handler.setFormatter(logging.Formatter("topocast: %(message)s"))
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False
    try:
        return watch(pull_once, waker, fallback_seconds=fallback_seconds, stop=lambda: stopping["now"])
    finally:
        log.removeHandler(handler)
        log.propagate = True
        for sig, previous in before.items():
            signal.signal(sig, previous)


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is when a record is emitted."""

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass


__all__ = [
    "FileWaker",
    "PubSubWaker",
    "SqsWaker",
    "Waker",
    "WatchStats",
    "cut",
    "describe_event",
    "describe_finalize",
    "run_watch",
    "waker_from_args",
    "watch",
]
