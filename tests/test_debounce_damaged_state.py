"""A debounce state record that cannot be read is reset, on both clouds alike, and the pending render still happens.

The policy (:meth:`topocast.pipeline.debounce_runner.DebounceRunner._reset`): the damaged record is replaced
by a state with an unrendered change and a timer due now, a warning is logged and ``debounce_state_resets``
counted, so the latest generation renders whatever the record said. The pure transition first, then each
cloud's real adapters (:mod:`scenario_clouds`: DynamoDB + SQS on moto, Cloud Storage + Cloud Tasks locally)
with the record damaged while a generation waits for its render.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

import pytest
from scenario_clouds import AwsCloud, GcpCloud, graph_nodes

from topocast.pipeline.debounce import on_damaged, on_rendered, on_timer
from topocast.ports.debounce import DebouncePolicy

Cloud = AwsCloud | GcpCloud


def test_a_reset_arms_a_render_at_once_and_any_render_covers_it() -> None:
    step = on_damaged(100.0, new_timer_id="t1", policy=DebouncePolicy(quiet=15.0))
    assert (step.arm, step.state.phase, step.state.timer_id) == (0.0, "waiting", "t1")
    claimed = on_timer(step.state, "t1", 100.0, new_timer_id="x", policy=DebouncePolicy(quiet=15.0, max_wait=120.0))
    assert claimed.decision.render
    done = on_rendered(
        claimed.state, "t1", 7, 101.0, new_timer_id="x", policy=DebouncePolicy()
    )  # whatever generation is the latest
    assert (done.decision.action, done.state.phase) == ("idle", "idle")


@pytest.fixture(params=["aws", "gcp"])
def cloud(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[Cloud]:
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "true")
    if request.param == "aws":
        request.getfixturevalue("aws_env")
        c: Cloud = AwsCloud(quiet=2.0, max_wait=30.0, real_time=False)
    else:
        c = GcpCloud(quiet=2.0, max_wait=30.0, pool=8, real_time=False)
    yield c.start()
    c.stop()


def _discovered(c: Any, timeout: float = 30.0) -> int:
    """The generation discover wrote (its render is still waiting for the quiet window)."""
    deadline = time.monotonic() + timeout
    while True:
        stored = c.runtime.graphs.latest()
        if stored is not None:
            return int(stored.generation)
        assert time.monotonic() < deadline, "discover wrote no generation"
        if c.name == "aws":
            c.pl.pump_discover()  # discover only: the timer stays in its queue
        time.sleep(0.05)


def test_a_damaged_state_is_reset_counted_and_the_pending_generation_still_renders(
    cloud: Any, caplog: pytest.LogCaptureFixture
) -> None:
    c = cloud
    caplog.set_level(logging.WARNING, logger="topocast")
    c.announce(c.launch(4))
    generation = _discovered(c)
    assert c.counts().renders == 0, "the render must still be pending when the state is damaged"
    c.damage_debounce_state()
    assert c.idle(60)
    published = c.published()
    assert {
        "resets": c.counts().debounce_state_resets >= 1,
        "renders": c.counts().renders >= 1,
        "published": published is not None and published.content.decode().count("gpu-") >= 1,
        "rendered generation": c.runtime.artifacts.latest_manifest().generation,
        "nodes": len(graph_nodes(c)),
    } == {"resets": True, "renders": True, "published": True, "rendered generation": generation, "nodes": 4}
    assert any("debounce state of c1 is damaged, reset" in r.getMessage() for r in caplog.records)
