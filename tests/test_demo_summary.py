"""The demo's summary names every file the demo wrote (topology-block.conf was left out)."""

from __future__ import annotations

from pathlib import Path

from topocast_sim.demo import summary, write_report


def test_summary_lists_every_output_including_the_block_file(tmp_path: Path) -> None:
    for name in ("topology.conf", "labels.json", "topology.html", "topology-block.conf"):
        (tmp_path / name).write_text("x\n")
    result = {
        "cloud": "aws", "events": 10, "discover_runs": 1, "ec2_api_calls": 2, "renders": 1, "publishes": 1,
        "nodes": 4, "nodes_without_topology": 0, "generation": 1,
        "pull": {"action": "installed", "validated_by_slurmctld": False},
    }  # fmt: skip
    write_report(result, tmp_path, None, started=0.0)
    last = summary(result, tmp_path).splitlines()[-1]
    assert last == (
        f"wrote {tmp_path}/: labels.json, report.json, topology-block.conf, topology.conf, topology.html (aws)"
    )
