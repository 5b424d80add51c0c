"""IB port selection: on a dump (or NetQ premise) showing the compute and the storage fabric, only the
compute fabric's ports make the tree; without a selection nothing changes.

Ground truth is the generator's cabling (tests/ib_fabric_gen.py): ``dual_fabric`` builds the compute
fat tree first, so the compute-only fabric is ``fat_tree`` with the same arguments (same GUIDs).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from cli_runner import invoke
from ib_fabric_gen import IbFabric, dual_fabric, fat_tree
from netq_fake_server import FakeNetq, topology_from_fabric

from topocast.config import settings_from_env
from topocast.errors import ProviderError
from topocast.model.graph import TopologyGraph, dump_graph
from topocast.providers.onprem import ibnetdiscover, netq
from topocast.providers.onprem.netq_http import NetqCredentials
from topocast.providers.port_selection import PortSelection

SHAPE = {"pods": 2, "units": 2, "hosts_per_unit": 8, "rails": 4}
COMPUTE = PortSelection.parse(["mlx5_[0-7]"], [], ["!STOR-*"])
CREDS = NetqCredentials("admin", "admin-pw")


def ib_graph(fab: IbFabric, selection: PortSelection | None = None) -> ibnetdiscover.DiscoveryResult:
    return ibnetdiscover.discover(texts={"dump": fab.text()}, selection=selection)


def switches(graph: TopologyGraph) -> set[str]:
    return {sw for n in graph.nodes for sw in n.fabric}


def assert_compute_tree(graph: TopologyGraph, fab: IbFabric) -> None:
    """Every GPU host under one of the compute leaves it is cabled to, no storage switch anywhere, 3 tiers."""
    assert graph.node_names() == [h for h in fab.hosts if h.startswith("gpu")]
    for node in graph.nodes:
        assert node.fabric[0] in fab.cabled[node.name], node
        assert node.fabric[1] in fab.spines and node.fabric[2] in fab.cores, node
    assert not switches(graph) & fab.storage


def test_without_selection_the_dual_fabric_reads_as_today() -> None:
    fab = dual_fabric(**SHAPE)
    result = ib_graph(fab)
    # today's reading: every HCA is a host cable, the multi-rail choice is reported, storage servers
    # sit under their storage leaf
    assert any(w.startswith("32 host(s) are cabled to several leaf switch groups") for w in result.warnings)
    assert not any("port selection" in w for w in result.warnings)
    stor = {n.name: n.fabric for n in result.graph.nodes if n.name.startswith("stor-")}
    assert set(stor) == {"stor-00", "stor-01"} and all(path[0] in fab.storage for path in stor.values())


@pytest.mark.parametrize("cross_link", [False, True], ids=["separate", "storage-leaf-on-a-compute-spine"])
def test_selection_gives_the_compute_only_tree(cross_link: bool) -> None:
    fab = dual_fabric(cross_link=cross_link, **SHAPE)
    result = ib_graph(fab, COMPUTE)
    compute_only = ib_graph(fat_tree(**SHAPE)).graph
    assert dump_graph(result.graph) == dump_graph(compute_only)
    assert_compute_tree(result.graph, fab)
    (note,) = [w for w in result.warnings if w.startswith("port selection")]
    assert "34 HCA port(s) of 34 host(s)" in note and "4 switch(es) not on the compute fabric" in note
    assert "STOR-LEAF-0" in note and "left out: stor-[00-01]" in note


def test_hca_pattern_alone_keeps_a_cross_linked_storage_leaf_out_of_the_tiers() -> None:
    # NVIDIA/topograph#488: a storage leaf cabled to a compute spine must not become a tier above it
    fab = dual_fabric(cross_link=True, storage_servers=0, **SHAPE)
    result = ib_graph(fab, PortSelection.parse(["!mlx5_8"]))
    assert dump_graph(result.graph) == dump_graph(ib_graph(fat_tree(**SHAPE)).graph)
    assert_compute_tree(result.graph, fab)


def test_a_storage_hca_on_a_spine_does_not_drop_the_spine() -> None:
    fab = fat_tree(**SHAPE)
    spine = sorted(fab.spines)[0]
    fab.hca("gpu0001", "mlx5_8", spine)
    result = ib_graph(fab, PortSelection.parse(["mlx5_[0-3]"]))
    assert spine in switches(result.graph)
    assert dump_graph(result.graph) == dump_graph(ib_graph(fat_tree(**SHAPE)).graph)


def test_selection_by_port_guid() -> None:
    fab = dual_fabric(storage_servers=0, **SHAPE)
    guids = [n.id.removeprefix("H-") for n in fab.nodes.values() if n.kind == "Ca" and " mlx5_" in n.desc]
    compute = [g for g in guids if not fab.nodes[f"H-{g}"].desc.endswith("mlx5_8")]
    result = ib_graph(fab, PortSelection.parse(guids=[f"0x{g.upper()}" for g in compute]))
    assert_compute_tree(result.graph, fab)
    with pytest.raises(ProviderError, match=r"port selection \(GUIDs\): 'mlx5_0' is not a GUID"):
        PortSelection.parse(guids=["mlx5_0"])


def test_netq_dual_fabric_with_and_without_selection() -> None:
    fab = dual_fabric(cross_link=True, **SHAPE)
    with FakeNetq({1: topology_from_fabric(fab)}) as server:
        plain = netq.discover(server.url, credentials=CREDS, nvlink=False)
        chosen = netq.discover(server.url, credentials=CREDS, nvlink=False, selection=COMPUTE)
    with FakeNetq({1: topology_from_fabric(fat_tree(**SHAPE))}) as server:
        compute_only = netq.discover(server.url, credentials=CREDS, nvlink=False)
    assert any(w.startswith("32 host(s) are cabled to several leaf switch groups") for w in plain.warnings)
    assert {"stor-00", "stor-01"} <= set(plain.graph.node_names())
    assert dump_graph(chosen.graph) == dump_graph(compute_only.graph)
    assert_compute_tree(chosen.graph, fab)
    (note,) = [w for w in chosen.warnings if w.startswith("port selection")]
    assert "34 host cable(s)" in note and "4 switch(es) excluded by name" in note and "stor-[00-01]" in note


def test_cli_and_settings_carry_the_selection(tmp_path: Path) -> None:
    dual, compute = tmp_path / "dual.out", tmp_path / "compute.out"
    dual.write_text(dual_fabric(**SHAPE).text())
    compute.write_text(fat_tree(**SHAPE).text())
    base = ["discover", "--provider", "ibnetdiscover", "--cluster", "c1"]
    chosen = invoke([*base, "--input", dual, "--ib-hca", "mlx5_[0-7]", "--ib-switch", "!STOR-*"])
    expected = invoke([*base, "--input", compute])
    assert chosen.exit_code == 0 and chosen.stdout == expected.stdout
    assert "port selection (hcas mlx5_[0-7]; switches !STOR-*)" in chosen.stderr
    bad = invoke([*base, "--input", dual, "--ib-guid", "xyz"])
    assert bad.exit_code != 0 and "'xyz' is not a GUID" in bad.stderr and "Traceback" not in bad.output
    env = {"TOPOCAST_CLUSTER": "c1", "TOPOCAST_PROVIDER": "ibnetdiscover", "TOPOCAST_IB_HCAS": "mlx5_[0-7];!mlx5_8"}
    options = settings_from_env(env).provider_options()
    assert options["ib_hcas"] == ["mlx5_[0-7]", "!mlx5_8"]
    assert PortSelection.from_options(options) == PortSelection.parse(["mlx5_[0-7]", "!mlx5_8"])


@pytest.mark.slurm
def test_slurmctld_loads_the_selected_tree_without_a_storage_switch(slurm_controller_factory: Any) -> None:
    from topocast.renderers import render

    fab = dual_fabric(cross_link=True, **SHAPE)
    graph = ib_graph(fab, COMPUTE).graph
    ctl = slurm_controller_factory(graph.node_names(), render(graph, "slurm-tree").content)
    shown = ctl.show_topology()
    assert not set(shown) & fab.storage
    for node in graph.nodes:
        leaf, spine, core = node.fabric
        assert node.name in shown[leaf].nodes
        assert (shown[leaf].level, shown[spine].level, shown[core].level) == (0, 1, 2)


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--ib-hca", "mlx9_*"], "hcas mlx9_*"),
        (["--ib-switch", "NOPE*"], "switches NOPE*"),
        (["--ib-guid", "0x1234"], "guids 0000000000001234"),
        (["--ib-hca", "!*"], "hcas !*"),
    ],
)
def test_a_selection_that_selects_no_host_is_exit_2_naming_the_patterns(
    tmp_path: Path, flags: list[str], named: str
) -> None:
    dump = tmp_path / "dual.out"
    dump.write_text(dual_fabric(**SHAPE).text())
    res = invoke(["discover", "--provider", "ibnetdiscover", "--cluster", "c1", "--input", dump, *flags])
    assert res.exit_code == 2 and res.stdout == ""  # no graph, so nothing downstream renders an empty map
    assert f"topocast: error: port selection ({named}) selects none of the fabric's" in res.stderr
    assert res.stderr.count("\n") == 1


def test_netq_a_selection_that_selects_no_host_fails_the_discovery() -> None:
    fab = dual_fabric(cross_link=True, **SHAPE)  # 2 x 2 x 8 GPU hosts and 2 storage servers: 34 hosts
    with FakeNetq({1: topology_from_fabric(fab)}) as server, pytest.raises(
        ProviderError, match=r"^port selection \(switches NOPE\*\) selects none of the fabric's 34 host\(s\)"
    ):  # fmt: skip
        netq.discover(server.url, credentials=CREDS, nvlink=False, selection=PortSelection.parse([], [], ["NOPE*"]))


@pytest.mark.parametrize(
    ("text", "patterns"),
    [
        ("mlx5_[0,1]", ["mlx5_[0,1]"]),
        ("mlx5_[0,1];!mlx5_8", ["mlx5_[0,1]", "!mlx5_8"]),
        ("mlx5_[0,1],mlx5_[4,5]", ["mlx5_[0,1]", "mlx5_[4,5]"]),
        ('["mlx5_[0,1]", "!mlx5_8"]', ["mlx5_[0,1]", "!mlx5_8"]),
    ],
)
def test_a_list_variable_keeps_a_pattern_s_bracket_whole(text: str, patterns: list[str]) -> None:
    env = {"TOPOCAST_CLUSTER": "c1", "TOPOCAST_PROVIDER": "ibnetdiscover", "TOPOCAST_IB_HCAS": text}
    options = settings_from_env(env).provider_options()
    assert options["ib_hcas"] == patterns
    assert PortSelection.from_options({"ib_hcas": text}) == PortSelection.parse(patterns)
    # and the functions select those HCAs: rails mlx5_0 and mlx5_1 of every GPU host (and the storage
    # servers' mlx5_0, which no pattern here excludes)
    fab = dual_fabric(**SHAPE)
    graph = ib_graph(fab, PortSelection.from_options(options)).graph
    assert graph.node_names() == [*(h for h in fab.hosts if h.startswith("gpu")), "stor-00", "stor-01"]
