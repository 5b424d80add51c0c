"""topocast against a real slurmctld 22.05: rendered trees, validate-slurm, install + reconfigure.

Expectations are computed here from the graphs' fabric paths, never from the
renderer: the controller must place every node under exactly the switches on
its path, at the level its depth implies.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from pathlib import Path

import pytest
from cli_runner import invoke
from slurm_fixtures import DEFAULT_TOPOLOGY, ControllerFactory, mixed_padding_names, requires_slurm, slurm_hostnames

from topocast.model.graph import Node, TopologyGraph
from topocast.model.hostlist import compact_str
from topocast.renderers import RenderOptions, render
from topocast.slurm.controller import SlurmController, SlurmInstall, SwitchInfo
from topocast.slurm.install import install_topology
from topocast.slurm.validate import validate_topology_text

pytestmark = [pytest.mark.slurm, requires_slurm]


# ----- graphs ---------------------------------------------------------------------------
def make_graph(paths: dict[str, list[str]], switch_names: dict[str, str] | None = None) -> TopologyGraph:
    nodes = [Node(name=name, id=f"i-{i:04x}", fabric=fabric) for i, (name, fabric) in enumerate(paths.items())]
    return TopologyGraph(cluster="c1", provider="test", nodes=nodes, switch_names=switch_names or {})


def two_tier() -> TopologyGraph:
    return make_graph({f"n{i}": [f"leaf{1 + (i - 1) // 4}", "spine"] for i in range(1, 9)})


def three_tier() -> TopologyGraph:
    paths = {}
    for i in range(1, 17):
        leaf = 1 + (i - 1) // 4
        paths[f"gpu-{i:02d}"] = [f"leaf{leaf}", "sw-9f3a" if leaf <= 2 else "sw-77c1", "core"]
    return make_graph(paths, {"sw-9f3a": "spine-a", "sw-77c1": "spine-b"})


def irregular() -> TopologyGraph:
    paths = {f"a{i}": ["leaf1", "spine1", "core"] for i in range(1, 4)}
    paths |= {f"b{i}": ["leaf2", "core"] for i in range(1, 3)}
    paths |= {f"c{i}": ["leafc", "island"] for i in range(1, 3)}  # a second, shallower tree
    return make_graph(paths)


def aws_like() -> TopologyGraph:
    """4 levels of hashed network-node IDs, as DescribeInstanceTopology reports them (plus one more tier)."""
    paths = {}
    for i in range(16):
        l1, l2, l3 = i // 2, i // 4, i // 8
        paths[f"p5-{i + 1:03d}"] = [f"nn-l1-{l1:02x}", f"nn-l2-{l2:02x}", f"nn-l3-{l3:02x}", "nn-l4-00"]
    return make_graph(paths)


def with_no_topology() -> TopologyGraph:
    paths: dict[str, list[str]] = {f"n{i}": [f"leaf{1 + (i - 1) // 3}", "spine"] for i in range(1, 7)}
    paths |= {"late1": [], "late2": []}
    return make_graph(paths)


GRAPHS = {
    "2-tier": two_tier,
    "3-tier": three_tier,
    "irregular": irregular,
    "aws-4-level": aws_like,
    "no-topology": with_no_topology,
}


def expected_switches(graph: TopologyGraph) -> dict[str, SwitchInfo]:
    """What show topology must print, from the fabric paths alone."""
    under: dict[str, set[str]] = defaultdict(set)
    children: dict[str, set[str]] = defaultdict(set)
    level: dict[str, int] = defaultdict(int)
    for node in graph.nodes:
        path = [graph.switch_names.get(sw, sw) for sw in node.fabric] or ["no-topology"]
        for i, sw in enumerate(path):
            under[sw].add(node.name)
            level[sw] = max(level[sw], i)
            if i:
                children[sw].add(path[i - 1])
    return {
        sw: SwitchInfo(level=level[sw], nodes=tuple(sorted(under[sw])), switches=tuple(sorted(children[sw])))
        for sw in under
    }


def normalized(shown: dict[str, SwitchInfo]) -> dict[str, SwitchInfo]:
    return {
        sw: SwitchInfo(level=i.level, nodes=tuple(sorted(i.nodes)), switches=tuple(sorted(i.switches)))
        for sw, i in shown.items()
    }


@pytest.mark.parametrize("name", list(GRAPHS))
def test_controller_places_every_node_under_its_fabric_path(
    name: str, slurm_controller_factory: ControllerFactory
) -> None:
    graph = GRAPHS[name]()
    content = render(graph, "slurm-tree", RenderOptions(no_topology_switch=True)).content
    ctl = slurm_controller_factory(graph.node_names(), content)
    assert normalized(ctl.show_topology()) == expected_switches(graph)
    # every node sits in exactly one leaf
    for node in graph.node_names():
        assert sum(node in info.nodes for info in ctl.show_topology().values() if info.level == 0) == 1
    # and validate-slurm agrees the file is shippable (several trees only warn)
    result = validate_topology_text(content)
    assert result.ok, result.errors
    assert result.controller_checked


def test_two_controllers_run_side_by_side(slurm_controller_factory: ControllerFactory) -> None:
    a = slurm_controller_factory(["n1", "n2"], "SwitchName=a Nodes=n[1-2]\n")
    b = slurm_controller_factory(["m1", "m2"], "SwitchName=b Nodes=m[1-2]\n")
    assert a.port != b.port and a.dir != b.dir
    assert set(a.show_topology()) == {"a"}
    assert set(b.show_topology()) == {"b"}
    a.stop()
    assert not a.ping()
    assert b.ping()


def test_controller_takes_nodes_from_an_operator_slurm_conf(tmp_path: Path) -> None:
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=prod\nNodeName=DEFAULT CPUs=96\nNodeName=gpu[01-03] Feature=h100\nNodeName=cpu1\n")
    with SlurmController(slurm_conf=conf, topology="SwitchName=s Nodes=gpu[01-03],cpu1\n") as ctl:
        assert ctl.nodes == ["gpu01", "gpu02", "gpu03", "cpu1"]
        assert set(ctl.show_topology()["s"].nodes) == {"gpu01", "gpu02", "gpu03", "cpu1"}
        scratch = ctl.dir
    assert not scratch.exists(), "a controller's own temp dir is removed on stop"


def test_failed_start_reports_the_fatal_line_and_leaves_nothing_behind() -> None:
    ctl = SlurmController(["n1"], topology="SwitchName=s Nodes=n1\nSwitchName=s Nodes=n1\n")
    with pytest.raises(Exception, match="exited") as info, ctl:
        pass
    assert "fatal: Switch (s) has already been defined" in info.value.log  # type: ignore[attr-defined]
    assert not ctl.dir.exists()
    assert not ctl.is_running()


# ----- validate-slurm CLI -----------------------------------------------------------------
LONG = "s" * 65
CASES = {
    # name: (topology.conf, use slurm.conf with n[1-8]?, text the output must contain)
    "duplicate switch": (
        "SwitchName=leaf1 Nodes=n[1-4]\nSwitchName=leaf1 Nodes=n[5-8]\n",
        False,
        ["'leaf1' is defined twice", "fatal: Switch (leaf1) has already been defined"],
    ),
    "unknown child": (
        "SwitchName=leaf1 Nodes=n[1-8]\nSwitchName=spine Switches=leaf[1-2]\n",
        False,
        ["unknown child switch 'leaf2'", "fatal: Switch configuration spine has invalid child (leaf2)"],
    ),
    "bad key": ("SwitchName=leaf1 Nodez=n[1-8]\n", False, ["unknown key 'Nodez'", "unrecognized key: Nodez"]),
    "empty file": ("# nothing here\n", False, ["no switches or blocks"]),
    "node in two leaves": (
        "SwitchName=l1 Nodes=n[1-5]\nSwitchName=l2 Nodes=n[5-8]\nSwitchName=s Switches=l[1-2]\n",
        False,
        ["n5 is in more than one leaf switch", "Multiple leaf switches contain nodes: n5"],
    ),
    "name over 64 characters": (f"SwitchName={LONG} Nodes=n[1-8]\n", False, ["65 characters"]),
}


def run_cli(tmp_path: Path, topology: str, with_conf: bool) -> tuple[int, str]:
    topo = tmp_path / "topology.conf"
    topo.write_text(topology)
    args = ["validate-slurm", "--topology", str(topo)]
    if with_conf:
        conf = tmp_path / "slurm.conf"
        conf.write_text("NodeName=n[1-8] CPUs=1\nPartitionName=p Nodes=ALL\n")
        args += ["--slurm-conf", str(conf)]
    result = invoke(args)
    return result.exit_code, result.output


@pytest.mark.parametrize("case", list(CASES))
def test_validate_slurm_rejects(case: str, tmp_path: Path) -> None:
    topology, with_conf, expected = CASES[case]
    code, output = run_cli(tmp_path, topology, with_conf)
    assert code == 1, output
    for text in expected:
        assert text in output


def test_validate_slurm_accepts_a_good_file_and_warns_about_several_roots(tmp_path: Path) -> None:
    code, output = run_cli(tmp_path, DEFAULT_TOPOLOGY, True)
    assert code == 0, output
    assert "valid" in output and "3 switches" in output
    code, output = run_cli(tmp_path, "SwitchName=a Nodes=n[1-4]\nSwitchName=b Nodes=n[5-8]\n", True)
    assert code == 0, output
    assert "warning" in output and "2 root switches (a, b)" in output


def test_validate_slurm_warns_about_nodes_of_slurm_conf_in_no_switch(tmp_path: Path) -> None:
    """topocast's tree leaves out nodes without fabric (CPU nodes): slurmctld 22.05 runs, logging them at error
    level ('error: WARNING: switches lack access'), so the pull agent must not refuse such a file."""
    tree = "SwitchName=l1 Nodes=n[1-4]\nSwitchName=l2 Nodes=n[5-6]\nSwitchName=s Switches=l[1-2]\n"
    code, output = run_cli(tmp_path, tree, True)
    assert code == 0, output
    assert "warning: " in output and "in no switch: n[7-8]" in output
    assert "switches lack access to 2 nodes: n[7-8]" in output and "invalid" not in output


def test_validate_slurm_block_file_is_checked_structurally(tmp_path: Path) -> None:
    code, output = run_cli(tmp_path, "BlockName=b1 Nodes=n[1-4]\nBlockName=b2 Nodes=n[5-8]\nBlockSizes=4,8\n", True)
    assert code == 0, output
    assert "topology/block needs Slurm >= 23.02" in output
    code, output = run_cli(tmp_path, "BlockName=b1 Nodes=n[1-4]\nBlockName=b1 Nodes=n[5-8]\nBlockSizes=4,6\n", True)
    assert code == 1
    assert "'b1' is defined twice" in output and "6 is not a power-of-two multiple of 4" in output


# ----- install ----------------------------------------------------------------------------
NEW_TOPOLOGY = (
    "SwitchName=leaf1 Nodes=n[1-2]\nSwitchName=leaf2 Nodes=n[3-5]\nSwitchName=leaf3 Nodes=n[6-8]\n"
    "SwitchName=spine Switches=leaf[1-3]\n"
)
DUPLICATE = "SwitchName=leaf1 Nodes=n[1-4]\nSwitchName=leaf1 Nodes=n[5-8]\nSwitchName=spine Switches=leaf1\n"


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def install(ctl: SlurmController, text: str, **kwargs: object):  # type: ignore[no-untyped-def]
    kwargs.setdefault("expected_sha256", sha(text))
    return install_topology(
        text.encode(),
        ctl.topology_path,
        reconfigure=True,
        slurm_conf=ctl.conf_path,
        scontrol=ctl.scontrol_path,
        **kwargs,  # type: ignore[arg-type]
    )


def reconfigure_count(ctl: SlurmController) -> int:
    return sum("Processing Reconfiguration Request" in line for line in ctl.raw_log())


def test_install_new_topology_is_picked_up_after_reconfigure(slurm_controller: SlurmController) -> None:
    assert set(slurm_controller.show_topology()) == {"leaf1", "leaf2", "spine"}
    result = install(slurm_controller, NEW_TOPOLOGY)
    assert result.ok and result.action == "installed" and result.reconfigured, result.message
    shown = slurm_controller.show_topology()
    assert set(shown) == {"leaf1", "leaf2", "leaf3", "spine"}
    assert set(shown["leaf3"].nodes) == {"n6", "n7", "n8"}
    assert slurm_controller.topology_path.read_text() == NEW_TOPOLOGY
    assert Path(f"{slurm_controller.topology_path}.prev").read_text() == DEFAULT_TOPOLOGY


def test_install_rejects_a_bad_file_and_the_controller_keeps_the_old_topology(
    slurm_controller: SlurmController,
) -> None:
    result = install(slurm_controller, DUPLICATE)
    assert not result.ok and result.action == "refused" and result.failed_step == "validate"
    assert str(slurm_controller.topology_path) in result.message and "defined twice" in result.message
    assert slurm_controller.topology_path.read_text() == DEFAULT_TOPOLOGY
    assert slurm_controller.ping()
    assert set(slurm_controller.show_topology()) == {"leaf1", "leaf2", "spine"}
    assert reconfigure_count(slurm_controller) == 0


def test_install_refuses_tampered_content(slurm_controller: SlurmController) -> None:
    result = install(slurm_controller, NEW_TOPOLOGY, expected_sha256=sha(NEW_TOPOLOGY.replace("leaf3", "leaf9")))
    assert not result.ok and result.action == "refused" and result.failed_step == "sha256"
    assert "sha256" in result.message and str(slurm_controller.topology_path) in result.message
    assert slurm_controller.topology_path.read_text() == DEFAULT_TOPOLOGY
    assert not Path(f"{slurm_controller.topology_path}.prev").exists()


def test_second_install_of_the_same_content_is_a_no_op(slurm_controller: SlurmController) -> None:
    first = install(slurm_controller, NEW_TOPOLOGY)
    assert first.action == "installed"
    before = slurm_controller.topology_path.stat().st_mtime_ns, reconfigure_count(slurm_controller)
    second = install(slurm_controller, NEW_TOPOLOGY)
    assert second.ok and second.action == "unchanged" and not second.changed
    assert (slurm_controller.topology_path.stat().st_mtime_ns, reconfigure_count(slurm_controller)) == before


def test_unvalidated_fatal_file_is_rolled_back(slurm_controller: SlurmController) -> None:
    # validate=False lets the file reach the live controller, which dies on it (a fatal on reconfigure);
    # the install must put the old file back so a restart of slurmctld comes up again.
    result = install(slurm_controller, DUPLICATE, validate=False, ping_timeout=1.0)
    assert not result.ok and result.action == "rolled_back"
    assert result.failed_step in {"reconfigure", "ping"}
    assert slurm_controller.topology_path.read_text() == DEFAULT_TOPOLOGY
    assert "restored the previous file" in result.message


# ----- Topograph's own outputs --------------------------------------------------------------
def test_topograph_tree_outputs_are_accepted_by_slurmctld(conformance_dir: Path) -> None:
    files = sorted((conformance_dir / "expected").glob("*slurm-tree*.conf"))
    files += sorted((conformance_dir / "expected").glob("*slinky-tree*.conf"))
    assert files
    for path in files:
        result = validate_topology_text(path.read_bytes(), source=path.name)
        if not path.read_bytes().strip():  # Topograph's "bad ibnetdiscover" case renders nothing
            assert not result.ok and "no switches" in result.errors[0]
            continue
        assert result.ok and result.controller_checked, (path.name, result.errors)


def test_topograph_block_outputs_pass_the_structural_checks(conformance_dir: Path) -> None:
    files = sorted((conformance_dir / "expected").glob("*block*.conf"))
    assert files
    for path in files:
        result = validate_topology_text(path.read_bytes(), source=path.name)
        assert result.ok and not result.controller_checked, (path.name, result.errors)


def test_mixed_depth_switch_is_loadable_and_keeps_its_nodes_below_it(
    slurm_controller_factory: ControllerFactory,
) -> None:
    """A spine with both leaves and directly attached nodes (3- and 4-level instance types mixed).

    Topograph would print the spine twice, which slurmctld rejects; topocast adds a leaf."""
    paths = {f"deep{i}": ["leaf1", "spine", "core"] for i in range(1, 4)}
    paths |= {f"flat{i}": ["spine", "core"] for i in range(1, 3)}
    graph = make_graph(paths)
    art = render(graph, "slurm-tree")
    assert any("spine.nodes" in w for w in art.warnings)
    ctl = slurm_controller_factory(graph.node_names(), art.content)
    shown = normalized(ctl.show_topology())
    assert shown["spine"].nodes == tuple(sorted(paths))  # every node still below the spine
    assert shown["spine"].switches == ("leaf1", "spine.nodes")
    assert shown["spine.nodes"] == SwitchInfo(level=0, nodes=("flat1", "flat2"), switches=())
    assert validate_topology_text(art.content).ok


# ----- Slurm's own hostlist reader gives back what compact wrote ------------------------------------
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_slurm_reads_back_every_compacted_name(seed: int, tmp_path: Path) -> None:
    names = mixed_padding_names(seed)
    text = compact_str(names)
    got = slurm_hostnames(SlurmInstall.find(), text, tmp_path)
    assert len(got) == len(set(got)) == len(names), text  # no name twice, none lost
    assert set(got) == set(names)


def test_slurm_reads_the_padding_cases_as_written(tmp_path: Path) -> None:
    # the two lists that used to lose gpu099 and n010 (gpu[98-100], n[9-010])
    assert compact_str(["gpu98", "gpu099", "gpu100", "n9", "n010"]) == "gpu[98,099-100],n[9,010]"
    assert slurm_hostnames(SlurmInstall.find(), "gpu[98,099-100],n[9,010]", tmp_path) == [
        "gpu98",
        "gpu099",
        "gpu100",
        "n9",
        "n010",
    ]
    assert slurm_hostnames(SlurmInstall.find(), "gpu[98-100],n[9-010]", tmp_path) == [
        "gpu98",
        "gpu99",
        "gpu100",
        "n9",
        "n10",
    ]
