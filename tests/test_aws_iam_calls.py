"""The AWS calls the handlers really make stay inside ``topocast.aws.iam.CALLS`` (what the roles grant).

The static wiring test (test_infra_wiring.py) derives the calls from the code;
this one records them while the real handlers run the pipeline on moto
(launch, discover, render, publish, then a reconcile), attributing each call to
the handler that made it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from topocast.aws.iam import CALLS, iam_action, record_calls, unexpected
from topocast_sim import aws_pipeline
from topocast_sim import ec2 as ec2_sim


def test_iam_action_names_follow_s3_authorisation() -> None:
    assert iam_action("s3", "HeadObject") == "s3:GetObject"
    assert iam_action("s3", "ListObjectsV2") == "s3:ListBucket"
    assert iam_action("ec2", "DescribeInstanceTopology") == "ec2:DescribeInstanceTopology"


def test_handlers_call_only_what_their_roles_grant(aws_env: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "true")
    by_stage: dict[str, list[str]] = {"discover": [], "render": [], "publish": []}
    with record_calls() as log:

        def attributed(stage: str, fn: Callable[..., Any]) -> Callable[..., Any]:
            def run(*args: Any, **kwargs: Any) -> Any:
                start = len(log)
                try:
                    return fn(*args, **kwargs)
                finally:
                    by_stage[stage] += log[start:]

            return run

        for stage, name in (("discover", "discover_batch"), ("render", "render_batch"), ("publish", "publish_batch")):
            monkeypatch.setattr(aws_pipeline, name, attributed(stage, getattr(aws_pipeline, name)))
        pl = aws_pipeline.LocalAwsPipeline("c1", quiet=0.5, max_wait=2.0, real_time=False)
        ids = ec2_sim.generate_cluster(pl.ec2, 8, cluster_tag=("topocast:cluster", "c1"))
        pl.emit_state_changes(ids)
        assert pl.run_until_idle(timeout=30)
        pl.request_reconcile()
        assert pl.run_until_idle(timeout=30)
    assert pl.runtime.counters.publishes >= 1, "the run must reach publish for this test to mean anything"
    for stage, calls in by_stage.items():
        assert calls, f"{stage} made no AWS call"
        assert not unexpected(stage, calls), f"{stage} called {sorted(unexpected(stage, calls))}, not in CALLS"
    assert {"ec2:DescribeInstances", "ec2:DescribeInstanceTopology"} <= set(by_stage["discover"]) <= CALLS["discover"]
    assert "ssm:PutParameter" in by_stage["publish"]
