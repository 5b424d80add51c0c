"""``topocast publish --dry-run`` without a cluster, an unreachable server, and a long publish's progress."""

from __future__ import annotations

import io
import itertools
import json
from pathlib import Path

import pytest
from cli_runner import invoke

from topocast.cli.publish import Progress, print_plan
from topocast.model.graph import TopologyGraph, dump_graph
from topocast.model.synth import synthetic_data
from topocast.publish.kubernetes import KubernetesPublishReport

TIER0 = "fabric.topograph.run/tier-0"


@pytest.fixture
def no_cluster(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A machine with no kubeconfig at all and no TOPOCAST_K8S_* settings."""
    for name in [n for n in __import__("os").environ if n.startswith(("TOPOCAST_K8S_", "KUBECONFIG"))]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path))
    graph = TopologyGraph.model_validate(synthetic_data(2000, levels=3))
    (tmp_path / "g.json").write_text(dump_graph(graph))
    return tmp_path / "g.json"


def test_a_dry_run_without_a_cluster_is_the_plan_from_the_graph_in_at_most_50_lines(no_cluster: Path) -> None:
    result = invoke(["publish", "--graph", no_cluster, "--dry-run"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert len(lines) <= 50
    assert lines[0].startswith("dry run (no cluster: ") and "nothing was written" in lines[0]
    assert "nodes to label: 2000" in lines[1]
    # 2000 nodes, 18 per leaf: gpu-000000..017 under leaf-00000, gpu-000018 the first of leaf-00001
    assert any(line.startswith("  node/gpu-000018: ") and f"{TIER0}=leaf-00001" in line for line in lines)
    assert "  ... and 1980 more node(s) (--json for all)" in lines
    assert lines[-1].startswith("plan: 2000 node(s) to label, ") and "--json for the whole plan" in lines[-1]


def test_the_json_plan_has_every_node_and_object(no_cluster: Path) -> None:
    result = invoke(["publish", "--graph", no_cluster, "--dry-run", "--json"])
    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout)
    assert len(plan["nodes"]) == 2000 and plan["cluster"] is None
    assert plan["nodes"]["gpu-001999"]["set"][TIER0] == "leaf-00111"  # 1999 // 18
    kinds = {(o["format"], o["object"]["kind"]) for o in plan["objects"]}
    assert kinds == {("kueue", "Topology"), ("kai", "Topology"), ("volcano", "HyperNode"), ("slinky", "ConfigMap")}
    # a HyperNode per switch: 112 leaves, 14 tier-1 switches (8 leaves each), 2 tier-2 switches
    assert sum(1 for o in plan["objects"] if o["format"] == "volcano") == 112 + 14 + 2


def test_a_publish_without_a_cluster_is_still_one_line_exit_2(no_cluster: Path) -> None:
    result = invoke(["publish", "--graph", no_cluster])
    assert result.exit_code == 2
    assert result.stderr.startswith("topocast: error: cannot load Kubernetes kubeconfig configuration")
    assert len(result.stderr.splitlines()) == 1


def test_an_unreachable_server_is_one_line(no_cluster: Path, tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kc"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: x\n"
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:9', insecure-skip-tls-verify: true}}]\n"
        "users: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\n"
    )
    published = invoke(["publish", "--graph", no_cluster, "--kubeconfig", kubeconfig, "-f", "k8s-labels"])
    assert (published.exit_code, published.stdout) == (1, "")
    assert published.stderr == (
        "topocast: error: cannot reach the API server https://127.0.0.1:9 (Connection refused); nothing was "
        "published (run it again when it answers)\n"
    )
    planned = invoke(["publish", "--graph", no_cluster, "--kubeconfig", kubeconfig, "--dry-run", "-f", "k8s-labels"])
    assert planned.exit_code == 0
    assert planned.stderr.splitlines() == [
        "topocast: warning: cannot reach the API server https://127.0.0.1:9 (Connection refused): the plan below "
        "is from the graph alone"
    ]
    assert "nodes to label: 2000" in planned.stdout


def test_a_plan_against_a_cluster_lists_40_nodes_and_counts_the_rest() -> None:
    report = KubernetesPublishReport(dry_run="client", nodes_patched=[f"n{i:03d}" for i in range(100)])
    report.node_changes = {f"n{i:03d}": {"set": {"k": "v"}, "remove": [], "annotate": {}} for i in range(100)}
    out = io.StringIO()
    print_plan(report, out)
    lines = out.getvalue().splitlines()
    assert lines[2] == "  node/n000: k=v" and lines[41] == "  node/n039: k=v"
    assert lines[42] == "  ... and 60 more node(s) (--json for all)"


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_progress_off_a_terminal_is_a_line_per_10_percent_after_5_seconds() -> None:
    err, clock = io.StringIO(), _Clock()
    progress = Progress(err, clock=clock)
    for done in range(1, 1001):
        clock.now = done * 0.03  # 30 s in all: the 10 % steps come every 3 s
        progress(done, 1000)
    lines = err.getvalue().splitlines()
    # nothing in the first 5 s (not the 10 % line at 3 s), then about one line per 10 %, never two within 1 s
    assert lines[0] == "topocast: progress: 167/1000 node(s) labelled, 5 s"
    done = [int(line.split()[2].split("/")[0]) for line in lines]
    assert 8 <= len(lines) <= 10 and all(b - a >= 33 for a, b in itertools.pairwise(done))
    assert lines[-1] == "topocast: progress: 1000/1000 node(s) labelled, 30 s"


def test_progress_of_a_short_publish_says_nothing() -> None:
    err, clock = io.StringIO(), _Clock()
    progress = Progress(err, clock=clock)
    progress(1, 2)
    progress(2, 2)
    assert err.getvalue() == ""
