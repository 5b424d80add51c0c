"""The three GCP functions through functions-framework: its in-process test client and its CLI server.

Events are shaped like Eventarc's deliveries (first/last audit-log entries of a
long-running operation, project number in ``resourceName``) and sent in binary
and structured content mode. Status codes matter: functions-framework answers
500 when the function raises and Eventarc / Cloud Tasks retry every non-2xx
answer, so a malformed event must be answered 200 (with the reason logged) and
a transient failure must raise.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from cloudevents.conversion import to_binary, to_structured
from cloudevents.http import CloudEvent
from gce_fake_server import FakeCompute, generate_cluster
from gcp_fixtures import QUEUE

from topocast.gcp import handlers
from topocast.gcp.gcs_store import GcsGraphStore
from topocast_sim import eventarc

REPO = Path(__file__).resolve().parent.parent
LABEL = ("topocast-cluster", "c1")


def gcp_env(compute: FakeCompute, gcs_url: str, bucket: str, tasks_url: str, **extra: str) -> dict[str, str]:
    return {
        "TOPOCAST_CLUSTER": "c1",
        "TOPOCAST_PROVIDER": "gcp",
        "TOPOCAST_BUCKET": bucket,
        "TOPOCAST_GCP_PROJECT": compute.project,
        "TOPOCAST_GCP_LABEL": "=".join(LABEL),
        "TOPOCAST_COMPUTE_ENDPOINT": compute.url,
        "STORAGE_EMULATOR_HOST": gcs_url,
        "TOPOCAST_CLOUDTASKS_ENDPOINT": tasks_url,
        "TOPOCAST_TASK_QUEUE": QUEUE,
        "TOPOCAST_RENDER_URL": "http://127.0.0.1:9/render",  # nothing listens: tests deliver tasks by hand
        "TOPOCAST_PUBLISH_URL": "http://127.0.0.1:9/publish",
        "TOPOCAST_PUBLISHERS": "gcs",
        "TOPOCAST_DEBOUNCE_QUIET_SECONDS": "0.3",
        "TOPOCAST_DISCOVER_WINDOW_SECONDS": "0",
        **extra,
    }


@pytest.fixture
def env(
    monkeypatch: pytest.MonkeyPatch, fake_compute: FakeCompute, local_gcs: Any, gcs_bucket: str, fake_tasks: Any
) -> dict[str, str]:
    values = gcp_env(fake_compute, local_gcs.url, gcs_bucket, fake_tasks.url)
    for key, value in values.items():
        monkeypatch.setenv(key, value)
    gen = generate_cluster(6, label=LABEL, project=fake_compute.project, project_number=fake_compute.project_number)
    fake_compute.add(gen.instances)
    return values


def app(name: str) -> Any:
    import functions_framework

    source = REPO / "functions" / name / "main.py"
    return functions_framework.create_app(target=name, source=str(source), signature_type="cloudevent").test_client()


def post(client: Any, attrs: dict[str, Any], data: Any, mode: str = "binary") -> Any:
    event = CloudEvent(attrs, data)
    headers, body = to_binary(event) if mode == "binary" else to_structured(event)
    return client.post("/", headers=headers, data=body)


def insert(fake: FakeCompute, name: str, phase: str) -> tuple[dict[str, Any], dict[str, Any]]:
    inst = fake.instances[("us-central1-a", name)]
    return eventarc.audit_log_event(
        project=fake.project, project_number=fake.project_number, zone="us-central1-a", name=name,
        instance_id=inst["id"], phase=phase, operation_id=f"op-{name}",  # type: ignore[arg-type]
    )  # fmt: skip


def graph_names(env: dict[str, str]) -> list[str]:
    stored = handlers.runtime().graphs.latest()
    return stored.graph.node_names() if stored else []


@pytest.mark.parametrize("mode", ["binary", "structured"])
def test_discover_acts_on_the_last_entry_only(
    env: dict[str, str], fake_compute: FakeCompute, fake_tasks: Any, mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    client = app("discover")
    caplog.set_level(logging.INFO, logger="topocast")
    first = post(client, *insert(fake_compute, "gpu-003", "first"), mode=mode)
    assert (first.status_code, first.data) == (200, b"OK")
    assert graph_names(env) == [] and fake_compute.calls == {}
    assert any("ignored: first entry of operation op-gpu-003" in r.getMessage() for r in caplog.records)
    last = post(client, *insert(fake_compute, "gpu-003", "last"), mode=mode)
    assert last.status_code == 200
    # an empty store is discovered in full (one policy on every cloud: the first run scans)
    assert len(graph_names(env)) == 6 and fake_compute.calls == {"aggregatedList": 1}
    assert fake_tasks.counts["created"] == 1  # the debounce timer for render
    again = post(client, *insert(fake_compute, "gpu-003", "last"), mode=mode)  # now incremental: one get
    assert again.status_code == 200 and fake_compute.calls == {"aggregatedList": 1, "get": 1}


def test_malformed_and_misrouted_events_are_answered_200_with_the_reason(
    env: dict[str, str], fake_compute: FakeCompute, caplog: pytest.LogCaptureFixture
) -> None:
    client = app("discover")
    caplog.set_level(logging.INFO, logger="topocast")
    attrs, data = insert(fake_compute, "gpu-001", "last")
    no_method = json.loads(json.dumps(data))
    del no_method["protoPayload"]["methodName"]
    cases = [
        (attrs, no_method, "data.protoPayload.methodName: is required"),
        ({**attrs, "datacontenttype": "text/plain"}, "{oops", "not JSON"),
        ({**attrs, "datacontenttype": "text/plain"}, "[" * 100_000, "nested deeper than 64 levels"),
        ({**attrs, "type": "com.example.unknown"}, {}, "unsupported CloudEvent type"),
        ({**attrs, "type": "dev.topocast.publish.v1"}, {"cluster": "c1", "generation": 1}, "not for the discover"),
    ]
    for a, d, reason in cases:
        response = post(client, a, d)
        assert response.status_code == 200  # a retry could never succeed: not redelivered
        errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
        assert any(reason in m and "rejected event" in m for m in errors), (reason, errors)
    assert graph_names(env) == [] and fake_compute.calls == {}
    # not a CloudEvent at all: functions-framework itself answers 400 before topocast runs
    assert client.post("/", json={"hello": "world"}).status_code == 400


def test_a_transient_failure_answers_500_so_the_platform_retries(
    env: dict[str, str], fake_compute: FakeCompute, monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    event = insert(fake_compute, "gpu-002", "last")
    monkeypatch.setenv("TOPOCAST_COMPUTE_ENDPOINT", f"http://127.0.0.1:{closed}")  # Compute unreachable
    response = post(app("discover"), *event)
    assert response.status_code == 500 and response.headers.get("X-Google-Status") == "crash"
    monkeypatch.setenv("TOPOCAST_COMPUTE_ENDPOINT", fake_compute.url)  # the redelivery succeeds
    assert post(app("discover"), *event).status_code == 200
    assert "gpu-002" in graph_names(env)  # (the first run scans the whole cluster)


def _task_event(fake_tasks: Any, ce_type: str) -> tuple[dict[str, Any], Any]:
    """The CloudEvent a queued task would deliver (headers -> attributes), taken off the fake queue."""
    with fake_tasks.cond:
        task = next(t for t in fake_tasks.tasks.values() if t.headers.get("ce-type") == ce_type)
        fake_tasks._finish(task.name)
    attrs = {k.removeprefix("ce-"): v for k, v in task.headers.items() if k.startswith("ce-")}
    return attrs, json.loads(task.body)


def test_render_and_publish_driven_by_their_task_events(
    env: dict[str, str], fake_compute: FakeCompute, fake_tasks: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="topocast")
    post(app("discover"), *eventarc.pubsub_event(fake_compute.project, "reconcile", {"cluster": "c1"}))
    assert len(graph_names(env)) == 6
    timer = _task_event(fake_tasks, "dev.topocast.debounce.timer.v1")
    time.sleep(0.35)  # the quiet window
    assert post(app("render"), *timer).status_code == 200
    publish = _task_event(fake_tasks, "dev.topocast.publish.v1")
    assert publish[1] == {"cluster": "c1", "generation": 1, "reason": "rendered"}
    assert post(app("publish"), *publish).status_code == 200
    rt = handlers.runtime()
    conf = rt.objects.get("topocast/c1/slurm/topology-tree.conf")
    assert conf is not None and conf.metadata["generation"] == "1" and b"gpu-[000-005]" in conf.data
    # a graph object written by anyone else also reaches render (the optional storage trigger)
    key = GcsGraphStore(rt.objects, "topocast", "c1").generation_key(2)
    written = {"bucket": env["TOPOCAST_BUCKET"], "name": key, "generation": "1"}
    attrs = {
        "specversion": "1.0",
        "id": "w1",
        "source": "//storage.googleapis.com/",
        "type": "google.cloud.storage.object.v1.finalized",
    }
    assert post(app("render"), attrs, written).status_code == 200
    assert any("render: noted" in r.getMessage() for r in caplog.records)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_functions_framework_cli_server_with_real_http_cloudevents(
    fake_compute: FakeCompute, local_gcs: Any, gcs_bucket: str, fake_tasks: Any, gcs_client: Any
) -> None:
    fake_compute.add(generate_cluster(4, label=LABEL).instances)
    port = _free_port()
    cli = Path(sys.executable).parent / "functions-framework"
    env = {**os.environ, **gcp_env(fake_compute, local_gcs.url, gcs_bucket, fake_tasks.url)}
    cmd = [str(cli), "--target", "discover", "--source", str(REPO / "functions/discover/main.py"),
           "--signature-type", "cloudevent", "--host", "127.0.0.1", "--port", str(port)]  # fmt: skip
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        url = f"http://127.0.0.1:{port}/"
        statuses = [
            eventarc.post(url, *insert(fake_compute, "gpu-000", "first"), mode="binary"),
            eventarc.post(url, *insert(fake_compute, "gpu-000", "last"), mode="binary"),
            eventarc.post(url, *insert(fake_compute, "gpu-001", "last"), mode="structured"),
            eventarc.post(url, {"specversion": "1.0", "id": "x", "source": "s", "type": "com.example.nope"}, {}),
        ]
        assert statuses == [200, 200, 200, 200]
    finally:
        proc.terminate()
        output = proc.communicate(timeout=20)[0]
    from topocast.gcp.gcs import GcsObjects

    stored = GcsGraphStore(GcsObjects(gcs_bucket, gcs_client), "topocast", "c1").latest()
    assert stored is not None and stored.graph.node_names() == ["gpu-000", "gpu-001", "gpu-002", "gpu-003"]
    lines = [json.loads(line) for line in output.splitlines() if line.startswith("{")]
    rejected = [entry for entry in lines if entry.get("topocast", {}).get("outcome") == "rejected"]
    assert len(rejected) == 1 and rejected[0]["severity"] == "ERROR"
    assert "com.example.nope" in rejected[0]["message"]
