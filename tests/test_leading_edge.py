"""Leading-edge render: the first change after a quiet window renders at once, a burst still ends in two.

The pure rules first (:func:`topocast.pipeline.debounce.on_change` with ``leading_edge``), then both
clouds' real adapters (:mod:`scenario_clouds`: the Lambda handlers on moto, the functions under
functions-framework) with ``TOPOCAST_DEBOUNCE_LEADING_EDGE=true``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from scenario_clouds import AwsCloud, GcpCloud, graph_nodes

from topocast.config import settings_from_env
from topocast.pipeline.debounce import DebounceState, on_change, on_rendered, on_timer
from topocast.ports.debounce import DebouncePolicy

Q, MAX = 15.0, 120.0
POLICY = DebouncePolicy(quiet=Q, max_wait=MAX)
LEADING = DebouncePolicy(quiet=Q, max_wait=MAX, leading_edge=True)


def test_a_change_after_a_quiet_window_is_due_at_once_and_the_rest_of_the_burst_waits_for_quiet() -> None:
    step = on_change(DebounceState(), 1, 100.0, new_timer_id="t1", policy=LEADING)
    assert (step.arm, step.decision.reason) == (0.0, "timer armed (leading edge)")
    claimed = on_timer(step.state, "t1", 100.0, new_timer_id="x", policy=POLICY)
    assert (claimed.decision.action, claimed.decision.generation) == ("render", 1)
    # the burst goes on while the first render runs: noted, no new timer
    s = claimed.state
    for gen, now in ((2, 100.5), (3, 101.0)):
        s = on_change(s, gen, now, new_timer_id="unused", policy=LEADING).state
    done = on_rendered(s, "t1", 1, 102.0, new_timer_id="t2", policy=POLICY)
    assert done.arm == pytest.approx(101.0 + Q - 102.0)  # the trailing render waits for quiet after the last change
    second = on_timer(done.state, "t2", 116.0, new_timer_id="x", policy=POLICY)
    assert (second.decision.action, second.decision.generation) == ("render", 3)
    idle = on_rendered(second.state, "t2", 3, 117.0, new_timer_id="x", policy=POLICY).state
    # a change 5 s after the burst's last one is part of it: it waits for quiet, no leading edge
    near = on_change(idle, 4, 106.0 + Q - 10, new_timer_id="t3", policy=LEADING)
    assert near.arm == pytest.approx(Q)
    # a change a quiet window after the last one renders at once again
    far = on_change(idle, 4, 101.0 + Q, new_timer_id="t4", policy=LEADING)
    assert far.arm == 0.0


def test_without_the_option_the_first_change_waits_out_the_quiet_window() -> None:
    assert on_change(DebounceState(), 1, 100.0, new_timer_id="t1", policy=POLICY).arm == pytest.approx(Q)


def test_the_option_is_a_setting_off_by_default() -> None:
    env = {"TOPOCAST_CLUSTER": "c1"}
    assert settings_from_env(env).debounce_leading_edge is False
    assert settings_from_env({**env, "TOPOCAST_DEBOUNCE_LEADING_EDGE": "true"}).debounce_leading_edge is True


# ----- both clouds' real adapters ----------------------------------------------------------------------------
Cloud = AwsCloud | GcpCloud
QUIET = 4.0


@pytest.fixture(params=["aws", "gcp"])
def cloud(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[Cloud]:
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "true")
    env = {"TOPOCAST_DEBOUNCE_LEADING_EDGE": "true"}
    if request.param == "aws":
        request.getfixturevalue("aws_env")
        c: Cloud = AwsCloud(quiet=QUIET, max_wait=30.0, env=env)
    else:
        c = GcpCloud(quiet=QUIET, max_wait=30.0, pool=60, env=env)
    yield c.start()
    c.stop()


def _until(c: Cloud, done: Callable[[], bool], timeout: float = 30.0) -> float:
    """Seconds until ``done()`` holds, pumping the pipeline (AWS) or letting it run (GCP)."""
    start = time.monotonic()
    while not done():
        assert time.monotonic() - start < timeout, "the pipeline did not get there in time"
        c.pump()
        time.sleep(0.05)
    return time.monotonic() - start


@pytest.mark.slow
def test_a_lone_event_publishes_before_the_quiet_window_and_a_burst_ends_in_two_renders(cloud: Any) -> None:
    c = cloud
    c.announce(c.launch(4))  # the first run (cold: imports, a full discovery) is not what is timed
    assert c.idle(60)
    time.sleep(QUIET + 0.3)
    c.announce(c.launch(4))  # one event after a quiet window
    took = _until(c, lambda: c.counts().publishes >= 2)
    assert took < QUIET, f"the first change after idle took {took:.1f}s to publish (quiet window {QUIET:g}s)"
    assert c.idle(60)
    before = (c.counts().renders, c.counts().publishes)
    time.sleep(QUIET + 0.5)  # idle again
    for _ in range(5):  # a burst: five waves, each a new generation, closer together than the quiet window
        c.announce(c.launch(4))
        time.sleep(0.4)
    assert c.idle(60)
    renders, publishes = c.counts().renders - before[0], c.counts().publishes - before[1]
    assert {"renders 1-2": 1 <= renders <= 2, "publishes 1-2": 1 <= publishes <= 2, "nodes": len(graph_nodes(c))} == {
        "renders 1-2": True, "publishes 1-2": True, "nodes": 28,
    }, (renders, publishes)  # fmt: skip
    got = c.published()
    assert got is not None and got.content.decode().count("gpu-") >= 1
