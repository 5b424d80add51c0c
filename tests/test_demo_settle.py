"""The demo says plainly when the pipeline did not settle, instead of a ParameterNotFound from the pull."""

from __future__ import annotations

from types import SimpleNamespace

from topocast_sim.demo import not_settled, settle_timeout


class StuckPipeline:
    def __init__(self, publishes: int = 0) -> None:
        self.runtime = SimpleNamespace(counters=SimpleNamespace(discover_runs=3, renders=0, publishes=publishes))

    def pending_by_queue(self) -> dict[str, dict[str, int]]:
        return {
            "events": {"visible": 120, "in_flight": 30, "delayed": 0},
            "timer": {"visible": 0, "in_flight": 0, "delayed": 1},
            "publish": {"visible": 0, "in_flight": 0, "delayed": 0},
        }


def test_not_settled_names_what_is_pending_and_for_how_long() -> None:
    assert not_settled(StuckPipeline(), 80.4, idle=False) == (
        "the pipeline did not settle within 80 s: events queue 120 visible, 30 in flight, 0 delayed; "
        "timer queue 0 visible, 0 in flight, 1 delayed (3 discover run(s), 0 render(s), 0 publish(es))"
    )


def test_settled_without_a_publish_is_said_too() -> None:
    assert not_settled(StuckPipeline(), 12, idle=True).startswith(
        "the pipeline settled after 12 s but published nothing"
    )


def test_the_wait_grows_with_the_storm() -> None:
    assert settle_timeout(256, 20.0) == 80.0
    assert settle_timeout(10_000, 20.0) == 250.0
