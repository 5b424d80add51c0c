"""The whole GCP pipeline on one machine: fakes for the services, the real functions over HTTP.

:class:`LocalGcpPipeline` starts

* :class:`~topocast_sim.gce_server.FakeCompute` serving a generated cluster,
* :class:`~topocast_sim.gcs.LocalGcs` (gcp-storage-emulator + generation preconditions; in a child
  process with ``gcs_process=True``, which keeps its CPU time off this process's GIL),
* :class:`~topocast_sim.cloudtasks.FakeCloudTasks` (one queue; it delivers tasks over HTTP),
* the three functions, each loaded by functions-framework from
  ``functions/<name>/main.py`` (``create_app``, exactly what ``functions-framework
  --target`` runs) and served by a werkzeug server on a free port,

sets the ``TOPOCAST_*`` variables the functions read (restored by :meth:`stop`),
and plays Eventarc: :meth:`emit` POSTs audit-log / Pub/Sub CloudEvents to the
discover function in binary content mode. Used by ``topocast demo --cloud gcp``
and the pipeline tests.

With ``real_time=False`` (tests that do not measure latency) the pipeline runs on the simulated
clock (:mod:`topocast_sim.simclock`), as :class:`~topocast_sim.aws_pipeline.LocalAwsPipeline` does:
Cloud Tasks schedules by it, the functions read it (:func:`topocast.gcp.tasks.set_clock`: schedule
times, discover windows, leases, the debouncer) and Cloud Storage stamps objects with it (the storm
check compares marker times). :meth:`run_until_idle` then jumps the clock to the next task due
whenever nothing is in flight, so quiet windows, discover windows, max waits, retries' backoff
(Terraform's, uncompressed) and lease expiry cost no waiting. Cloud Storage then runs in this
process (``gcs_process=False``): a child process would stamp by its own clock.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, tzinfo
from pathlib import Path
from typing import Any

import topocast
from topocast_sim import eventarc, simclock
from topocast_sim.cloudtasks import FakeCloudTasks
from topocast_sim.gce import GeneratedCluster
from topocast_sim.gce_server import FakeCompute
from topocast_sim.gcs import LocalGcs
from topocast_sim.http import POLL_SECONDS

FUNCTIONS = ("discover", "render", "publish")
LOCATION = "us-central1"


def functions_dir() -> Path:
    """``functions/`` of the source tree this package was installed from (editable install / clone)."""
    here = Path(topocast.__file__).resolve().parents[2] / "functions"
    if not (here / "discover" / "main.py").is_file():
        raise FileNotFoundError(f"{here}/discover/main.py not found: run from a clone (pip install -e .)")
    return here


class _Server:
    def __init__(self, name: str, source: Path) -> None:
        import functions_framework
        from werkzeug.serving import make_server

        app = functions_framework.create_app(target=name, source=str(source), signature_type="cloudevent")
        self.httpd = make_server("127.0.0.1", 0, app, threaded=True)
        self.url = f"http://127.0.0.1:{self.httpd.server_port}/"
        serve = functools.partial(self.httpd.serve_forever, poll_interval=POLL_SECONDS)
        self.thread = threading.Thread(target=serve, name=f"function-{name}", daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class LocalGcpPipeline:
    """See the module docstring. Use as a context manager, or call :meth:`start` / :meth:`stop`."""

    def __init__(
        self,
        cluster: GeneratedCluster,
        *,
        name: str = "demo",
        quiet: float = 2.0,
        max_wait: float = 20.0,
        window: float = 1.0,
        full_scan_threshold: int = 100,
        extra_env: dict[str, str] | None = None,
        task_time_scale: float = 0.04,
        gcs_process: bool = False,
        real_time: bool = True,
    ) -> None:
        if not real_time and gcs_process:
            raise ValueError("real_time=False needs Cloud Storage in this process (gcs_process=False)")
        self.real_time = real_time
        self._restore_clock: Callable[[], None] | None = None
        self.generated = cluster
        self.name = name
        self.compute = FakeCompute(cluster.project, cluster.project_number)
        self.bucket = f"topocast-{name}"
        self.gcs = LocalGcs((self.bucket,), separate_process=gcs_process)
        # Terraform's retry_config (5 s .. 300 s); in real time compressed: the first retry after 0.2 s,
        # the longest 12 s. On the simulated clock the waits are skipped, so Terraform's as it is.
        self.tasks = FakeCloudTasks(time_scale=task_time_scale) if real_time else FakeCloudTasks(clock=simclock.now)
        self.queue = f"projects/{cluster.project}/locations/{LOCATION}/queues/topocast"
        self.env = {
            "TOPOCAST_CLUSTER": name,
            "TOPOCAST_PROVIDER": "gcp",
            "TOPOCAST_BUCKET": self.bucket,
            "TOPOCAST_PREFIX": "topocast",
            "TOPOCAST_GCP_PROJECT": cluster.project,
            "TOPOCAST_GCP_LABEL": f"{cluster.label[0]}={cluster.label[1]}",
            "TOPOCAST_TASK_QUEUE": self.queue,
            "TOPOCAST_PUBLISHERS": "gcs",
            "TOPOCAST_DEBOUNCE_QUIET_SECONDS": str(quiet),
            "TOPOCAST_DEBOUNCE_MAX_WAIT_SECONDS": str(max(max_wait, quiet)),
            "TOPOCAST_DISCOVER_WINDOW_SECONDS": str(window),
            "TOPOCAST_FULL_SCAN_THRESHOLD": str(full_scan_threshold),
            **(extra_env or {}),
        }
        self._saved: dict[str, str | None] = {}
        self.servers: dict[str, _Server] = {}
        self.sent = 0
        self.statuses: dict[int, int] = {}

    # ----- lifecycle ----------------------------------------------------------------------------
    def start(self) -> LocalGcpPipeline:
        if not self.real_time:
            self._restore_clock = _use_simulated_clock()
        self.compute.start()
        self.compute.add(self.generated.instances)
        self.gcs.start()
        self.tasks.start()
        self.tasks.add_queue(self.queue)
        source = functions_dir()
        for name in FUNCTIONS:
            self.servers[name] = _Server(name, source / name / "main.py")
        self.env.update(
            {
                "TOPOCAST_COMPUTE_ENDPOINT": self.compute.url,
                "TOPOCAST_CLOUDTASKS_ENDPOINT": self.tasks.url,
                "STORAGE_EMULATOR_HOST": self.gcs.url,
                "TOPOCAST_DISCOVER_URL": self.servers["discover"].url,
                "TOPOCAST_RENDER_URL": self.servers["render"].url,
                "TOPOCAST_PUBLISH_URL": self.servers["publish"].url,
            }
        )
        for key, value in self.env.items():
            self._saved.setdefault(key, os.environ.get(key))
            os.environ[key] = value
        return self

    def stop(self) -> None:
        for server in self.servers.values():
            server.stop()
        self.tasks.stop()
        self.gcs.stop()
        self.compute.stop()
        for key, value in self._saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        if self._restore_clock is not None:
            self._restore_clock()
            self._restore_clock = None

    def __enter__(self) -> LocalGcpPipeline:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ----- driving it ---------------------------------------------------------------------------
    def emit(self, events: list[tuple[dict[str, Any], Any]], *, concurrency: int = 8, mode: str = "binary") -> None:
        """POST CloudEvents to the discover function the way Eventarc does (concurrently)."""
        url = self.servers["discover"].url

        def send(event: tuple[dict[str, Any], Any]) -> int:
            return eventarc.post(url, event[0], event[1], mode=mode)  # type: ignore[arg-type]

        with ThreadPoolExecutor(max_workers=concurrency) as pool:
            for status in pool.map(send, events):
                self.sent += 1
                self.statuses[status] = self.statuses.get(status, 0) + 1

    def insert_events(
        self, instances: list[dict[str, Any]], *, origin: str = "mig"
    ) -> list[tuple[dict[str, Any], Any]]:
        """First and last audit-log entries of an ``instances.insert`` for each VM (project number in resourceName)."""
        out: list[tuple[dict[str, Any], Any]] = []
        for inst in instances:
            out += eventarc.insert_pair(
                project=self.generated.project,
                project_number=self.generated.project_number,
                zone=str(inst["zone"]).rsplit("/", 1)[-1],
                name=inst["name"],
                instance_id=inst["id"],
                origin=origin,
            )
        return out

    def reconcile(self) -> None:
        """A Cloud Scheduler run: a Pub/Sub message through Eventarc."""
        self.emit([eventarc.pubsub_event(self.generated.project, "topocast-reconcile", {"cluster": self.name})])

    def run_until_idle(self, timeout: float = 120.0) -> bool:
        """Wait until every task (windows, timers, publishes) has run (``timeout``: real seconds).

        On the simulated clock (``real_time=False``), the time until the next task is skipped."""
        return self.tasks.wait_idle(timeout, skip_waits=not self.real_time)

    def runtime(self) -> Any:
        """The functions' runtime (stores, debouncer) for inspecting what they wrote."""
        from topocast.gcp.handlers import runtime

        return runtime()


class _SimulatedDatetime(datetime):
    """``datetime`` whose ``now()`` reads the simulated clock (gcp-storage-emulator's object stamps)."""

    @classmethod
    def now(cls, tz: tzinfo | None = None) -> _SimulatedDatetime:
        return cls.fromtimestamp(simclock.now(), tz)


def _use_simulated_clock() -> Callable[[], None]:
    """The functions and the in-process Cloud Storage emulator on the simulated clock; returns the undo."""
    from gcp_storage_emulator.handlers import objects as emulator_objects

    from topocast.gcp import tasks

    previous_clock = tasks.set_clock(simclock.now)
    previous_datetime = emulator_objects.datetime
    emulator_objects.datetime = _SimulatedDatetime  # "updated" / "timeCreated" of every object written

    def restore() -> None:
        tasks.set_clock(previous_clock)
        emulator_objects.datetime = previous_datetime

    return restore
