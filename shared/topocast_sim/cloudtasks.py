"""A local Cloud Tasks: the v2 REST API google-cloud-tasks speaks, plus a dispatcher that runs HTTP tasks.

Point ``tasks_v2.CloudTasksClient(transport="rest", client_options={"api_endpoint": fake.url},
credentials=AnonymousCredentials())`` at it and the real client's request
encoding (``CreateTaskRequest`` as JSON, enums as integers, ``body`` base64,
RFC 3339 ``scheduleTime``) and error mapping run unchanged.

What it implements, as the Cloud Tasks reference documents it:

* ``POST /v2/{queue}/tasks`` (create), ``GET``/``DELETE /v2/{queue}/tasks/{id}``,
  ``GET /v2/{queue}/tasks`` (list), ``POST /v2/{queue}/tasks/{id}:run``,
  ``GET /v2/{queue}`` and ``POST /v2/projects/P/locations/L/queues`` (create queue).
* Task names: ``{queue}/tasks/[A-Za-z0-9_-]{1,500}``, otherwise 400
  ``INVALID_ARGUMENT``. **Deduplication:** creating a name that exists, or that
  ran or was deleted less than ``tombstone_seconds`` ago (about an hour in the
  real service), is 409 ``ALREADY_EXISTS``. A task without a name gets a
  random one. A queue that does not exist is 404 ``NOT_FOUND``.
* ``scheduleTime`` up to 30 days ahead (else 400); the dispatcher POSTs the
  ``httpRequest`` (url, method, headers, body) when it is due, adding the
  ``X-CloudTasks-*`` headers and, for ``oidcToken``, an ``Authorization:
  Bearer`` header (a placeholder, not a signed JWT). A 2xx answer completes the
  task; anything else (or no answer within ``dispatch_deadline``) is retried
  with the queue's ``retry_config`` backoff (``min_backoff`` doubling ``max_doublings``
  times, then growing linearly, up to ``max_backoff``; the defaults are the Terraform
  module's: 5 s, 300 s, 5 doublings, 10 attempts) until ``max_attempts``, then the
  task is dropped and counted in ``failed``. At most ``max_concurrent`` dispatches
  run at once (Terraform: 5). ``time_scale`` compresses every backoff by one factor,
  for tests whose functions (other processes, on the wall clock) have their debounce
  lease compressed by the same factor: the order of retries and leases stays Terraform's.
* ``clock`` is what the queue schedules by (the wall clock by default). Given
  :func:`topocast_sim.simclock.now`, :meth:`~FakeCloudTasks.wait_idle` with ``skip_waits=True``
  jumps that clock to the next task due whenever nothing is in flight, instead of waiting for it:
  schedule times, backoff, name tombstones and dispatch order stay exactly as above, only the
  idle time between them is skipped.

Not implemented: App Engine targets, queue rate limits, pause/resume/purge,
IAM, ``responseView=FULL`` on list.
"""

from __future__ import annotations

import base64
import heapq
import itertools
import json
import re
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qs, unquote, urlparse

from topocast_sim.http import LocalServer, QuietHandler

_QUEUE = r"projects/[^/]+/locations/[^/]+/queues/[A-Za-z0-9-]+"
_TASK_ID = re.compile(r"^[A-Za-z0-9_-]{1,500}$")
_METHODS = {0: "POST", 1: "POST", 2: "GET", 3: "HEAD", 4: "PUT", 5: "DELETE", 6: "PATCH", 7: "OPTIONS"}
_STATUS = {400: "INVALID_ARGUMENT", 404: "NOT_FOUND", 409: "ALREADY_EXISTS"}
MAX_SCHEDULE_AHEAD = 30 * 24 * 3600


