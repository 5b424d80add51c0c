"""topocast score and capacity on what a real Slurm 26.05 prints (Debian sid chroot): a job running on two
nodes, read from ``scontrol show job -d`` and from slurmrestd's ``GET /slurm/v0.0.44/job/{id}``, and the
node states from ``scontrol show nodes`` and slurmrestd ``/nodes``."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from cli_runner import invoke
from slurmrest_fixtures import RestFactory

from topocast.model.graph import TopologyGraph, dump_graph
from topocast.slurm.controller import argv
from topocast.slurm.jobs import parse_job, parse_node_states

pytestmark = [pytest.mark.slurm_current, pytest.mark.slow]

NODES = [f"n{i}" for i in range(1, 9)]
TREE = "SwitchName=spine Switches=leaf[1-2]\nSwitchName=leaf1 Nodes=n[1-4]\nSwitchName=leaf2 Nodes=n[5-8]\n"


def rest_get(url: str, token: str) -> str:
    req = urllib.request.Request(url, headers={"X-SLURM-USER-NAME": "root", "X-SLURM-USER-TOKEN": token})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return resp.read().decode()


def test_a_running_job_read_from_scontrol_and_slurmrestd(rest_cluster_factory: RestFactory, tmp_path: Path) -> None:
    ctl = rest_cluster_factory(NODES, TREE)
    for name in ("n1", "n5"):
        ctl.start_slurmd(name)
    sbatch = argv(ctl.install.command("sbatch"), "-N2", "-w", "n1,n5", "--parsable", "-o", "/dev/null",
                  "--wrap", "sleep 120")  # fmt: skip
    done = subprocess.run(sbatch, env=ctl.env(), capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 0, done.stderr
    job_id = done.stdout.strip().split(";")[0]
    deadline = time.monotonic() + 60
    while "JobState=RUNNING" not in (text := ctl.scontrol("show", "job", "-d", job_id)[1]):
        assert time.monotonic() < deadline, text
        time.sleep(0.5)
    from_text = parse_job(text, "scontrol")
    from_rest = parse_job(rest_get(f"{ctl.url}/slurm/v0.0.44/job/{job_id}", ctl.token), "slurmrestd")
    assert from_text.nodes == from_rest.nodes == ("n1", "n5")
    assert from_text.job == from_rest.job == job_id
    # scontrol prints local time to the second, slurmrestd epoch seconds: the same instant
    assert from_rest.start is not None and from_text.start == from_rest.start

    graph = TopologyGraph.model_validate(
        {"cluster": "c1", "provider": "model",
         "nodes": [{"name": n, "fabric": [f"leaf{1 if i < 5 else 2}", "spine"]} for i, n in enumerate(NODES, 1)]}
    )  # fmt: skip
    (tmp_path / "g.json").write_text(dump_graph(graph))
    (tmp_path / "job.txt").write_text(text)
    r = invoke(["score", "--graph", tmp_path / "g.json", "--slurm-job", tmp_path / "job.txt", "--json"])
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    # n1 (leaf1) and n5 (leaf2): 2 leaves where 1 would do, one spine: (1/2 + 1) / 2
    assert [(lv["spanned"], lv["minimum"]) for lv in doc["levels"]] == [(2, 1), (1, 1)] and doc["score"] == 0.75

    states = parse_node_states(ctl.scontrol("show", "nodes")[1], "scontrol")
    rest_states = parse_node_states(rest_get(f"{ctl.url}/slurm/v0.0.44/nodes", ctl.token), "slurmrestd")
    assert states == rest_states
    # the job's nodes are allocated; the six whose slurmd never registered are out of service
    assert states == {n: "allocated" if n in ("n1", "n5") else "drained" for n in NODES}
