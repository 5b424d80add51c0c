"""GCS-backed state: generation preconditions, graph generations, manifests, guard memory, debounce, Slurm objects.

gcp-storage-emulator accepts every generation precondition without checking it;
these tests run google-cloud-storage against topocast's precondition proxy in
front of it (:mod:`topocast_sim.gcs`), and the first test shows both behaviours.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from google.api_core import exceptions as gexc
from pipeline_helpers import graph
from test_store import _exercise

from topocast.agents.pull import fetch, pull
from topocast.errors import InvalidGraphError, StaleGenerationError
from topocast.gcp.clients import storage_client
from topocast.gcp.debounce import gcp_debouncer
from topocast.gcp.gcs import GcsObjects
from topocast.gcp.gcs_artifacts import GcsArtifactStore, GcsPublishState
from topocast.gcp.gcs_publish import GcsSlurmPublisher
from topocast.gcp.gcs_store import GcsGraphStore
from topocast.gcp.tasks import TaskQueue
from topocast.pipeline.store import commit
from topocast.ports.debounce import DebouncePolicy, Timer
from topocast.ports.records import HoldRecord, Manifest, ManifestEntry, PublishedRecord


def test_the_proxy_enforces_what_the_emulator_ignores(local_gcs: Any, gcs_bucket: str) -> None:
    direct = storage_client("t", local_gcs.emulator_url).bucket(gcs_bucket)
    guarded = storage_client("t", local_gcs.url).bucket(gcs_bucket)
    direct.blob("k").upload_from_string(b"v1")
    direct.blob("k").upload_from_string(b"v2", if_generation_match=0)  # the emulator alone: accepted
    current = guarded.get_blob("k").generation
    with pytest.raises(gexc.PreconditionFailed):
        guarded.blob("k").upload_from_string(b"v3", if_generation_match=0)
    with pytest.raises(gexc.PreconditionFailed):
        guarded.blob("k").upload_from_string(b"v3", if_generation_match=current + 1)
    with pytest.raises(gexc.PreconditionFailed):
        guarded.blob("k").delete(if_generation_match=current + 1)
    with pytest.raises(gexc.NotModified):
        guarded.blob("k").download_as_bytes(if_generation_not_match=current)
    guarded.blob("k").upload_from_string(b"v3", if_generation_match=current)
    assert guarded.blob("k").download_as_bytes() == b"v3"
    with pytest.raises(gexc.PreconditionFailed):
        guarded.blob("new").upload_from_string(b"x", if_generation_match=12345)  # absent object, generation given


def test_graph_store_behaves_like_the_memory_store(gcs_objects: GcsObjects) -> None:
    _exercise(GcsGraphStore(gcs_objects, "topocast", "c1"), "c1")


def test_rejects_other_cluster_corrupt_and_altered_generations(gcs_objects: GcsObjects) -> None:
    store = GcsGraphStore(gcs_objects, "p", "c1")
    with pytest.raises(InvalidGraphError, match="cluster 'c2'"):
        store.write_if_changed(graph("c2", 2), expected_generation=None)
    store.write_if_changed(graph("c1", 2), expected_generation=None)
    key = store.generation_key(1)
    gcs_objects.put(key, b'{"schema_version": 1, "cluster": "c1", "nodes": [{"na')
    with pytest.raises(InvalidGraphError, match=rf"gs://{gcs_objects.bucket_name}/{key}: not valid JSON"):
        store.latest()
    gcs_objects.put(key, json.dumps(graph("c1", 3).model_dump(mode="json")).encode())
    with pytest.raises(InvalidGraphError, match="does not match the recorded"):
        store.latest()
    gcs_objects.put(store.pointer_key, b'{"generation": "one"}')
    with pytest.raises(InvalidGraphError, match="corrupt latest-generation pointer"):
        store.latest()


def test_racing_writers_never_lose_an_update(gcs_objects: GcsObjects) -> None:
    """Eight writers each add their own node on top of whatever is newest: all eight land, one generation each."""
    store = GcsGraphStore(gcs_objects, "p", "c1")
    store.write_if_changed(graph("c1", 1), expected_generation=None)
    errors: list[Exception] = []

    def add(i: int) -> None:
        def build(current: Any) -> Any:
            nodes = [n.model_dump() for n in current.graph.nodes]
            nodes.append({"name": f"w-{i}", "id": f"i-{i + 100:017x}", "fabric": ["leaf-x", "spine-0"]})
            return type(current.graph).model_validate({"cluster": "c1", "provider": "test", "nodes": nodes})

        try:
            commit(store, build, attempts=50)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=add, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    latest = store.latest()
    assert latest.generation == 9 and len(latest.graph.nodes) == 9
    assert [store.get(g).generation for g in range(1, 10)] == list(range(1, 10))


def test_a_writer_that_died_before_moving_the_pointer_does_not_wedge_the_store(gcs_objects: GcsObjects) -> None:
    store = GcsGraphStore(gcs_objects, "p", "c1")
    store.write_if_changed(graph("c1", 2), expected_generation=None)
    orphan = graph("c1", 3)  # generation 2 object written, pointer never moved
    from topocast.model.graph import dump_graph

    meta = {"generation": "2", "sha256": orphan.content_hash()}
    gcs_objects.put(store.generation_key(2), dump_graph(orphan).encode(), metadata=meta, if_generation_match=0)
    with pytest.raises(StaleGenerationError, match="another writer stored generation 2"):
        store.write_if_changed(graph("c1", 4), expected_generation=1)
    assert store.latest().generation == 2 and store.latest().graph == orphan  # rolled forward
    assert store.write_if_changed(graph("c1", 4), expected_generation=2).generation == 3


def test_artifacts_latest_never_goes_back_and_publish_state_round_trips(
    gcs_objects: GcsObjects, monkeypatch: pytest.MonkeyPatch
) -> None:
    arts = GcsArtifactStore(gcs_objects, "p", "c1")
    entry = ManifestEntry("slurm-tree", "topology-tree.conf", "ab" * 32, 4)
    arts.put_artifact(5, "topology-tree.conf", b"SwitchName=s\n", "text/plain")
    assert arts.put_manifest(Manifest(5, "g5", (entry,)))
    assert not arts.put_manifest(Manifest(4, "g4", (entry,)))  # older: stored, but latest stays at 5
    assert arts.latest_manifest().generation == 5 and arts.get_manifest(4).graph_sha256 == "g4"
    assert arts.get_artifact(5, "topology-tree.conf") == b"SwitchName=s\n"

    state = GcsPublishState(gcs_objects, "p", "c1")
    assert state.load_published() is None and state.load_hold() is None
    state.save_published(PublishedRecord(5, "g5", ["a", "b"]))
    state.save_hold(HoldRecord(6, ["b"], 5, "held"))
    assert state.load_published().nodes == ["a", "b"] and state.load_hold().lost == ["b"]
    state.clear_hold()
    assert state.load_hold() is None
    monkeypatch.delenv("TOPOCAST_GUARD_ALLOW_GENERATION", raising=False)
    assert state.read_override() is None
    gcs_objects.put(state.override_key, b"6\n")
    assert state.read_override() == "6"
    monkeypatch.setenv("TOPOCAST_GUARD_ALLOW_GENERATION", "7")
    assert state.read_override() == "7"  # the environment first, as on AWS


class _Receiver:
    """An HTTP endpoint recording what Cloud Tasks delivers (stands in for the render function)."""

    def __init__(self) -> None:
        self.seen: list[tuple[dict[str, str], bytes, float]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                outer.seen.append(({k.lower(): v for k, v in self.headers.items()}, body, time.time()))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                return

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_port}/"


def test_debounce_on_gcs_and_cloud_tasks(gcs_objects: GcsObjects, fake_tasks: Any, tasks_client: Any) -> None:
    from gcp_fixtures import QUEUE

    receiver = _Receiver()
    queue = TaskQueue(QUEUE, tasks_client, service_account="render@p.iam.gserviceaccount.com")
    deb = gcp_debouncer(gcs_objects, "p", queue, receiver.url, DebouncePolicy(quiet=0.5, max_wait=5.0))
    armed_at = time.time()
    first = deb.note_change("c1", 1)
    assert first.action == "wait" and first.reason == "timer armed"
    for g in (2, 3, 4):  # more changes: recorded, no second timer
        assert deb.note_change("c1", g).reason == "timer already waiting"
    assert deb.note_change("c1", 3).action == "drop"  # already noted
    assert fake_tasks.wait_idle(10)
    assert fake_tasks.counts["created"] == 1 and len(receiver.seen) == 1
    headers, body, at = receiver.seen[0]
    assert at - armed_at >= 0.5  # delivered after the quiet window, as a binary-mode CloudEvent
    assert headers["ce-type"] == "dev.topocast.debounce.timer.v1" and headers["ce-specversion"] == "1.0"
    assert headers["authorization"].endswith("render@p.iam.gserviceaccount.com")
    timer = json.loads(body)
    time.sleep(max(0.0, deb.state("c1").last_change_at + 0.5 - time.time()))  # quiet since the last change
    decision = deb.on_timer(Timer.parse(timer))
    assert decision.action == "render" and decision.generation == 4 and decision.cluster == "c1"
    assert (
        deb.on_timer(Timer.parse(timer)).action == "retry"
    )  # a redelivered copy while rendering: retried after the lease
    assert deb.mark_rendered("c1", decision, 4).action == "idle"
    # the state object is written with preconditions: a stale token loses
    states = deb.states
    state, token = states.load("c1")
    assert states.save("c1", state, token) is not None
    assert states.save("c1", state, token) is None


def test_task_names_deduplicate(fake_tasks: Any, tasks_client: Any) -> None:
    from gcp_fixtures import QUEUE

    queue = TaskQueue(QUEUE, tasks_client)
    url = "http://127.0.0.1:9/never"
    assert queue.send_event(url, "t", {}, name="same", delay=60) == "created"
    assert queue.send_event(url, "t", {}, name="same", delay=60) == "exists"
    with pytest.raises(gexc.BadRequest, match="Invalid task name"):
        TaskQueue(QUEUE, tasks_client).send_event(url, "t", {}, name="bad.name")
    with pytest.raises(gexc.NotFound):
        TaskQueue(QUEUE + "x", tasks_client).send_event(url, "t", {})


def _manifest(generation: int, content: bytes, fmt: str = "slurm-tree") -> tuple[Manifest, dict[str, bytes]]:
    import hashlib

    entry = ManifestEntry(fmt, "topology-tree.conf", hashlib.sha256(content).hexdigest(), 2)
    return Manifest(generation, f"g{generation}", (entry,)), {"topology-tree.conf": content}


def test_slurm_publisher_never_regresses_and_pull_installs_it(
    gcs_objects: GcsObjects, gcs_client: Any, tmp_path: Path
) -> None:
    pub = GcsSlurmPublisher(gcs_objects, "topocast/c1/slurm")
    v2 = b"SwitchName=s1 Nodes=n[1-2]\n"
    result = pub.publish(*_manifest(2, v2))
    assert result.published and result.written == [
        f"gs://{gcs_objects.bucket_name}/topocast/c1/slurm/topology-tree.conf"
    ]
    assert pub.publish(*_manifest(2, v2)).skipped  # same generation and bytes: no write
    older = pub.publish(*_manifest(1, b"SwitchName=old Nodes=n1\n"))
    assert not older.published and "holds generation 2" in older.detail
    source = f"gcs://{gcs_objects.bucket_name}/topocast/c1/slurm/topology-tree.conf"
    got = fetch(source, gcs=gcs_client)
    assert (got.content, got.generation) == (v2, 2)
    outcome = pull(source, tmp_path / "topology.conf", reconfigure=False, validate=False, slurm_conf=None,
                   state_file=tmp_path / "state.json", gcs=gcs_client)  # fmt: skip
    assert outcome.ok and (tmp_path / "topology.conf").read_bytes() == v2
    # a tampered object is refused before anything is written
    info = gcs_objects.head("topocast/c1/slurm/topology-tree.conf")
    gcs_objects.put("topocast/c1/slurm/topology-tree.conf", b"SwitchName=evil Nodes=n1\n", metadata=info.metadata)
    out = pull(source, tmp_path / "topology.conf", reconfigure=False, validate=False, slurm_conf=None, gcs=gcs_client)
    assert out.action == "refused" and "does not match its metadata" in out.detail
    assert (tmp_path / "topology.conf").read_bytes() == v2
    with pytest.raises(ValueError, match="not Slurm formats"):
        GcsSlurmPublisher(gcs_objects, "x", formats=("slurm-tree", "k8s-labels"))


def test_an_unreadable_generation_is_healed_by_a_fresh_scan(gcs_objects: GcsObjects) -> None:
    store = GcsGraphStore(gcs_objects, "p", "c1")
    good = graph("c1", 3)
    store.write_if_changed(good, expected_generation=None)
    gcs_objects.put(store.generation_key(1), b"garbage")
    assert store.replace_unreadable(good).generation == 1  # same content: restored in place
    assert store.latest().graph == good
    gcs_objects.put(store.generation_key(1), b"garbage")
    bigger = graph("c1", 5)
    assert store.replace_unreadable(bigger).generation == 2  # different content: the next generation
    assert store.latest().graph == bigger
