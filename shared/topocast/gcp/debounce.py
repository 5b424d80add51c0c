"""Debounce on GCP: the state as one Cloud Storage object, the timers as named Cloud Tasks.

Why this shape (the AWS twin is DynamoDB + delayed SQS messages):

* **State** ``gs://<bucket>/<prefix>/<cluster>/state/debounce.json`` holds the
  :class:`~topocast.pipeline.debounce.DebounceState`. Every write is
  conditioned on the object generation read (``ifGenerationMatch``; ``0`` for
  the first write), which is exactly the compare-and-swap the shared
  :class:`~topocast.pipeline.debounce_runner.DebounceRunner` needs. No extra
  database: the functions already use the bucket.
* **Timers** are Cloud Tasks with ``schedule_time`` = now + delay, named after
  the timer ID (``timer-<cluster>-<timer_id>``), delivering a
  ``dev.topocast.debounce.timer.v1`` CloudEvent to the render function. The
  name makes a retried send harmless (``ALREADY_EXISTS``), and there is no
  900-second cap. Pub/Sub was the alternative, but it has no delayed delivery,
  so a quiet window would need a sleeping function or a scheduler per timer.

The rules that make at-least-once delivery safe (one live timer, stale and
duplicate timers dropped, render lease, lost-timer grace) are the shared pure
transitions; this module only persists and sends.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict

from topocast.gcp.events import DEBOUNCE_TIMER
from topocast.gcp.gcs import GcsObjects
from topocast.gcp.tasks import TaskQueue, task_id
from topocast.pipeline.debounce import DebounceState, state_from
from topocast.pipeline.debounce_runner import DamagedState, DebounceRunner
from topocast.pipeline.objects import MUST_NOT_EXIST, cluster_base
from topocast.ports.debounce import DebouncePolicy, Timer


class GcsDebounceStates:
    """:class:`~topocast.pipeline.debounce_runner.StateBackend`: one object per cluster, token = object generation."""

    def __init__(self, objects: GcsObjects, prefix: str) -> None:
        self.objects = objects
        self.prefix = prefix

    def key(self, cluster: str) -> str:
        return f"{cluster_base(self.prefix, cluster, 'state')}/debounce.json"

    def load(self, cluster: str) -> tuple[DebounceState, int | None]:
        got = self.objects.get(self.key(cluster))
        if got is None:
            return DebounceState(), None
        try:
            data = json.loads(got.data)
            if not isinstance(data, dict):
                raise ValueError(f"not a JSON object: {str(data)[:80]}")
            state = state_from(data)
        except (ValueError, TypeError, RecursionError) as exc:  # the runner resets it (DebounceRunner._reset)
            raise DamagedState(f"{self.objects.uri(got.key)}: {exc}", got.generation) from None
        return state, got.generation

    def save(self, cluster: str, state: DebounceState, token: int | None) -> int | None:
        body = json.dumps(asdict(state), sort_keys=True).encode()
        return self.objects.put(
            self.key(cluster), body, content_type="application/json", if_generation_match=token or MUST_NOT_EXIST
        )


class CloudTasksTimers:
    """:class:`~topocast.pipeline.debounce_runner.TimerSender`: a named, scheduled task per timer."""

    def __init__(self, queue: TaskQueue, render_url: str) -> None:
        self.queue = queue
        self.render_url = render_url

    def send(self, timer: Timer, delay: float) -> None:
        self.queue.send_event(
            self.render_url,
            DEBOUNCE_TIMER,
            timer.to_json(),
            name=task_id("timer", timer.cluster, timer.timer_id),
            delay=delay,
            subject=timer.cluster,
        )


def gcp_debouncer(
    objects: GcsObjects,
    prefix: str,
    queue: TaskQueue,
    render_url: str,
    policy: DebouncePolicy,
    *,
    on_reset: Callable[[str], None] | None = None,
    clock: Callable[[], float] = time.time,
) -> DebounceRunner:
    """The debouncer the GCP functions use: Cloud Storage state, Cloud Tasks timers, run by ``policy``;
    ``clock`` is the one the queue schedules tasks by (:func:`topocast.gcp.tasks.now`)."""
    states, timers = GcsDebounceStates(objects, prefix), CloudTasksTimers(queue, render_url)
    return DebounceRunner(states, timers, policy, clock=clock, on_reset=on_reset)
