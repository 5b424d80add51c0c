"""The GCP pipeline end to end: the same storm and fault scenarios as the AWS pipeline tests.

Fakes for the services (Compute REST endpoint, gcp-storage-emulator behind the
precondition proxy, Cloud Tasks that deliver over HTTP) and the real functions
loaded by functions-framework from ``functions/*/main.py``
(:class:`topocast.sim.gcp_pipeline.LocalGcpPipeline`). Windows are short and the
sleeps real.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from topocast.gcp import handlers
from topocast.pull import fetch
from topocast.sim.gce import generate_cluster
from topocast.sim.gcp_pipeline import LocalGcpPipeline

LABEL = ("topocast-cluster", "c1")


def cluster(n: int, **kw: Any) -> Any:
    return generate_cluster(n, label=LABEL, hosts_per_subblock=8, subblocks_per_block=4, **kw)


@pytest.fixture(autouse=True)
def _fresh_stats() -> None:
    handlers.STATS.clear()


def published(pl: LocalGcpPipeline) -> Any:
    from topocast.gcp.clients import storage_client

    source = f"gcs://{pl.bucket}/topocast/c1/slurm/topology.conf"
    return fetch(source, gcs=storage_client("t", pl.gcs.url))


def names(pl: LocalGcpPipeline) -> list[str]:
    stored = pl.runtime().graphs.latest()
    return stored.graph.node_names() if stored else []


def test_insert_storm_becomes_one_render_and_one_publish() -> None:
    """1,000 MIG-driven insert events (last entries), arriving concurrently: one render, one publish."""
    gen = cluster(1000)
    with LocalGcpPipeline(gen, name="c1", quiet=2.0, max_wait=60.0, window=2.0) as pl:
        pl.emit(pl.insert_events(gen.instances)[1::2], concurrency=8)  # the completing entries
        assert pl.statuses == {200: 1000}
        assert pl.run_until_idle(timeout=60)
        assert len(names(pl)) == 1000
        assert (handlers.STATS["renders"], handlers.STATS["publishes"]) == (1, 1)
        assert published(pl).generation == pl.runtime().graphs.latest().generation
        # batched: a few full scans (2 pages of 500 each) instead of 1,000 instances.get
        assert pl.compute.calls.get("get", 0) <= 100 and handlers.STATS["discover_runs"] <= 10


def test_churn_still_publishes_at_least_every_max_wait() -> None:
    gen = cluster(60)
    with LocalGcpPipeline(gen, name="c1", quiet=1.0, max_wait=4.0, window=0.3) as pl:
        events = pl.insert_events(gen.instances)[1::2]
        start = time.monotonic()
        render_times: list[float] = []
        i = 0
        while time.monotonic() - start < 12 and i < len(events):
            before = handlers.STATS["renders"]
            pl.emit(events[i : i + 2])  # a change every 0.5 s never goes quiet for 1 s
            i += 2
            time.sleep(0.5)
            if handlers.STATS["renders"] > before:
                render_times.append(time.monotonic() - start)
        assert len(render_times) >= 2, render_times
        gaps = [b - a for a, b in zip([0.0, *render_times], render_times, strict=False)]
        assert max(gaps) <= 4.0 + 2.5, gaps  # max wait, plus a window and the render itself


def test_throttled_compute_still_yields_the_right_graph() -> None:
    gen = cluster(250)
    with LocalGcpPipeline(gen, name="c1", quiet=1.0, window=0.5, full_scan_threshold=1000) as pl:
        pl.compute.inject_faults(1 / 3, status=429)
        pl.emit(pl.insert_events(gen.instances)[1::2])
        assert pl.run_until_idle(timeout=60)
        assert sum(pl.compute.injected.values()) > 50  # incremental gets: a third of ~250 were throttled
        assert len(names(pl)) == 250
        assert "Nodes=gpu-[000-007]" in published(pl).content.decode()


def test_failing_gcs_writes_are_retried_and_no_event_is_lost() -> None:
    gen = cluster(30)
    with LocalGcpPipeline(gen, name="c1", quiet=1.0, window=0.5) as pl:
        pl.gcs.proxy.fail_uploads = 2  # google-cloud-storage retries 503s; nothing may be lost
        pl.emit(pl.insert_events(gen.instances)[1::2])
        assert pl.run_until_idle(timeout=60)
        assert pl.gcs.proxy.injected == 2
        assert len(names(pl)) == 30 and published(pl).generation >= 1


def test_losing_half_the_nodes_is_held_until_a_reconcile_confirms() -> None:
    gen = cluster(40)
    with LocalGcpPipeline(gen, name="c1", quiet=0.5, window=0.3) as pl:
        pl.reconcile()
        assert pl.run_until_idle(timeout=30)
        first = published(pl)
        assert "gpu-[032-039]" in first.content.decode()
        gone = gen.instances[20:]
        for inst in gone:
            pl.compute.remove("us-central1-a", inst["name"])
        deletes = [e for pair in zip(*[iter(pl.insert_events(gone))] * 2, strict=True) for e in pair[1:]]
        for attrs, data in deletes:  # the completing entries of instances.delete
            data["protoPayload"]["methodName"] = attrs["methodname"] = "v1.compute.instances.delete"
        pl.emit(deletes)
        assert pl.run_until_idle(timeout=30)
        assert handlers.STATS["held"] == 1
        assert published(pl).content == first.content  # the last good config stays
        assert len(names(pl)) == 20  # the graph itself is current; only the publish is held
        pl.reconcile()  # a full scan sees the same loss: confirmed, published
        assert pl.run_until_idle(timeout=30)
        now = published(pl)
        assert now.generation > first.generation and "gpu-[032-039]" not in now.content.decode()


def test_corrupt_graph_stops_render_and_the_last_publish_stays() -> None:
    gen = cluster(20)
    with LocalGcpPipeline(gen, name="c1", quiet=0.5, window=0.3) as pl:
        pl.reconcile()
        assert pl.run_until_idle(timeout=30)
        good = published(pl)
        rt = pl.runtime()
        stored = rt.graphs.latest()
        rt.objects.put(rt.graphs.generation_key(stored.generation), b'{"schema_version": 1, "cluster": "c1", "no')
        rt.debouncer.note_change("c1", stored.generation + 1)  # as if discover wrote again
        assert pl.run_until_idle(timeout=15)
        assert handlers.STATS["renders"] == 1 and handlers.STATS["render_failures"] == 1
        assert published(pl).content == good.content


def test_demo_writes_its_outputs(tmp_path: Path) -> None:
    from topocast.gcp.demo import run_gcp_demo

    out = tmp_path / "demo"
    report = run_gcp_demo(64, 32, out, None, 0.5, window=0.3)
    assert json.loads((out / "report.json").read_text()) == report
    assert report["events"] == 1 + 2 * 32  # the reconcile, then first + last entry per VM
    assert report["nodes"] == 64 and report["nodes_without_topology"] == 2
    assert report["publishes"] >= 1 and report["renders"] >= 1 and report["idle"]
    assert report["compute_api_calls"] == report["api_calls"] >= 2
    assert report["pull"]["ok"]
    conf = (out / "topology.conf").read_text()
    assert "SwitchName=no-topology Nodes=gpu-[062-063]" in conf
    assert len(json.loads((out / "labels.json").read_text())) == 64
    assert "<svg" in (out / "topology.html").read_text()
