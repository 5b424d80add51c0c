"""The GCP pipeline end to end under load: an insert storm, churn, a throttled Compute API.

Fakes for the services (Compute REST endpoint, gcp-storage-emulator behind the
precondition proxy, Cloud Tasks that deliver over HTTP) and the real functions
loaded by functions-framework from ``functions/*/main.py``
(:class:`topocast_sim.gcp_pipeline.LocalGcpPipeline`). The storm runs on the simulated clock (its
quiet window and trailing windows are skipped, not waited out); the slow tier's churn and throttling
runs sleep for real. ``bench/gcp_storm.py`` times a 1,000-VM storm.
"""

from __future__ import annotations

import time

import pytest
from gcp_pipeline_helpers import cluster, fresh_stats, names, published  # noqa: F401  (fresh_stats: autouse)

from topocast.gcp import handlers
from topocast_sim.gcp_pipeline import LocalGcpPipeline


def test_insert_storm_becomes_one_render_and_one_publish() -> None:
    """500 MIG-driven insert events (last entries), arriving concurrently: one render, one publish."""
    gen = cluster(500)
    with LocalGcpPipeline(gen, name="c1", quiet=3.0, max_wait=60.0, window=1.0, real_time=False) as pl:
        started = time.monotonic()
        pl.emit(pl.insert_events(gen.instances)[1::2], concurrency=8)  # the completing entries
        emitting = time.monotonic() - started
        assert pl.statuses == {200: 500}
        assert pl.run_until_idle(timeout=60)
        assert len(names(pl)) == 500
        assert (handlers.STATS["renders"], handlers.STATS["publishes"]) == (1, 1)
        assert published(pl).generation == pl.runtime().graphs.latest().generation
        # batched: at most one discover run per 1 s window while events arrive (plus the trailing ones), not
        # one per event; whether a window re-reads its VMs with instances.get or scans depends on how many
        # events land in it (machine speed), but no VM is ever read twice
        assert handlers.STATS["discover_runs"] <= emitting / 1.0 + 3, (handlers.STATS, emitting)
        assert pl.compute.calls.get("get", 0) <= 500


@pytest.mark.slow  # real-time churn; the rule is checked on the simulated clock (test_debounce, test_aws_pipeline)
def test_churn_still_publishes_at_least_every_max_wait() -> None:
    gen = cluster(60)
    vms, gen.instances = gen.instances, []  # VMs are created while the test runs
    with LocalGcpPipeline(gen, name="c1", quiet=1.0, max_wait=3.0, window=0.3) as pl:
        events = pl.insert_events(vms)[1::2]
        start = time.monotonic()
        render_times: list[float] = []
        i = 0
        while time.monotonic() - start < 9 and i < len(events):
            before = handlers.STATS["renders"]
            pl.compute.add(vms[i // 2 * 2 : i // 2 * 2 + 2])
            pl.emit(events[i : i + 2])  # a change every 0.5 s never goes quiet for 1 s
            i += 2
            time.sleep(0.5)
            if handlers.STATS["renders"] > before:
                render_times.append(time.monotonic() - start)
        assert len(render_times) >= 2, render_times
        gaps = [b - a for a, b in zip([0.0, *render_times], render_times, strict=False)]
        assert max(gaps) <= 3.0 + 2.5, gaps  # max wait, plus a window and the render itself


@pytest.mark.slow  # google-api-core's real backoff; test_gcp_provider retries 429/500/503 on a fast policy
def test_throttled_compute_still_yields_the_right_graph() -> None:
    gen = cluster(250)
    vms, gen.instances = gen.instances, gen.instances[:10]  # a small cluster first, then 240 new VMs
    gets = {"TOPOCAST_GCP_READ": "get"}  # throttled instances.get calls (a listing would need one page)
    with LocalGcpPipeline(gen, name="c1", quiet=1.0, window=0.5, full_scan_threshold=1000, extra_env=gets) as pl:
        pl.reconcile()
        assert pl.run_until_idle(timeout=60)
        pl.compute.add(vms[10:])
        pl.compute.inject_faults(1 / 3, status=429)
        pl.emit(pl.insert_events(vms[10:])[1::2])
        assert pl.run_until_idle(timeout=60)
        assert sum(pl.compute.injected.values()) > 50  # incremental gets: a third of ~240 were throttled
        assert len(names(pl)) == 250
        assert "Nodes=gpu-[000-007]" in published(pl).content.decode()
