"""GCP repair reporting (``topocast health report-faulty``): dry run by default, rate-limited, one audit line
per call; ``reportFaulty`` reaches the local Compute endpoint through google-cloud-compute's own client."""

from __future__ import annotations

import json
from pathlib import Path

from cli_runner import invoke
from gce_fake_server import FakeCompute, compute_for
from test_health_gcp import ZONE, cluster, config

from topocast.model.graph import dump_graph
from topocast.providers.gcp.provider import discover_full
from topocast.providers.gcp.sdk import sub_blocks_client


def degraded_graph(fake: FakeCompute, tmp_path: Path, *subs: str) -> Path:
    cluster(fake)
    for sub in subs:
        fake.set_sub_block_health(ZONE, "res-1", "blk-1", sub, "DEGRADED", degraded_hosts=1, degraded_infra=1)
    graph = discover_full(compute_for(fake), config(), sub_blocks=sub_blocks_client(fake.url)).graph
    path = tmp_path / "g.json"
    path.write_text(dump_graph(graph))
    return path


def report(fake: FakeCompute, tmp_path: Path, graph: Path, *more: str):  # type: ignore[no-untyped-def]
    args = ["health", "report-faulty", graph, "--project", "demo-project", "--state-file", tmp_path / "repair.json",
            "--audit-log", tmp_path / "audit.jsonl", "--compute-endpoint", fake.url, *more]  # fmt: skip
    return invoke(args)


def test_a_dry_run_calls_nothing_and_says_what_it_would_report(fake_compute: FakeCompute, tmp_path: Path) -> None:
    graph = degraded_graph(fake_compute, tmp_path, "sb-1")
    result = report(fake_compute, tmp_path, graph)
    assert result.exit_code == 0, result.output
    [line] = [json.loads(x) for x in result.stdout.splitlines()]
    assert line["dry_run"] is True and line["failure_component"] == "NVLINK_SWITCH"
    assert (
        line["sub_block"] == "zones/us-central1-a/reservations/res-1/reservationBlocks/blk-1/reservationSubBlocks/sb-1"
    )
    assert fake_compute.faulty_reports == [] and not (tmp_path / "repair.json").exists()


def test_send_reports_once_then_the_cooldown_holds_it(fake_compute: FakeCompute, tmp_path: Path) -> None:
    graph = degraded_graph(fake_compute, tmp_path, "sb-1")
    first = report(fake_compute, tmp_path, graph, "--send")
    assert first.exit_code == 0, first.output
    [(zone, reservation, block, sub, body)] = fake_compute.faulty_reports
    assert (zone, reservation, block, sub) == (ZONE, "res-1", "blk-1", "sb-1")
    assert body["failureComponent"] == "NVLINK_SWITCH" and body["disruptionSchedule"] == "IMMEDIATE"
    assert json.loads(first.stdout)["operation"] == "operation-report-faulty-1"

    again = report(fake_compute, tmp_path, graph, "--send")
    assert again.exit_code == 3
    assert "cooldown" in json.loads(again.stdout)["held"]
    assert len(fake_compute.faulty_reports) == 1
    audit = (tmp_path / "audit.jsonl").read_text().splitlines()
    assert len(audit) == 2  # one line per call, held ones included


def test_the_hourly_limit_holds_the_rest(fake_compute: FakeCompute, tmp_path: Path) -> None:
    graph = degraded_graph(fake_compute, tmp_path, "sb-0", "sb-1")
    result = report(fake_compute, tmp_path, graph, "--send", "--max-per-hour", "1")
    assert result.exit_code == 3
    lines = [json.loads(x) for x in result.stdout.splitlines()]
    assert [("held" in x) for x in lines] == [False, True]
    assert lines[1]["held"] == "1 report(s) an hour"
    assert len(fake_compute.faulty_reports) == 1
