"""topocast score / capacity / metrics as a user runs them: the report, and one-line errors for bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_runner import invoke
from test_placement_score import hand_graph

from topocast.model.graph import dump_graph


@pytest.fixture
def graph_file(tmp_path: Path) -> Path:
    path = tmp_path / "g.json"
    path.write_text(dump_graph(hand_graph()))
    return path


def test_score_text_report(graph_file: Path) -> None:
    r = invoke(["score", "--graph", graph_file, "--nodes", "a[1-2],b1"])
    assert r.exit_code == 0, r.stderr
    assert "tier-0               2       1  leaf-1, leaf-2" in r.stdout
    assert "highest tier crossed: tier-1 (best possible: tier-0)" in r.stdout
    assert "score: 0.917" in r.stdout


def test_score_from_a_pending_slurm_job_is_one_line(graph_file: Path, tmp_path: Path) -> None:
    job = tmp_path / "job.txt"
    job.write_text("JobId=5 JobName=x\n   JobState=PENDING Reason=Resources\n   NodeList=(null)\n")
    r = invoke(["score", "--graph", graph_file, "--slurm-job", job])
    assert r.exit_code == 2
    assert r.stderr == f"topocast: error: --slurm-job {job}: job 5 has no nodes (JobState=PENDING)\n"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--nodes", "a1", "--pods", "p.json"], "give the job once"),
        (["--nodes", "gpu-[3-1]"], "gpu-[3-1]"),
        (["--nodes", "x[1-3]"], "none of the job's 3 node(s) is in the graph"),
    ],
)
def test_score_bad_input(graph_file: Path, args: list[str], message: str) -> None:
    r = invoke(["score", "--graph", graph_file, *args])
    assert r.exit_code == 2 and r.stderr.startswith("topocast: error: ") and message in r.stderr
    assert r.stderr.count("\n") == 1


def test_capacity_and_metrics(graph_file: Path, tmp_path: Path) -> None:
    states = tmp_path / "nodes.txt"
    states.write_text("\n".join(f"NodeName={n} State={'ALLOCATED' if n == 'a1' else 'IDLE'}" for n in
                                ["a1", "a2", "a3", "a4", "b1", "b2", "b3", "b4", "c1", "c2"]) + "\n")  # fmt: skip
    r = invoke(["capacity", "--graph", graph_file, "--slurm-nodes", states, "--json"])
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["totals"] == {"free": 9, "allocated": 1, "drained": 0, "unknown": 0}
    # nvl-1 (6 nodes, a1 busy) has 5 free; leaf-2 is the only whole free leaf (4)
    assert doc["largest_free"]["nvlink-domain"] == 5 and doc["largest_free"]["leaf"] == 4
    # tree: leaf-1 (4), spine-1 (8), core-1 (10) hold the busy a1
    assert doc["tree_fragmentation"] == 22
    prom = tmp_path / "topocast.prom"
    r = invoke(["metrics", "--graph", graph_file, "--slurm-nodes", states, "--out", prom])
    assert r.exit_code == 0, r.stderr
    assert 'topocast_nodes{cluster="c1",state="allocated"} 1\n' in prom.read_text()


def test_capacity_html_writes_the_view_with_the_states(graph_file: Path, tmp_path: Path) -> None:
    states = tmp_path / "nodes.txt"
    states.write_text("NodeName=a1 State=ALLOCATED\nNodeName=b3 State=IDLE+DRAIN\nNodeName=c1 State=IDLE\n")
    page = tmp_path / "view.html"
    r = invoke(["capacity", "--graph", graph_file, "--slurm-nodes", states, "--html", page])
    assert r.exit_code == 0, r.stderr
    text = page.read_text()
    assert (
        '<script type="application/json" id="occupancy">{"a1":"allocated","b3":"drained","c1":"free"}</script>' in text
    )
    assert text.index('id="occupancy"') < text.index('id="topology"')