class TasksError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def _rfc3339(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse_time(text: str) -> float:
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise TasksError(400, f"Invalid scheduleTime {text!r}") from None


@dataclass
class _Task:
    name: str
    schedule: float
    url: str
    method: str
    headers: dict[str, str]
    body: bytes
    oidc: str | None
    created: float
    attempts: int = 0
    responses: int = 0
    last_status: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "scheduleTime": _rfc3339(self.schedule),
            "createTime": _rfc3339(self.created),
            "dispatchCount": self.attempts,
            "responseCount": self.responses,
            "view": "BASIC",
            "httpRequest": {"url": self.url, "httpMethod": self.method, "headers": self.headers},
        }


class FakeCloudTasks(LocalServer):
    """In-memory queues, the REST server and the dispatcher (see the module docstring)."""

    def __init__(
        self,
        *,
        min_backoff: float = 5.0,
        max_backoff: float = 300.0,
        max_doublings: int = 5,
        max_attempts: int = 10,
        max_concurrent: int = 5,
        dispatch_deadline: float = 120.0,
        tombstone_seconds: float = 3600.0,
        time_scale: float = 1.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.min_backoff = min_backoff
        self.max_backoff = max_backoff
        self.max_doublings = max_doublings
        self.max_attempts = max_attempts
        self.time_scale = time_scale
        self.clock = clock
        #: seconds the clock was moved forward by :meth:`wait_idle` (``skip_waits=True``)
        self.skipped_seconds = 0.0
        self.dispatch_deadline = dispatch_deadline
        self.tombstone_seconds = tombstone_seconds
        self.cond = threading.Condition()
        self.queues: set[str] = set()
        self.tasks: dict[str, _Task] = {}
        self.tombstones: dict[str, float] = {}
        self._heap: list[tuple[float, int, str]] = []
        self._seq = itertools.count()
        self._inflight = 0
        self.counts: dict[str, int] = {"created": 0, "already_exists": 0, "attempts": 0, "succeeded": 0, "failed": 0}
        self._pool = ThreadPoolExecutor(max_workers=max_concurrent, thread_name_prefix="fake-tasks")
        self._stop = False

    # ----- API ------------------------------------------------------------------------------------
    def add_queue(self, queue: str) -> str:
        if not re.fullmatch(_QUEUE, queue):
            raise ValueError(f"bad queue name {queue!r}")
        with self.cond:
            self.queues.add(queue)
        return queue

    def _create(self, parent: str, body: dict[str, Any]) -> dict[str, Any]:
        task = body.get("task") or {}
        http = task.get("httpRequest")
        if not isinstance(http, dict) or not str(http.get("url", "")).startswith(("http://", "https://")):
            raise TasksError(
                400, "Task.httpRequest with an http(s) url is required (App Engine tasks: not in this fake)"
            )
        now = self.clock()
        schedule = _parse_time(task["scheduleTime"]) if task.get("scheduleTime") else now
        if schedule > now + MAX_SCHEDULE_AHEAD:
            raise TasksError(400, "scheduleTime must be at most 30 days in the future")
        name = task.get("name") or f"{parent}/tasks/{uuid.uuid4().int % 10**19}"
        tid = name.removeprefix(f"{parent}/tasks/")
        if tid == name or not _TASK_ID.match(tid):
            raise TasksError(400, f"Invalid task name {name!r}: must be {parent}/tasks/[A-Za-z0-9_-]{{1,500}}")
        method = http.get("httpMethod", "POST")
        oidc = (http.get("oidcToken") or {}).get("serviceAccountEmail")
        with self.cond:
            if parent not in self.queues:
                raise TasksError(404, f"Queue does not exist: {parent}")
            gone = self.tombstones.get(name)
            if name in self.tasks or (gone is not None and now - gone < self.tombstone_seconds):
                self.counts["already_exists"] += 1
                raise TasksError(409, "Requested entity already exists")
            t = _Task(
                name=name,
                schedule=schedule,
                url=http["url"],
                method=_METHODS.get(method, str(method)) if isinstance(method, int) else str(method),
                headers=dict(http.get("headers") or {}),
                body=base64.b64decode(http.get("body", "") or ""),
                oidc=oidc,
                created=now,
            )
            self.tasks[name] = t
            self.counts["created"] += 1
            heapq.heappush(self._heap, (schedule, next(self._seq), name))
            self.cond.notify_all()
            return t.to_json()

    def _finish(self, name: str) -> None:
        self.tasks.pop(name, None)
        self.tombstones[name] = self.clock()

    def handle(self, method: str, path: str, query: dict[str, str], body: dict[str, Any]) -> dict[str, Any]:
        path = unquote(path)
        if m := re.fullmatch(rf"/v2/({_QUEUE})/tasks", path):
            if method == "POST":
                return self._create(m.group(1), body)
            with self.cond:
                if m.group(1) not in self.queues:
                    raise TasksError(404, f"Queue does not exist: {m.group(1)}")
                tasks = sorted(
                    (t for n, t in self.tasks.items() if n.startswith(m.group(1) + "/")), key=lambda t: t.name
                )
            return {"tasks": [t.to_json() for t in tasks]}
        if m := re.fullmatch(rf"/v2/({_QUEUE}/tasks/[^/:]+)(:run)?", path):
            with self.cond:
                t = self.tasks.get(m.group(1))
                if t is None:
                    raise TasksError(404, f"Task does not exist: {m.group(1)}")
                if method == "DELETE":
                    self._finish(t.name)
                    return {}
                if m.group(2):
                    t.schedule = self.clock()
                    heapq.heappush(self._heap, (t.schedule, next(self._seq), t.name))
                    self.cond.notify_all()
                return t.to_json()
        if m := re.fullmatch(rf"/v2/({_QUEUE})", path):
            with self.cond:
                if m.group(1) not in self.queues:
                    raise TasksError(404, f"Queue does not exist: {m.group(1)}")
            return {"name": m.group(1), "state": "RUNNING"}
        if (m := re.fullmatch(r"/v2/(projects/[^/]+/locations/[^/]+)/queues", path)) and method == "POST":
            return {"name": self.add_queue(str(body.get("name") or "")), "state": "RUNNING"}
        raise TasksError(404, f"unknown path {path}")

    # ----- dispatcher -------------------------------------------------------------------------------
    def _loop(self) -> None:
        while True:
            with self.cond:
                while not self._stop:
                    now = self.clock()
                    while self._heap and (self._heap[0][2] not in self.tasks):
                        heapq.heappop(self._heap)  # deleted or finished
                    if self._heap and self._heap[0][0] <= now:
                        _, _, name = heapq.heappop(self._heap)
                        task = self.tasks[name]
                        if task.schedule > now:  # rescheduled (retry or :run): an older heap entry
                            continue
                        task.schedule = float("inf")  # in flight: not due again until it reports
                        self._inflight += 1
                        break
                    self.cond.wait(timeout=(self._heap[0][0] - now) if self._heap else 0.5)
                else:
                    return
            self._pool.submit(self._dispatch, task)

    def _dispatch(self, task: _Task) -> None:
        status: int | None = None
        task.attempts += 1
        headers = dict(task.headers)
        queue, _, tid = task.name.rpartition("/tasks/")
        headers.update(
            {
                "X-CloudTasks-QueueName": queue.rsplit("/", 1)[-1],
                "X-CloudTasks-TaskName": tid,
                "X-CloudTasks-TaskRetryCount": str(task.attempts - 1),
                "X-CloudTasks-TaskExecutionCount": str(task.responses),
                "User-Agent": "Google-Cloud-Tasks",
            }
        )
        if task.oidc:
            headers["Authorization"] = f"Bearer fake-oidc-token-for-{task.oidc}"
        req = urllib.request.Request(task.url, data=task.body or None, headers=headers, method=task.method)
        try:
            with urllib.request.urlopen(req, timeout=self.dispatch_deadline) as resp:
                status = resp.status
        except urllib.error.HTTPError as exc:
            status = exc.code
        except OSError:
            status = None
        with self.cond:
            self.counts["attempts"] += 1
            self._inflight -= 1
            task.last_status = status
            if status is not None:
                task.responses += 1
            if status is not None and 200 <= status < 300:
                self.counts["succeeded"] += 1
                self._finish(task.name)
            elif task.attempts >= self.max_attempts:
                self.counts["failed"] += 1
                self._finish(task.name)
            elif task.name in self.tasks:
                task.schedule = self.clock() + self.backoff(task.attempts) * self.time_scale
                heapq.heappush(self._heap, (task.schedule, next(self._seq), task.name))
            self.cond.notify_all()

    def backoff(self, attempts: int) -> float:
        """Seconds before the next attempt after ``attempts`` failed ones (Cloud Tasks' ``retry_config``:
        doubling ``max_doublings`` times from ``min_backoff``, then linear steps of the last interval)."""
        doublings = min(attempts - 1, self.max_doublings)
        interval = self.min_backoff * 2**doublings
        extra = max(0, attempts - 1 - self.max_doublings)
        return min(self.max_backoff, interval + extra * self.min_backoff * 2**self.max_doublings)

    def pending(self) -> int:
        with self.cond:
            return len(self.tasks)

    def wait_idle(self, timeout: float, *, skip_waits: bool = False) -> bool:
        """Wait until no task is queued or in flight; False after ``timeout`` seconds of real time.

        ``skip_waits`` (for a ``clock`` that can be moved, :mod:`topocast_sim.simclock`): when no
        dispatch is in flight, the clock jumps to the next task's schedule time instead of waiting.
        """
        from topocast_sim import simclock

        if skip_waits and self.clock is not simclock.now:
            raise ValueError("skip_waits needs FakeCloudTasks(clock=simclock.now): only that clock can be moved")
        deadline = time.monotonic() + timeout
        with self.cond:
            while self.tasks or self._inflight:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                if skip_waits and not self._inflight:
                    self._skip_to_next_due()
                self.cond.wait(timeout=min(left, 0.2))
        return True

    def _skip_to_next_due(self) -> None:
        """Move the simulated clock to the earliest live task's schedule time (caller holds ``cond``)."""
        from topocast_sim import simclock

        due = min((t.schedule for t in self.tasks.values()), default=None)
        wait = due - self.clock() if due is not None else 0.0
        if 0 < wait < float("inf"):
            simclock.advance(wait + 0.001)
            self.skipped_seconds += wait
            self.cond.notify_all()  # the dispatcher waits on the old clock's timeout

    # ----- server lifecycle -------------------------------------------------------------------------
    def start(self, host: str = "127.0.0.1", port: int = 0) -> FakeCloudTasks:
        fake = self

        class Handler(QuietHandler):
            def _handle(self) -> None:
                url = urlparse(self.path)
                query = {k: v[-1] for k, v in parse_qs(url.query).items()}
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw) if raw.strip() else {}
                    status, out = 200, fake.handle(self.command, url.path, query, body)
                except TasksError as exc:
                    status = exc.code
                    out = {"error": {"code": exc.code, "message": str(exc), "status": _STATUS.get(exc.code, "UNKNOWN")}}
                except ValueError as exc:
                    status, out = 400, {"error": {"code": 400, "message": str(exc), "status": "INVALID_ARGUMENT"}}
                self.send_json(status, out)

            do_GET = do_POST = do_DELETE = _handle

        self._serve(Handler, host, port, "fake-tasks-api")
        threading.Thread(target=self._loop, name="fake-tasks-dispatcher", daemon=True).start()
        return self

    def stop(self) -> None:
        with self.cond:
            self._stop = True
            self.cond.notify_all()
        super().stop()
        self._pool.shutdown(wait=False, cancel_futures=True)
