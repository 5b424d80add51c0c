"""The seeded chaos runs (topocast_sim.chaos_aws, chaos_gcp) over both clouds' real handlers and adapters.

Two seeds run here; ``bench/chaos.py`` soaks many. Each run must be right at the idle point ending
every round (events duplicated, reordered, delivered late, EC2 throttling, a write failing or the
process dying in it), converge after one reconcile, never publish an older generation and leave the
dead-letter queue empty.
"""

from __future__ import annotations

import pytest

from topocast_sim.chaos_aws import run


@pytest.fixture
def quiet_metrics(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "true")


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2])
def test_churn_with_faults_is_right_at_every_idle_point(aws_env: str, quiet_metrics: None, seed: int) -> None:
    outcome = run(seed, rounds=4)
    assert outcome.ok, outcome.line()
    assert len(outcome.idle_checks) == 4 and any("late" in f for f in outcome.faults), outcome.line()


@pytest.mark.slow
def test_with_dropped_events_one_reconcile_converges(aws_env: str, quiet_metrics: None) -> None:
    outcome = run(11, rounds=3, drops=True, drop=0.15)
    assert outcome.converged and not outcome.problems, outcome.line()
    assert any("dropped" in f for f in outcome.faults), outcome.line()  # the run did lose events


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2])
def test_gcp_churn_with_faults_is_right_at_every_idle_point(quiet_metrics: None, seed: int) -> None:
    from topocast_sim.chaos_gcp import run as run_gcp

    outcome = run_gcp(seed, rounds=3)
    assert outcome.ok, outcome.line()
    assert len(outcome.idle_checks) == 3, outcome.line()


@pytest.mark.slow
def test_gcp_with_dropped_events_one_reconcile_converges(quiet_metrics: None) -> None:
    from topocast_sim.chaos_gcp import run as run_gcp

    outcome = run_gcp(11, rounds=3, drops=True, drop=0.15)
    assert outcome.converged and not outcome.problems, outcome.line()
    assert any("dropped" in f for f in outcome.faults), outcome.line()
