"""Interruption and Auto Scaling events end to end on a moto server: EventBridge (the module's patterns,
from the event table) -> SQS -> the real discover handler -> the stored graph."""

from __future__ import annotations

import pytest
from aws_fixtures import set_ec2_state

from topocast_sim import ec2 as ec2_sim
from topocast_sim import simclock
from topocast_sim.aws_pipeline import LocalAwsPipeline

CLUSTER = "c1"
TAG = ("topocast:cluster", CLUSTER)


@pytest.fixture
def pipeline(aws_env: str, monkeypatch: pytest.MonkeyPatch) -> LocalAwsPipeline:
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "true")
    return LocalAwsPipeline(CLUSTER, quiet=0.5, max_wait=2.0, guard_max_loss=0.5, real_time=False)


def graph(pl: LocalAwsPipeline) -> tuple[int, list[str]]:
    stored = pl.runtime.graphs.latest()
    assert stored is not None
    return stored.generation, stored.graph.node_names()


def test_spot_warning_changes_nothing_and_the_termination_that_follows_removes_the_node(
    pipeline: LocalAwsPipeline,
) -> None:
    pl = pipeline
    ids = ec2_sim.generate_cluster(pl.ec2, 4, cluster_tag=TAG, name_prefix="gpu-")
    pl.emit_state_changes(ids)
    assert pl.run_until_idle(timeout=30)
    generation, names = graph(pl)
    assert names == ["gpu-000", "gpu-001", "gpu-002", "gpu-003"]

    arn = f"arn:aws:ec2:us-east-1:123456789012:instance/{ids[0]}"
    pl.emit_event("aws.ec2", "EC2 Instance Rebalance Recommendation", {"instance-id": ids[0]}, [arn])
    pl.emit_event(
        "aws.ec2",
        "EC2 Spot Instance Interruption Warning",
        {"instance-id": ids[0], "instance-action": "terminate"},
        [arn],
    )
    assert pl.run_until_idle(timeout=30)
    assert graph(pl) == (generation, names)  # noted: no discovery, no new generation
    assert pl.dlq_messages() == []  # and nothing dead-lettered

    pl.ec2.terminate_instances(InstanceIds=[ids[0]])
    pl.emit_state_changes([ids[0]], state="terminated")
    assert pl.run_until_idle(timeout=30)
    later, names = graph(pl)
    assert later > generation and names == ["gpu-001", "gpu-002", "gpu-003"]


def test_a_warm_pool_launch_adds_nothing_and_a_launch_out_of_the_pool_adds_the_node(
    pipeline: LocalAwsPipeline,
) -> None:
    pl = pipeline
    ids = ec2_sim.generate_cluster(pl.ec2, 2, cluster_tag=TAG, name_prefix="gpu-")
    pl.emit_state_changes(ids)
    assert pl.run_until_idle(timeout=30)
    generation, names = graph(pl)

    warm = ec2_sim.generate_cluster(pl.ec2, 1, cluster_tag=TAG, name_prefix="warm-")
    detail = {
        "StatusCode": "InProgress",
        "AutoScalingGroupName": "c1-p5",
        "EC2InstanceId": warm[0],
        "Origin": "EC2",
        "Destination": "WarmPool",
    }
    pl.emit_event("aws.autoscaling", "EC2 Instance Launch Successful", detail)
    assert pl.run_until_idle(timeout=30)
    assert graph(pl) == (generation, names)
    assert pl.dlq_messages() == []

    pl.emit_event(
        "aws.autoscaling",
        "EC2 Instance Launch Successful",
        {**detail, "Origin": "WarmPool", "Destination": "AutoScalingGroup"},
    )
    assert pl.run_until_idle(timeout=30)
    assert graph(pl)[1] == [*names, "warm-000"]


def test_an_event_no_rule_delivers_never_reaches_discover(pipeline: LocalAwsPipeline) -> None:
    """The launch lifecycle action is not in the module's patterns: EventBridge drops it before SQS."""
    pl = pipeline
    ids = ec2_sim.generate_cluster(pl.ec2, 1, cluster_tag=TAG, name_prefix="gpu-")
    pl.emit_event("aws.autoscaling", "EC2 Instance-launch Lifecycle Action", {"EC2InstanceId": ids[0]})
    assert pl.run_until_idle(timeout=10)
    # (discover only saw the bucket notification's s3:TestEvent, which it ignores)
    assert pl.runtime.graphs.latest() is None and pl.runtime.counters.discover_runs == 0 and pl.dlq_messages() == []


def test_a_recheck_is_a_delayed_message_on_the_events_queue_and_follows_the_instance_until_out(
    aws_env: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No AWS event kind follows today; the re-check loop itself (SQS DelaySeconds -> discover -> SQS) is
    the same one a followed change starts."""
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "true")
    pl = LocalAwsPipeline(CLUSTER, quiet=0.5, max_wait=2.0, guard_max_loss=0.5,
                          extra_settings={"follow_interval": 1.0, "follow_rechecks": 3}, real_time=False)  # fmt: skip
    ids = ec2_sim.generate_cluster(pl.ec2, 2, cluster_tag=TAG, name_prefix="gpu-")
    pl.emit_state_changes(ids)
    assert pl.run_until_idle(timeout=30)
    set_ec2_state(ids[0], "stopping", 64)
    assert pl.runtime.rechecks is not None
    pl.runtime.rechecks.schedule([(ids[0], "test")], 1, 1.0, "t1")
    assert pl.pump_discover() == 0  # delayed: not visible yet
    simclock.advance(1.2)  # the clock moto's SQS reads: the delay runs out without waiting for it
    assert pl.pump_discover() == 1
    assert graph(pl)[1] == ["gpu-000", "gpu-001"]  # stopping: kept at its place
    assert pl.runtime.counters["follow_rechecks"] == 1  # ... and re-checked again later

    set_ec2_state(ids[0], "stopped", 80)
    assert pl.run_until_idle(timeout=30)  # waits for the delayed re-check, which finds it out
    assert graph(pl)[1] == ["gpu-001"] and pl.dlq_messages() == []
