"""Cloud Tasks as topocast's timer and hand-off service: a CloudEvent, delivered later, exactly once per name.

Each task is an HTTP request to a function's URL carrying a **binary-mode
CloudEvent** (``ce-specversion``, ``ce-type``, ``ce-source``, ``ce-id`` headers
and a JSON body), so the receiving ``@functions_framework.cloud_event``
function sees it like any Eventarc event. ``schedule_time`` delays it (up to
30 days, no 15-minute cap as on SQS). The **task name** deduplicates: creating
a task whose name exists, or existed recently (Cloud Tasks keeps the name
reserved for about an hour after the task ran or was deleted), answers
``ALREADY_EXISTS``, which :meth:`TaskQueue.send_event` reports as ``"exists"``
instead of an error. So a sender retrying after a lost response, or a thousand
events asking for the same window, create exactly one task.

With ``service_account`` set, Cloud Tasks adds an OIDC token for that account
(audience: the target URL), which a private Cloud Run function requires.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Literal

from topocast.providers.gcp.retry import RetryPolicy, transient_retry

SOURCE = "//topocast.dev/tasks"
_TASK_ID = re.compile(r"[^A-Za-z0-9_-]")
_QUEUE = re.compile(r"^projects/[^/]+/locations/[^/]+/queues/[A-Za-z0-9-]+$")

#: the GCP functions' clock (epoch seconds) for schedule times, discover windows, leases and the
#: debouncer: the wall clock. A local pipeline whose tests skip waits swaps in the simulated clock its
#: Cloud Tasks and Cloud Storage fakes read (topocast_sim.gcp_pipeline, ``real_time=False``).
_clock: Callable[[], float] = time.time


def now() -> float:
    """The time the GCP functions schedule and compare by (see :func:`set_clock`)."""
    return _clock()


def set_clock(clock: Callable[[], float]) -> Callable[[], float]:
    """Make :func:`now` read ``clock``; returns the clock it read before (to put it back)."""
    global _clock
    previous, _clock = _clock, clock
    return previous


def task_id(*parts: object) -> str:
    """A valid task ID (``[A-Za-z0-9_-]{1,500}``) made from ``parts``; a digest keeps distinct inputs distinct."""
    raw = "-".join(str(p) for p in parts)
    safe = _TASK_ID.sub("_", raw)[:400]
    if safe != raw:
        safe += "-" + hashlib.sha256(raw.encode()).hexdigest()[:12]
    return safe


class TaskQueue:
    """One Cloud Tasks queue (``projects/P/locations/L/queues/Q``) through ``tasks_v2.CloudTasksClient``."""

    def __init__(
        self, queue: str, client: Any, *, service_account: str | None = None, retry: RetryPolicy | None = None
    ) -> None:
        if not _QUEUE.match(queue):
            raise ValueError(f"task queue {queue!r} must look like projects/<p>/locations/<l>/queues/<name>")
        self.queue = queue
        self.client = client
        self.service_account = service_account
        self._retry = retry
        self.sent = 0
        self.deduplicated = 0

    def send_event(
        self,
        url: str,
        ce_type: str,
        data: dict[str, Any],
        *,
        name: str | None = None,
        delay: float = 0.0,
        subject: str | None = None,
    ) -> Literal["created", "exists"]:
        """Create a task that POSTs ``data`` as a CloudEvent of ``ce_type`` to ``url`` after ``delay`` seconds."""
        from google.api_core import exceptions as gexc
        from google.cloud import tasks_v2
        from google.protobuf import timestamp_pb2

        event_id = name or uuid.uuid4().hex
        headers = {
            "Content-Type": "application/json",
            "ce-specversion": "1.0",
            "ce-id": event_id,
            "ce-type": ce_type,
            "ce-source": SOURCE,
            "ce-time": datetime.now(UTC).isoformat(),
        }
        if subject:
            headers["ce-subject"] = subject
        request: dict[str, Any] = {
            "url": url,
            "http_method": tasks_v2.HttpMethod.POST,
            "headers": headers,
            "body": json.dumps(data).encode(),
        }
        if self.service_account:
            request["oidc_token"] = tasks_v2.OidcToken(service_account_email=self.service_account, audience=url)
        task = tasks_v2.Task(http_request=tasks_v2.HttpRequest(**request))
        if name:
            task.name = f"{self.queue}/tasks/{name}"
        if delay > 0:
            ts = timestamp_pb2.Timestamp()
            ts.FromNanoseconds(int((now() + delay) * 1e9))
            task.schedule_time = ts
        try:
            self.client.create_task(
                request=tasks_v2.CreateTaskRequest(parent=self.queue, task=task),
                retry=transient_retry(self._retry),
            )
        except gexc.Conflict:  # HTTP 409 ALREADY_EXISTS (REST maps it to Conflict, gRPC to AlreadyExists)
            self.deduplicated += 1
            return "exists"
        self.sent += 1
        return "created"
