"""A local Pub/Sub (REST API v1): topics, pull subscriptions, publish, synchronous pull, acknowledge.

What ``topocast pull --watch --subscription`` (:class:`topocast.agents.pull_watch.PubSubWaker`) and
Cloud Storage's bucket notifications (:class:`topocast_sim.gcs.PreconditionProxy`) speak, on the
wire, at ``PUBSUB_EMULATOR_HOST``:

* ``PUT /v1/projects/P/topics/T``, ``PUT /v1/projects/P/subscriptions/S`` (``{"topic": ...,
  "ackDeadlineSeconds": N}``), ``GET`` of either; 409 ``ALREADY_EXISTS``, 404 ``NOT_FOUND``;
* ``POST /v1/projects/P/topics/T:publish`` (``{"messages": [{"data": base64, "attributes": {}}]}``)
  -> ``{"messageIds": [...]}``: every subscription of the topic gets a copy;
* ``POST /v1/projects/P/subscriptions/S:pull`` (``{"maxMessages": N, "returnImmediately": bool}``):
  waits up to ``pull_wait`` seconds for a message, as the service's synchronous pull does, and
  answers ``{"receivedMessages": [{"ackId", "message": {"data", "attributes", "messageId",
  "publishTime"}, "deliveryAttempt"}]}`` (``{}`` when none came);
* ``POST /v1/projects/P/subscriptions/S:acknowledge`` (``{"ackIds": [...]}``). A message that is
  not acknowledged within the subscription's ack deadline is delivered again (at least once).

Not implemented: push subscriptions, filters, ordering keys, dead-letter topics, exactly-once
delivery, ``modifyAckDeadline``, seek/snapshots, schemas, IAM and authentication (any token is
accepted, as the official emulator does), message retention limits.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlparse

from topocast_sim.http import LocalServer, QuietHandler

__all__ = ["FakePubSub"]


@dataclass
class _Subscription:
    name: str
    topic: str
    ack_deadline: float
    ready: deque[dict[str, Any]] = field(default_factory=deque)
    #: ackId -> (message, attempt, redelivery time)
    outstanding: dict[str, tuple[dict[str, Any], int, float]] = field(default_factory=dict)


class FakePubSub(LocalServer):
    """See the module docstring. ``published`` / ``delivered`` / ``acknowledged`` count messages."""

    def __init__(self, *, pull_wait: float = 5.0) -> None:
        self.pull_wait = pull_wait
        self.topics: dict[str, list[str]] = {}
        self.subscriptions: dict[str, _Subscription] = {}
        self.cond = threading.Condition()
        self.published = self.delivered = self.acknowledged = 0
        self._ids = itertools.count(1)

    # ----- the service ----------------------------------------------------------------------------
    def create_topic(self, name: str) -> tuple[int, dict[str, Any]]:
        with self.cond:
            if name in self.topics:
                return 409, _status(409, "ALREADY_EXISTS", "Topic already exists")
            self.topics[name] = []
            return 200, {"name": name}

    def create_subscription(self, name: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        topic = str(body.get("topic", ""))
        deadline = float(body.get("ackDeadlineSeconds", 10))
        with self.cond:
            if name in self.subscriptions:
                return 409, _status(409, "ALREADY_EXISTS", "Subscription already exists")
            if topic not in self.topics:
                return 404, _status(404, "NOT_FOUND", f"Topic not found: {topic}")
            self.subscriptions[name] = _Subscription(name, topic, deadline)
            self.topics[topic].append(name)
            return 200, {"name": name, "topic": topic, "ackDeadlineSeconds": int(deadline)}

    def publish(self, topic: str, messages: list[dict[str, Any]]) -> tuple[int, dict[str, Any]]:
        with self.cond:
            if topic not in self.topics:
                return 404, _status(404, "NOT_FOUND", f"Topic not found: {topic}")
            ids = []
            for m in messages:
                message_id = str(next(self._ids))
                ids.append(message_id)
                stamped = {
                    "data": m.get("data", ""),
                    "attributes": dict(m.get("attributes") or {}),
                    "messageId": message_id,
                    "publishTime": datetime.now(UTC).isoformat().replace("+00:00", "Z"),
                }
                for sub in self.topics[topic]:
                    self.subscriptions[sub].ready.append(stamped)
                self.published += 1
            self.cond.notify_all()
            return 200, {"messageIds": ids}

    def pull(self, name: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        limit = max(1, int(body.get("maxMessages", 1)))
        give_up = time.monotonic() + (0.0 if body.get("returnImmediately") else self.pull_wait)
        with self.cond:
            sub = self.subscriptions.get(name)
            if sub is None:
                return 404, _status(404, "NOT_FOUND", f"Subscription does not exist: {name}")
            while True:
                self._redeliver(sub)
                if sub.ready or time.monotonic() >= give_up:
                    break
                self.cond.wait(min(0.5, max(0.0, give_up - time.monotonic())))
            received: list[dict[str, Any]] = []
            while sub.ready and len(received) < limit:
                message = sub.ready.popleft()
                attempt = int(message.pop("_attempt", 1))
                ack_id = f"{name}/{next(self._ids)}"
                sub.outstanding[ack_id] = (message, attempt, time.monotonic() + sub.ack_deadline)
                received.append({"ackId": ack_id, "message": message, "deliveryAttempt": attempt})
                self.delivered += 1
            return 200, ({"receivedMessages": received} if received else {})

    def acknowledge(self, name: str, ack_ids: list[str]) -> tuple[int, dict[str, Any]]:
        with self.cond:
            sub = self.subscriptions.get(name)
            if sub is None:
                return 404, _status(404, "NOT_FOUND", f"Subscription does not exist: {name}")
            for ack_id in ack_ids:
                if sub.outstanding.pop(ack_id, None) is not None:
                    self.acknowledged += 1
            return 200, {}

    def _redeliver(self, sub: _Subscription) -> None:
        now = time.monotonic()
        for ack_id, (message, attempt, due) in list(sub.outstanding.items()):
            if due <= now:
                del sub.outstanding[ack_id]
                sub.ready.append({**message, "_attempt": attempt + 1})

    # ----- HTTP -----------------------------------------------------------------------------------
    def start(self, host: str = "127.0.0.1", port: int = 0) -> FakePubSub:
        service = self

        class Handler(QuietHandler):
            def _handle(self) -> None:
                path = urlparse(self.path).path
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    body = json.loads(self.rfile.read(length) or b"{}") if length else {}
                except ValueError:
                    self.send_json(400, _status(400, "INVALID_ARGUMENT", "Invalid JSON payload received."))
                    return
                resource, _, verb = path.removeprefix("/v1/").partition(":")
                kind = resource.split("/")[2] if resource.count("/") == 3 else ""
                if self.command == "PUT" and kind == "topics" and not verb:
                    status, answer = service.create_topic(resource)
                elif self.command == "PUT" and kind == "subscriptions" and not verb:
                    status, answer = service.create_subscription(resource, body)
                elif self.command == "GET" and kind in ("topics", "subscriptions") and not verb:
                    known = resource in (service.topics if kind == "topics" else service.subscriptions)
                    status, answer = (200, {"name": resource}) if known else (404, _status(404, "NOT_FOUND", resource))
                elif self.command == "POST" and kind == "topics" and verb == "publish":
                    status, answer = service.publish(resource, list(body.get("messages") or []))
                elif self.command == "POST" and kind == "subscriptions" and verb == "pull":
                    status, answer = service.pull(resource, body)
                elif self.command == "POST" and kind == "subscriptions" and verb == "acknowledge":
                    status, answer = service.acknowledge(resource, list(body.get("ackIds") or []))
                else:
                    status, answer = 404, _status(404, "NOT_FOUND", f"{self.command} {path} is not served here")
                self.send_json(status, answer)

            do_GET = do_POST = do_PUT = _handle

        self._serve(Handler, host, port, "fake-pubsub")
        return self


def _status(code: int, status: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "status": status}}
