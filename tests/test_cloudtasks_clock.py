"""The local Cloud Tasks on the simulated clock: waits are skipped, what is delivered when stays the same.

Expected times are Cloud Tasks' own rules with the Terraform module's ``retry_config``
(``infra/terraform/modules/gcp``: min_backoff 5 s, doubling): a task runs no earlier than its
``scheduleTime``; after a failed attempt the next one is ``min_backoff`` later, then twice that.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from gcp_fixtures import QUEUE

from topocast.gcp import tasks
from topocast.gcp.clients import tasks_client
from topocast_sim import simclock
from topocast_sim.cloudtasks import FakeCloudTasks
from topocast_sim.gce import generate_cluster
from topocast_sim.gcp_pipeline import LocalGcpPipeline


class _FlakyReceiver:
    """Answers 500 to the first ``failures`` deliveries, then 200; records the simulated time of each."""

    def __init__(self, failures: int) -> None:
        self.delivered_at: list[float] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                outer.delivered_at.append(simclock.now())
                self.send_response(500 if len(outer.delivered_at) <= failures else 200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                return

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_port}/"

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def simulated_tasks() -> Iterator[FakeCloudTasks]:
    """The fake on the simulated clock, and the functions' clock (TaskQueue's scheduleTime) with it."""
    previous = tasks.set_clock(simclock.now)
    try:
        with FakeCloudTasks(clock=simclock.now) as fake:  # Terraform's retry_config: 5 s, doubling
            fake.add_queue(QUEUE)
            yield fake
    finally:
        tasks.set_clock(previous)


def test_a_skipped_wait_keeps_the_schedule_time_and_the_retry_backoff(simulated_tasks: FakeCloudTasks) -> None:
    receiver = _FlakyReceiver(failures=2)
    try:
        queue = tasks.TaskQueue(QUEUE, tasks_client(simulated_tasks.url))
        sent_at = simclock.now()
        assert queue.send_event(receiver.url, "dev.topocast.test.v1", {"n": 1}, name="later", delay=300) == "created"
        assert simulated_tasks.wait_idle(60, skip_waits=True)
    finally:
        receiver.stop()
    first, second, third = receiver.delivered_at
    assert first - sent_at >= 300  # not before its scheduleTime, five simulated minutes on
    assert second - first >= 5 and third - second >= 10  # min_backoff, then doubled
    assert simulated_tasks.counts == {"created": 1, "already_exists": 0, "attempts": 3, "succeeded": 1, "failed": 0}
    assert simulated_tasks.skipped_seconds >= 300 - 60  # the five minutes were skipped, not waited out
    # the name stays taken after the task ran (the tombstone is on the same clock)
    assert queue.send_event(receiver.url, "dev.topocast.test.v1", {"n": 2}, name="later") == "exists"


def test_only_the_simulated_clock_can_be_skipped() -> None:
    with FakeCloudTasks() as wall_clock, pytest.raises(ValueError, match=r"clock=simclock\.now"):
        wall_clock.wait_idle(1, skip_waits=True)
    cluster = generate_cluster(2, label=("topocast-cluster", "c1"))
    with pytest.raises(ValueError, match="gcs_process=False"):
        LocalGcpPipeline(cluster, real_time=False, gcs_process=True)
