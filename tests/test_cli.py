"""The ``topocast`` command line as an operator uses it: exit codes, one-line errors, pipes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from cli_runner import invoke

from topocast.model.hostlist import expand
from topocast.renderers import RENDERERS

GRAPH = {
    "schema_version": 1,
    "cluster": "c1",
    "provider": "aws",
    "nodes": [
        {"name": f"gpu-{i:03d}", "id": f"i-{i:04x}", "fabric": [f"leaf-{i // 4}", "spine-0", "core-1"],
         "accelerator": f"cb-{i // 8}"}
        for i in range(16)
    ] + [{"name": "login-1", "id": "i-ffff"}],
}  # fmt: skip


@pytest.fixture
def graph_file(tmp_path: Path) -> Path:
    path = tmp_path / "g.json"
    path.write_text(json.dumps(GRAPH))
    return path


def test_render_one_format_to_stdout(graph_file: Path) -> None:
    result = invoke(["render", "--graph", str(graph_file), "-f", "slurm-tree"])
    assert result.exit_code == 0
    assert "SwitchName=leaf-0 Nodes=gpu-[000-003]" in result.stdout
    assert "login-1" not in result.stdout  # no fabric: left out of the tree, and the report says so
    assert "login-1 (no_topology_switch lists them" in result.stderr.replace("\n", " ")
    kept = invoke(["render", "--graph", str(graph_file), "-f", "slurm-tree", "--with-no-topology-switch"])
    assert "SwitchName=no-topology Nodes=login-1" in kept.stdout


def test_render_all_formats_writes_files_and_a_manifest(graph_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = invoke(["render", "--graph", str(graph_file), "-f", "all", "--block-sizes", "8,16", "--out", str(out)])
    assert result.exit_code == 0, result.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert {a["format"] for a in manifest["artifacts"]} == set(RENDERERS)
    for entry in manifest["artifacts"]:
        assert (out / entry["file"]).is_file()
    assert "BlockSizes=8,16" in (out / "topology-block.conf").read_text()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--graph", "/nonexistent.json"], "cannot read"),
        (["--graph", "{graph}", "-f", "nope"], "unknown format 'nope'"),
        (["--graph", "{graph}", "--block-sizes", "8,12"], "power-of-two"),
        (["--graph", "{graph}", "--block-sizes", "x"], "comma-separated integers"),
        (["--graph", "{graph}", "-f", "slurm-tree", "-f", "kai"], "several formats need --out"),
        (["--graph", "{bad}"], "contains a newline"),
        ([], "exactly one of --graph or --model"),
    ],
)
def test_bad_input_exits_non_zero_with_one_line(
    args: list[str], message: str, graph_file: Path, tmp_path: Path
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**GRAPH, "nodes": [{"name": "gpu-1", "fabric": ["leaf\nSwitchName=evil"]}]}))
    argv = ["render"] + [a.format(graph=graph_file, bad=bad) for a in args]
    if "-f" not in argv and "--block-sizes" in argv:
        argv += ["-f", "slurm-block"]
    result = invoke(argv)
    assert result.exit_code != 0
    lines = [ln for ln in result.stderr.splitlines() if ln.startswith("topocast: error:")]
    assert len(lines) == 1 and message in lines[0], result.stderr


def test_discover_ibnetdiscover_pipes_into_render(conformance_dir: Path, tmp_path: Path) -> None:
    """`topocast discover ... | topocast render --graph -` with real processes."""
    example = conformance_dir / "inputs" / "ibnetdiscover" / "example.out"
    exe = [sys.executable, "-m", "topocast.cli"]
    discover = subprocess.run(
        [*exe, "discover", "--provider", "ibnetdiscover", "--input", str(example), "--cluster", "dgx"],
        capture_output=True,
        check=True,
    )
    rendered = subprocess.run(
        [*exe, "render", "--graph", "-", "-f", "slurm-tree"], input=discover.stdout, capture_output=True, check=True
    )
    graph = json.loads(discover.stdout)
    text = rendered.stdout.decode()
    listed = {n for ln in text.splitlines() if " Nodes=" in ln for n in expand(ln.split(" Nodes=")[1])}
    assert listed == {n["name"] for n in graph["nodes"]}


def test_discover_aws_against_moto(aws_env: str, tmp_path: Path) -> None:
    import boto3

    from topocast_sim import ec2 as ec2_sim

    ec2 = boto3.client("ec2")
    ec2_sim.generate_cluster(ec2, 20, cluster_tag=("topocast:cluster", "c1"))
    ec2_sim.generate_cluster(ec2, 5, cluster_tag=("topocast:cluster", "other"), name_prefix="x-")
    out = tmp_path / "g.json"
    result = invoke(
        ["discover", "--provider", "aws", "--cluster", "c1", "--filter", "tag:topocast:cluster=c1",
         "--name-from", "tag:Name", "--out", str(out)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    graph = json.loads(out.read_text())
    assert sorted(n["name"] for n in graph["nodes"]) == [f"gpu-{i:03d}" for i in range(20)]
    assert all(len(n["fabric"]) == 3 for n in graph["nodes"])


def test_discover_aws_without_permission_is_one_clear_line(aws_env: str) -> None:
    from topocast_sim import ec2 as ec2_sim

    ec2_sim.inject_faults(1.0, code="UnauthorizedOperation", status=403)
    result = invoke(["discover", "--provider", "aws", "--cluster", "c1"])
    assert result.exit_code != 0
    assert "ec2:DescribeInstances" in result.stderr


def test_model_not_in_the_repo_renders_and_loads_into_slurmctld(tmp_path: Path, slurm_controller_factory) -> None:
    """A hidden-case stand-in: a model written here, rendered by the CLI, loaded by the real controller."""
    model = tmp_path / "hidden.yaml"
    model.write_text(
        "switches:\n  top: {switches: [agg-a, agg-b]}\n"
        "  agg-a: {switches: [tor-1, tor-2]}\n  agg-b: {switches: [tor-3]}\n"
        "blocks:\n"
        "- {switch: tor-1, nodes: ['h[001-004]'], annotations: {accelerator.topology.test/domain: nvl-a}}\n"
        "- {switch: tor-2, nodes: ['h[005-006]'], annotations: {accelerator.topology.test/domain: nvl-a}}\n"
        "- {switch: tor-3, nodes: ['h[007-010]'], annotations: {accelerator.topology.test/domain: nvl-b}}\n"
    )
    result = invoke(["render", "--model", str(model), "-f", "slurm-tree"])
    assert result.exit_code == 0, result.output
    ctl = slurm_controller_factory([f"h{i:03d}" for i in range(1, 11)], result.stdout)
    shown = ctl.show_topology()
    assert shown["top"].level == 2 and len(shown["top"].nodes) == 10
    assert sorted(shown["agg-a"].nodes) == [f"h{i:03d}" for i in range(1, 7)]
    assert sorted(shown["tor-3"].nodes) == [f"h{i:03d}" for i in range(7, 11)]


# a whole GCP pipeline with its storage emulator in a child process; the demo's outputs are checked in the
# default run by test_gcp_faults.test_demo_writes_its_outputs, its CLI path by test_watch_notifications[gcp]
@pytest.mark.slow
def test_gcp_demo_through_the_cli_writes_the_same_outputs(tmp_path: Path) -> None:
    out = tmp_path / "demo-gcp"
    result = invoke(["demo", "--cloud", "gcp", "--nodes", "32", "--out", str(out), "--quiet", "1"])
    assert result.exit_code == 0, result.output
    report = json.loads((out / "report.json").read_text())
    for key in ("events", "discover_runs", "api_calls", "renders", "publishes", "nodes", "nodes_without_topology"):
        assert key in report, key
    assert report["pull"]["ok"] and report["nodes"] == 32
    assert "Compute calls" in result.stdout
    assert "topology-block.conf" in result.stdout and (out / "topology-block.conf").is_file()
    conf = (out / "topology.conf").read_text()
    assert "no-topology" not in conf  # the nodes without fabric are left out of the tree
    assert len(json.loads((out / "labels.json").read_text())) == report["nodes"]


def test_demo_rejects_an_unknown_cloud() -> None:
    result = invoke(["demo", "--cloud", "azure"])
    assert result.exit_code != 0 and "--cloud must be aws or gcp" in result.stderr


def test_top_level_help_lists_every_command_and_group() -> None:
    result = invoke(["--help"])
    assert result.exit_code == 0
    for name in ("render", "validate-slurm", "schema", "discover", "pull", "demo", "package", "diff", "collect"):
        assert f"\n  {name} " in result.stdout, name
    sub = invoke(["collect", "--help"])
    assert sub.exit_code == 0 and "ibnetdiscover" in sub.stdout


def test_unknown_command_is_one_line_exit_2() -> None:
    result = invoke(["rendr", "--graph", "x"])
    assert result.exit_code == 2
    assert result.stderr.strip() == "topocast: error: unknown command 'rendr' (see 'topocast --help')"


def test_importing_the_cli_loads_no_command_dependencies() -> None:
    """`topocast render` starts fast because the CLI module imports nothing a command needs."""
    mods = "('pydantic', 'yaml', 'typer', 'boto3')"
    code = f"import sys, topocast.cli; print(sorted(m for m in {mods} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# ----- topology names of topology.yaml: refused at render with the rule pull applies --------------------
_ALLOWED = "allowed are letters, digits and . _ - + @ /"


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("x,y", "topology 'x,y': topology name 'x,y' of topology.yaml contains ','; " + _ALLOWED),
        ("a:b", "topology 'a:b': topology name 'a:b' of topology.yaml contains ':'; " + _ALLOWED),
        ("x y", "topology 'x y': topology name 'x y' of topology.yaml contains whitespace; " + _ALLOWED),
        ("", "topology '': topology name of topology.yaml is empty"),
    ],
)
def test_render_refuses_a_topology_name_pull_would_refuse(
    name: str, why: str, graph_file: Path, tmp_path: Path
) -> None:
    options = tmp_path / "o.yaml"
    options.write_text(json.dumps({"topologies": {name: {"plugin": "tree"}, "ok": {"plugin": "flat"}}}))
    out = tmp_path / "out"
    result = invoke(["render", "--graph", graph_file, "-f", "slurm-yaml", "--options", options, "--out", out])
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr == (
        f"topocast: error: {options}: bad render options: topologies: {why} "
        "(topocast pull and node-topology refuse it)\n"
    )
    assert not out.exists()  # nothing written
    # the very rule of pull: the topology.yaml such a name would make is refused by its reader
    from topocast.slurm.topoyaml import parse_topology_yaml

    parsed = parse_topology_yaml(f"- topology: {json.dumps(name)}\n  cluster_default: true\n  flat: true\n")
    assert parsed.errors, name


def test_render_keeps_topology_names_pull_accepts(graph_file: Path, tmp_path: Path) -> None:
    options = tmp_path / "o.yaml"
    options.write_text("topologies:\n  part-a.1: {plugin: flat}\n  gpu@b/2: {plugin: flat, cluster_default: true}\n")
    result = invoke(["render", "--graph", graph_file, "-f", "slurm-yaml", "--options", options])
    assert result.exit_code == 0, result.stderr
    assert result.stdout == (
        "- topology: gpu@b/2\n  cluster_default: true\n  flat: true\n"
        "- topology: part-a.1\n  cluster_default: false\n  flat: true\n"
    )
