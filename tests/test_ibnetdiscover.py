"""ibnetdiscover provider: Topograph conformance, generated fat trees, bad input, domains, real slurmctld."""

from __future__ import annotations

import json
import re
from collections import defaultdict
from pathlib import Path

import pytest
from ib_fabric_gen import IbFabric, fat_tree
from slurm_fixtures import ControllerFactory

from topocast.errors import NotApplicableError, ProviderError
from topocast.model.fabric import build_tree
from topocast.model.graph import TopologyGraph
from topocast.providers.clos import collapse
from topocast.providers.domains import load_domains, parse_domains
from topocast.providers.onprem import ibnetdiscover as ib
from topocast.renderers import RenderOptions, render


@pytest.fixture(scope="module")
def ib_dir(conformance_dir: Path) -> Path:
    return conformance_dir / "inputs" / "ibnetdiscover"


@pytest.fixture(scope="module")
def requested(ib_dir: Path) -> list[str]:
    return json.loads((ib_dir / "example.request-nodes.json").read_text())["nodes"]


def named_hosts(text: str) -> set[str]:
    """Hosts the file names in a ``Ca`` record as '<host> <device>' (read independently of the parser)."""
    return {m.group(1) for m in re.finditer(r'^Ca\s+\d+\s+"[^"]+"\s+# "(\S+) \S+"$', text, re.M)}


def placed_only(graph: TopologyGraph) -> TopologyGraph:
    """Topograph's unit test renders the bare tree: requested hosts it never saw are not listed."""
    return graph.model_copy(update={"nodes": [n for n in graph.nodes if n.fabric]})


# ----- conformance ------------------------------------------------------------------------
def test_topograph_compat_mode_matches_the_expected_file_byte_for_byte(
    ib_dir: Path, requested: list[str], conformance_dir: Path
) -> None:
    expected = (conformance_dir / "expected" / "ibnetdiscover-example__infiniband__slurm-tree.conf").read_text()
    result = ib.discover(ib_dir / "example.out", nodes=requested, topograph_compat=True)
    assert render(placed_only(result.graph), "slurm-tree").content == expected
    # the hosts left out of that file are exactly the requested ones without a named HCA
    missing = {n.name for n in result.graph.nodes if not n.fabric}
    assert missing == set(requested) - named_hosts((ib_dir / "example.out").read_text())


def test_default_mode_drops_topographs_bogus_root(ib_dir: Path, requested: list[str], conformance_dir: Path) -> None:
    """Divergence: Topograph's root S-2c5eab0300b87b40 is a leaf switch whose hosts were not requested."""
    expected = (conformance_dir / "expected" / "ibnetdiscover-example__infiniband__slurm-tree.conf").read_text()
    first, rest = expected.split("\n", 1)
    bogus = first.split()[0].removeprefix("SwitchName=")
    text = (ib_dir / "example.out").read_text()
    record = text[text.index(f'Switch\t65 "{bogus}"') :].split("\n\n", 1)[0]
    assert "IBLEAF" in record.splitlines()[0] and re.search(r'# "a08-p1-dgx-04-c\d+ mlx5_5"', record)
    result = ib.discover(ib_dir / "example.out", nodes=requested)
    assert render(placed_only(result.graph), "slurm-tree").content == rest


def test_bad_example_keeps_the_host_without_fabric(ib_dir: Path, conformance_dir: Path) -> None:
    """Topograph's bare tree is empty; with its no-topology rule (ours on request) the host is listed there."""
    expected = (conformance_dir / "expected" / "ibnetdiscover-example-bad__infiniband__slurm-tree.conf").read_text()
    result = ib.discover(ib_dir / "example-bad.out", nodes=["dgx-gb200-n01-c1"])
    assert [(n.name, n.fabric) for n in result.graph.nodes] == [("dgx-gb200-n01-c1", [])]
    assert any("cabled to no switch" in w for w in result.warnings)
    assert placed_only(result.graph).nodes == [] and expected == ""
    kept = RenderOptions(no_topology_switch=True)
    assert render(result.graph, "slurm-tree", kept).content == "SwitchName=no-topology Nodes=dgx-gb200-n01-c1\n"
    with pytest.raises(NotApplicableError, match="none of its 1 node"):  # by default: no tree to write
        render(result.graph, "slurm-tree")


def test_switch_names_come_from_node_descriptions(ib_dir: Path, requested: list[str]) -> None:
    result = ib.discover(ib_dir / "example.out", nodes=requested, switch_names=True)
    text = render(result.graph, "slurm-tree").content
    assert "# B10-P1-IBSPINE-07=S-2c5eab0300c25f00\nSwitchName=B10-P1-IBSPINE-07 Switches=" in text
    assert "SwitchName=A09-P1-IBLEAF-01-02 Nodes=a06-p1-dgx-02-c[01-04,07,10-12,14,16,18]\n" in text


def test_unnamed_hcas_are_reported(ib_dir: Path) -> None:
    result = ib.discover(ib_dir / "example.out")
    assert any("names no host" in w and "MT4129 ConnectX7" in w for w in result.warnings)
    assert not any(n.name.startswith(("MT4129", "Mellanox", "localhost")) for n in result.graph.nodes)


# ----- generated fat trees ------------------------------------------------------------------
def assert_every_host_under_a_cabled_leaf(fab: IbFabric, graph: TopologyGraph) -> None:
    nodes = {n.name: n for n in graph.nodes}
    assert sorted(nodes) == fab.hosts
    for host in fab.hosts:
        assert nodes[host].fabric[0] in fab.cabled[host], host


def assert_one_tree(graph: TopologyGraph) -> None:
    tree = build_tree(graph, no_topology_switch=False)
    assert len(tree.roots) == 1
    assert {n.fabric[-1] for n in graph.nodes} == set(tree.roots)


def test_two_tier_rail_optimized_fabric_with_1024_hosts() -> None:
    fab = fat_tree(units=32, hosts_per_unit=32, rails=4, spines_per_rail=4)
    result = ib.discover(texts={"gen.out": fab.text()})
    graph = result.graph
    assert len(graph.nodes) == 1024 and result.warnings == []
    assert_every_host_under_a_cabled_leaf(fab, graph)
    assert_one_tree(graph)
    # the four rail leaves of a scalable unit are one leaf: same leaf for the same unit, one per unit
    by_leaf: dict[str, set[str]] = defaultdict(set)
    for n in graph.nodes:
        by_leaf[n.fabric[0]].add(n.name)
    assert sorted(len(v) for v in by_leaf.values()) == [32] * 32
    assert all(len({frozenset(fab.cabled[h]) for h in hosts}) == 1 for hosts in by_leaf.values())
    assert {len(n.fabric) for n in graph.nodes} == {2}
    assert {n.fabric[1] for n in graph.nodes} <= fab.spines


def test_three_tier_fabric_collapses_per_pod_under_one_core() -> None:
    fab = fat_tree(pods=4, units=8, hosts_per_unit=32, rails=4, spines_per_rail=4, cores_per_rail=4)
    graph = ib.discover(texts={"gen.out": fab.text()}).graph
    assert len(graph.nodes) == 1024
    assert_every_host_under_a_cabled_leaf(fab, graph)
    assert_one_tree(graph)
    spine_of_pod: dict[int, set[str]] = defaultdict(set)
    for n in graph.nodes:
        leaf, spine, core = n.fabric
        assert spine in fab.spines and core in fab.cores
        assert fab.pod_of[spine] == fab.pod_of[leaf] == fab.pod_of[n.name]
        spine_of_pod[fab.pod_of[n.name]].add(spine)
    assert all(len(s) == 1 for s in spine_of_pod.values()) and len(spine_of_pod) == 4


def test_a_missing_rail_cable_does_not_split_the_tree() -> None:
    fab = fat_tree(units=4, hosts_per_unit=8, rails=4)
    # unplug gpu0003's rail-2 HCA: its rail-2 leaf now serves a different host set than rails 0, 1 and 3
    text = fab.text()
    dead = next(n.id for n in fab.nodes.values() if n.desc == "gpu0003 mlx5_2")
    leaf, leaf_port = fab.nodes[dead].ports[1]
    fab.nodes[dead].ports.clear()
    del fab.nodes[leaf].ports[leaf_port]
    fab.cabled["gpu0003"].discard(leaf)
    assert fab.text() != text
    result = ib.discover(texts={"gen.out": fab.text()})
    assert_every_host_under_a_cabled_leaf(fab, result.graph)
    assert_one_tree(result.graph)
    unit0 = {n.fabric[0] for n in result.graph.nodes if int(n.name[3:]) <= 8}
    assert len(unit0) == 1  # the other 7 hosts follow their majority of rails, not the odd leaf
    assert any("7 host(s) are cabled to several leaf switch groups" in w for w in result.warnings)


def test_a_management_host_on_a_spine(ib_dir: Path) -> None:
    fab = fat_tree(units=4, hosts_per_unit=8, rails=2, spines_per_rail=2)
    spine = sorted(fab.spines)[0]
    fab.hca("ufm-01", "mlx5_0", spine)
    gpus = [h for h in fab.hosts if h.startswith("gpu")]
    for kwargs in ({"nodes": gpus}, {"host_regex": r"(?P<host>gpu\d+)\s+\S+"}):
        result = ib.discover(texts={"x": fab.text()}, **kwargs)  # type: ignore[arg-type]
        assert result.graph.node_names() == gpus
        assert_one_tree(result.graph)
        assert all(n.fabric[0] in fab.cabled[n.name] and n.fabric[1] in fab.spines for n in result.graph.nodes)
    # taken as a host, it does not make its spine a leaf: its cable is ignored, said in a warning
    result = ib.discover(texts={"x": fab.text()})
    assert_one_tree(placed_only(result.graph))
    assert [n.fabric for n in result.graph.nodes if n.name == "ufm-01"] == [[]]
    assert any(f"ufm-01 -> {spine} (P0-SPINE-R0-0)" in w for w in result.warnings)


def multi_homed(rails_on_a: int, rails_on_b: int) -> tuple[IbFabric, str, str]:
    """Two leaves under one spine; 'odd' has ``rails_on_a`` HCAs on leaf A and ``rails_on_b`` on leaf B."""
    fab = IbFabric()
    spine = fab.switch("SPINE")
    a, b = fab.switch("LEAF-A"), fab.switch("LEAF-B")
    for leaf in (a, b):
        fab.link(leaf, spine)
    for i in range(4):
        fab.hca(f"a{i}", "mlx5_0", a)
        fab.hca(f"b{i}", "mlx5_0", b)
    for r in range(rails_on_a):
        fab.hca("odd", f"mlx5_{r}", a)
    for r in range(rails_on_b):
        fab.hca("odd", f"mlx5_{rails_on_a + r}", b)
    return fab, a, b


def test_multi_rail_host_goes_to_the_leaf_with_most_of_its_hcas() -> None:
    fab, _, b = multi_homed(1, 3)
    graph = ib.discover(texts={"x": fab.text()}).graph
    assert next(n for n in graph.nodes if n.name == "odd").fabric[0] == b


def test_multi_rail_tie_goes_to_the_bigger_leaf_then_the_smaller_guid() -> None:
    fab, a, b = multi_homed(2, 2)
    fab.hca("b4", "mlx5_0", b)  # leaf B now serves more hosts
    graph = ib.discover(texts={"x": fab.text()}).graph
    assert next(n for n in graph.nodes if n.name == "odd").fabric[0] == b
    fab, a, b = multi_homed(2, 2)
    assert a < b
    graph = ib.discover(texts={"x": fab.text()}).graph
    assert next(n for n in graph.nodes if n.name == "odd").fabric[0] == a


def test_clos_merge_keeps_the_smallest_id_and_reports_merges() -> None:
    tree = collapse({"h1": ["L2", "L1"], "h2": ["L1", "L2"]}, {"L1": ["S9", "S3"], "L2": ["S3", "S9"]})
    assert tree.paths == {"h1": ("L1", "S3"), "h2": ("L1", "S3")}
    assert tree.merged == {"L2": "L1", "S9": "S3"} and tree.choices == []


def test_host_regex_and_node_filter(ib_dir: Path) -> None:
    fab = fat_tree(units=2, hosts_per_unit=4, rails=2)
    text = (
        fab.text().replace('"gpu0001 mlx5_0"', '"gpu0001.ib mlx5_0"').replace('"gpu0001 mlx5_1"', '"gpu0001.ib mlx5_1"')
    )
    graph = ib.discover(texts={"x": text}, host_regex=r"(?P<host>[^.\s]+)(?:\.ib)?\s+mlx5_\d+").graph
    assert graph.node_names() == fab.hosts
    graph = ib.discover(texts={"x": fab.text()}, nodes=["gpu0002", "gpu0005", "absent"]).graph
    assert graph.node_names() == ["absent", "gpu0002", "gpu0005"]
    assert graph.nodes[0].fabric == []
    with pytest.raises(ProviderError, match="needs a group"):
        ib.discover(texts={"x": fab.text()}, host_regex=r"\S+\s+\S+")


# ----- bad input ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def small() -> str:
    return fat_tree(units=2, hosts_per_unit=2, rails=2, spines_per_rail=1).text()


def error_of(text: str | bytes) -> str:
    with pytest.raises(ProviderError) as info:
        ib.parse(text, "f.out")
    return str(info.value)


def test_truncated_mid_line(small: str) -> None:
    lines = small.splitlines(keepends=True)
    cut = next(i for i, ln in enumerate(lines) if ln.startswith("[2]"))
    text = "".join(lines[:cut]) + lines[cut][:12]
    assert error_of(text).startswith(f"f.out:{cut + 1}: incomplete last line")


def test_truncated_between_records(small: str) -> None:
    records = small.split("\n\n")
    text = "\n\n".join(records[:3]) + "\n\n"
    msg = error_of(text)
    assert re.match(r"f\.out:\d+: S-\w+ port \d+ links to [SH]-\w+, which the output never describes", msg)
    number = int(msg.split(":")[1])
    assert text.splitlines()[number - 1].startswith("[")


def test_truncated_inside_a_record(small: str) -> None:
    lines = small.splitlines()
    last_ca = max(i for i, ln in enumerate(lines) if ln.startswith("Ca\t"))
    text = "\n".join(lines[:last_ca]) + "\n"  # the last HCA lost its port line (and record line)
    msg = error_of(text)
    assert "output cut off" in msg
    body = "\n".join(lines[: last_ca + 1]) + "\n"  # now only its port line is missing
    msg = error_of(body)
    assert "is missing from" in msg and f"f.out:{last_ca + 1})" in msg


def test_garbage_lines_are_named(small: str) -> None:
    assert (
        error_of("hello world\nthis is not a fabric\n")
        == "f.out:1: unrecognized line 'hello world' (not ibnetdiscover output, or a damaged copy)"
    )
    assert "ibnetdiscover -p" in error_of("SW    73    1 0x2c5eab0300b87b40 4x NDR - CA 647 1 0xe09d 4x NDR\n")
    assert error_of(b"vendid=0x2c9\n\xff\xfe\n").startswith("f.out:2: not UTF-8")
    assert error_of("").startswith("f.out:1: no Switch or Ca records")
    assert error_of("# just a comment\n\n").startswith("f.out:1: no Switch or Ca records")


def test_a_damaged_line_sets_aside_its_record_only(small: str) -> None:
    lines = small.splitlines()
    lines.insert(9, "hello world")  # inside the first switch record (a spine)
    fabric = ib.parse("\n".join(lines) + "\n", "f.out")
    assert fabric.bad == {
        "record 'MF0;P0-SPINE-R0-0:MQM9790/U1'": "f.out:10: unrecognized line 'hello world' (not ibnetdiscover "
        "output, or a damaged copy) in the record of S-2c5eab0300000040; set aside"
    }
    assert "S-2c5eab0300000040" not in fabric.nodes and len(fabric.nodes) == 15
    assert all(p.remote != "S-2c5eab0300000040" for n in fabric.nodes.values() for p in n.ports.values())


def test_structural_errors(small: str) -> None:
    lines = small.splitlines()
    port = next(i for i, ln in enumerate(lines) if ln.startswith("[1]"))
    stray = [*lines[: port + 1], "", *lines[port + 1 :]]  # a blank line ends the record, then a port line
    assert "is missing from S-2c5eab0300000040's record (f.out:9); output cut off?" in error_of("\n".join(stray) + "\n")
    dup = "\n".join([*lines[: port + 1], lines[port]]) + "\n"
    assert f"f.out:{port + 2}: port 1 of " in error_of(dup) and "listed twice" in error_of(dup)
    record = next(i for i, ln in enumerate(lines) if ln.startswith("Switch"))
    block = "\n".join(lines[record - 4 : port + 1])
    assert "is described twice (first at line" in error_of(small + block + "\n\n")
    assert error_of(small + "vendid=0x2c9\ndevid=0x1\n").startswith(f"f.out:{len(lines) + 1}: node header without")


def test_unsafe_names_are_set_aside_with_their_line() -> None:
    fab = IbFabric()
    leaf = fab.switch("LEAF")
    fab.hca("gpu1", "mlx5_0", leaf)
    fab.hca("gpu2", "mlx5_0", leaf)
    text = fab.text().replace('"gpu1 mlx5_0"', '"gpu1,evil mlx5_0"')
    line = next(i for i, ln in enumerate(text.splitlines(), 1) if ln.startswith("Ca"))
    graph = ib.discover(texts={"x": text}).graph
    assert [(n.name, n.fabric) for n in graph.nodes] == [("gpu2", [leaf])]
    assert graph.unplaced == {
        "record 'gpu1,evil mlx5_0'": f"x:{line}: node name 'gpu1,evil' of HCA H-2c5eab0300000080 contains ','; "
        "allowed are letters, digits and . _ - + @ /; HCA set aside"
    }
    with pytest.raises(ProviderError, match=r"^x:1: switch ID 'S-a b' of this record contains whitespace"):
        ib.discover(texts={"x": 'Switch\t2 "S-a b"\t\t# "MF0;LEAF:MQM9790/U1"\n'})


def test_several_outputs_are_merged(small: str) -> None:
    one = ib.discover(texts={"a": small}).graph
    two = ib.discover(texts={"a": small, "b": small}).graph
    assert one == two
    with pytest.raises(ProviderError, match="cannot read ibnetdiscover output"):
        ib.discover("/nonexistent/ibnetdiscover.out")


# ----- accelerator domains ----------------------------------------------------------------------
SMI = """==============NVSMI LOG==============

Driver Version                            : 570.124.06
Attached GPUs                             : 2
GPU 00000008:01:00.0
    Product Name                          : NVIDIA GB200
    Fabric
        State                             : Completed
        Status                            : Success
        CliqueId                          : {clique}
        ClusterUUID                       : {uuid}
GPU 00000009:01:00.0
    Fabric
        State                             : Completed
        CliqueId                          : {clique}
        ClusterUUID                       : {uuid}
"""
UUID_A = "4f0c5b7e-1111-4c6a-9e55-0a1b2c3d4e5f"
UUID_B = "9a8b7c6d-2222-4c6a-9e55-0a1b2c3d4e5f"


def test_domains_from_csv(tmp_path: Path) -> None:
    f = tmp_path / "domains.csv"
    f.write_text("host,domain,subdomain\n# rack 1\ngpu0001,nvl72-a,rack1\ngpu0002, nvl72-a ,\ngpu0001,nvl72-a,rack1\n")
    d = load_domains(f)
    assert {h: (v.domain, v.subdomain) for h, v in d.items()} == {
        "gpu0001": ("nvl72-a", "rack1"),
        "gpu0002": ("nvl72-a", None),
    }
    f.write_text("gpu0001,nvl72-a\ngpu0002,nvl72-b\ngpu0001,nvl72-b\n")
    with pytest.raises(
        ProviderError,
        match=rf"^{re.escape(str(f))}:3: host 'gpu0001' is in domain 'nvl72-b' here but in 'nvl72-a' at line 1",
    ):
        load_domains(f)
    f.write_text("gpu0001\n")
    with pytest.raises(ProviderError, match=r":1: expected 'host,domain\[,subdomain\]'"):
        load_domains(f)


def test_domains_from_concatenated_nvidia_smi(tmp_path: Path) -> None:
    text = (
        "==> smi/gpu0001.txt <==\n"
        + SMI.format(clique=7, uuid=UUID_A)
        + "\n==> smi/gpu0002.txt <==\n"
        + SMI.format(clique=7, uuid=UUID_A)
        + "\n==> smi/gpu0003.txt <==\n"
        + SMI.format(clique=3, uuid=UUID_B)
        + "\n==> smi/h100.txt <==\n"
        + SMI.format(clique="N/A", uuid="N/A")
    )
    f = tmp_path / "smi.txt"
    f.write_text(text)
    d = load_domains(f)
    assert {h: v.domain for h, v in d.items()} == {
        "gpu0001": f"{UUID_A}.7",
        "gpu0002": f"{UUID_A}.7",
        "gpu0003": f"{UUID_B}.3",
    }
    pdsh = "".join(f"gpu0004: {line}\n" for line in SMI.format(clique=1, uuid=UUID_B).splitlines())
    assert parse_domains(pdsh)["gpu0004"].domain == f"{UUID_B}.1"


def test_nvidia_smi_gpus_of_one_host_must_agree() -> None:
    text = "==> gpu0001 <==\n" + SMI.format(clique=7, uuid=UUID_A).replace(f"{UUID_A}\n", f"{UUID_B}\n", 1)
    lines = text.splitlines()
    second = max(i for i, ln in enumerate(lines, 1) if "ClusterUUID" in ln)
    with pytest.raises(ProviderError, match=rf"^smi:{second}: host 'gpu0001' has GPUs in two NVLink domains"):
        parse_domains(text, "smi")


def test_domains_from_pdsh_csv_query() -> None:
    text = f"gpu0001: {UUID_A}, 7\ngpu0001: {UUID_A}, 7\ngpu0002: {UUID_B}, 2\ngpu0003: [N/A], [N/A]\n"
    assert {h: v.domain for h, v in parse_domains(text).items()} == {
        "gpu0001": f"{UUID_A}.7",
        "gpu0002": f"{UUID_B}.2",
    }


def test_domains_make_slurm_blocks(tmp_path: Path) -> None:
    fab = fat_tree(units=2, hosts_per_unit=4, rails=2)
    f = tmp_path / "d.csv"
    f.write_text("".join(f"{h},nvl-{int(h[3:]) % 2}\n" for h in fab.hosts) + "other-host,nvl-9\n")
    result = ib.discover(texts={"x": fab.text()}, domains=f)
    assert any("not in the graph, ignored: other-host" in w for w in result.warnings)
    block = render(result.graph, "slurm-block").content
    assert "Nodes=gpu[0001,0003,0005,0007]" in block and "Nodes=gpu[0002,0004,0006,0008]" in block


# ----- real slurmctld ---------------------------------------------------------------------------
@pytest.mark.slurm
def test_slurmctld_loads_the_example_fabric(ib_dir: Path, slurm_controller_factory: ControllerFactory) -> None:
    graph = ib.discover(ib_dir / "example.out").graph
    ctl = slurm_controller_factory(graph.node_names(), render(graph, "slurm-tree").content)
    shown = ctl.show_topology()
    for node in graph.nodes:
        assert node.name in shown[node.fabric[0]].nodes  # each host in the leaf it is cabled to
    roots = [info for info in shown.values() if info.level == max(i.level for i in shown.values())]
    assert len(roots) == 1 and set(roots[0].nodes) == set(graph.node_names())


@pytest.mark.slurm
def test_slurmctld_loads_a_three_tier_fabric_of_1024_hosts(slurm_controller_factory: ControllerFactory) -> None:
    fab = fat_tree(pods=4, units=8, hosts_per_unit=32, rails=4, spines_per_rail=2, cores_per_rail=2)
    graph = ib.discover(texts={"gen.out": fab.text()}).graph
    ctl = slurm_controller_factory(graph.node_names(), render(graph, "slurm-tree").content)
    shown = ctl.show_topology()
    for node in graph.nodes:
        leaf, spine, core = node.fabric
        assert node.name in shown[leaf].nodes and node.name in shown[spine].nodes
        assert shown[leaf].level == 0 and shown[spine].level == 1 and shown[core].level == 2
    assert set(shown[graph.nodes[0].fabric[-1]].nodes) == set(fab.hosts)


# ----- one odd host or record never reshapes the rest ------------------------------------------
def storage_on_a_spine() -> tuple[IbFabric, str, list[str]]:
    """2 scalable units x 2 leaves (one per rail) under 2 spines, and storage-01 cabled to spine P0-SPINE-R0-0."""
    fab = fat_tree(units=2, hosts_per_unit=4, rails=2, spines_per_rail=1)
    spine = next(sw for sw in fab.spines if "SPINE-R0-0" in fab.nodes[sw].desc)
    fab.hca("storage-01", "mlx5_0", spine)
    leaves = sorted(sw for sw in fab.nodes if "LEAF" in fab.nodes[sw].desc)
    return fab, spine, leaves


def test_a_storage_host_on_a_spine_keeps_the_spine_above_every_leaf() -> None:
    fab, spine, _ = storage_on_a_spine()
    result = ib.discover(texts={"x": fab.text()})
    text = render(result.graph, "slurm-tree").content
    # storage-01 has no place in the tree (no leaf): left out, with a warning
    # one root (spine R0, merged with spine R1) over both scalable units; each SU's two rail leaves are
    # one leaf named by the smaller GUID (SU0: S-...0c0 = LEAF-R0, SU1: S-...340 = LEAF-R0)
    assert text == (
        "SwitchName=S-2c5eab0300000040 Switches=S-2c5eab0300000340,S-2c5eab03000000c0\n"
        "SwitchName=S-2c5eab03000000c0 Nodes=gpu[0001-0004]\n"
        "SwitchName=S-2c5eab0300000340 Nodes=gpu[0005-0008]\n"
    )
    assert result.graph.unplaced == {
        "storage-01": f"cabled only to upper-tier switch(es) {spine} (P0-SPINE-R0-0), not to a leaf; "
        "kept without topology"
    }
    assert (
        f"1 host(s) are cabled to an upper-tier switch (spine or above), not only to leaves; those cables are "
        f"ignored and the tiers of the rest are unchanged: storage-01 -> {spine} (P0-SPINE-R0-0)"
    ) in result.warnings


@pytest.mark.slurm
def test_slurmctld_sees_one_spine_over_both_units_with_a_storage_host(
    slurm_controller_factory: ControllerFactory,
) -> None:
    fab, _, _ = storage_on_a_spine()
    graph = ib.discover(texts={"x": fab.text()}).graph
    ctl = slurm_controller_factory(graph.node_names(), render(graph, "slurm-tree").content)
    shown = ctl.show_topology()
    assert set(shown["S-2c5eab0300000040"].nodes) == {f"gpu{i:04d}" for i in range(1, 9)}
    assert shown["S-2c5eab0300000040"].level == 1


def test_a_host_on_a_core_of_a_three_tier_fabric_changes_no_tier() -> None:
    # the core has 8 spine cables (4 pods x 2 spines) and one host cable: a stray host, not a leaf
    fab = fat_tree(pods=4, units=1, hosts_per_unit=4, rails=2, spines_per_rail=2, cores_per_rail=2)
    clean = {n.name: n.fabric for n in ib.discover(texts={"x": fab.text()}).graph.nodes}
    fab.hca("storage-01", "mlx5_0", sorted(fab.cores)[0])
    graph = ib.discover(texts={"x": fab.text()}).graph
    assert {n.name: n.fabric for n in graph.nodes if n.name != "storage-01"} == clean
    assert {len(path) for path in clean.values()} == {3}


def test_clos_keeps_a_spine_no_host_chose_free_for_the_leaves() -> None:
    # h1 has one cable to leaf L1 and one to spine S1; L1 has more children, so h1 keeps L1
    tree = collapse({"h1": ["L1", "S1"], "h2": ["L1"]}, {"L1": ["S1"], "S1": []})
    assert tree.paths == {"h1": ("L1", "S1"), "h2": ("L1", "S1")}


def two_port_cards() -> IbFabric:
    """gpu-00..03, each one dual-port card (mlx5_0 on leaf A, mlx5_1 on leaf B: one sysimgguid per host)."""
    fab = IbFabric()
    spine = fab.switch("SPINE")
    a, b = fab.switch("LEAF-A"), fab.switch("LEAF-B")
    fab.link(a, spine)
    fab.link(b, spine)
    for i in range(4):
        for port, leaf in enumerate((a, b)):
            fab.hca(f"gpu-{i:02d}", f"mlx5_{port}", leaf, sysimg=f"a0000000000000{i:02d}")
    return fab


def test_a_spoofed_description_sets_aside_both_machines_and_moves_nobody() -> None:
    fab = two_port_cards()
    clean = ib.discover(texts={"x": fab.text()}).graph
    text = fab.text().replace('"gpu-03 mlx5_1"', '"gpu-00 mlx5_1"')  # root on gpu-03 rewrote its description
    graph = ib.discover(texts={"x": text}).graph
    assert graph.node_names() == ["gpu-01", "gpu-02"]
    assert [n for n in graph.nodes] == [n for n in clean.nodes if n.name in ("gpu-01", "gpu-02")]
    assert graph.unplaced == {
        "gpu-00": "HCAs of one machine (sysimgguid 0xa000000000000003) name the hosts gpu-00, gpu-03; 'gpu-00' is "
        "claimed by sysimgguid 0xa000000000000000, 0xa000000000000003; left out",
        "gpu-03": "HCAs of one machine (sysimgguid 0xa000000000000003) name the hosts gpu-00, gpu-03; 'gpu-03' is "
        "claimed by sysimgguid 0xa000000000000003; left out",
    }


def test_a_description_copied_onto_another_dgx_sets_aside_the_name() -> None:
    # DGX-style: every HCA its own sysimgguid (as in Topograph's example.out), so only the copy gives it away
    fab = fat_tree(units=2, hosts_per_unit=2, rails=2, spines_per_rail=1)
    text = fab.text().replace('"gpu0004 mlx5_1"', '"gpu0001 mlx5_1"')
    graph = ib.discover(texts={"x": text}).graph
    assert graph.node_names() == ["gpu0002", "gpu0003", "gpu0004"]
    assert list(graph.unplaced) == ["gpu0001"]
    assert graph.unplaced["gpu0001"].startswith("2 machines claim 'gpu0001 mlx5_1' (sysimgguid 0x")


def test_an_unsafe_or_unreadable_description_sets_aside_that_record_only() -> None:
    fab = fat_tree(units=4, hosts_per_unit=8, rails=4)
    clean = ib.discover(texts={"x": fab.text()}).graph
    text = (
        fab.text().replace('"gpu0003 mlx5_0"', '"gpu0003=x mlx5_0"').replace('"gpu0002 mlx5_1"', '"gpu0002 "x mlx5_1"')
    )
    lines = text.splitlines()
    unsafe = next(i for i, ln in enumerate(lines, 1) if ln.startswith("Ca") and "gpu0003=x" in ln)
    quote = next(i for i, ln in enumerate(lines, 1) if ln.startswith("Ca") and '"x mlx5_1' in ln)
    hca = lines[quote - 1].split('"')[1]
    graph = ib.discover(texts={"f.out": text}).graph
    assert graph.unplaced == {
        "record 'gpu0003=x mlx5_0'": f"f.out:{unsafe}: node name 'gpu0003=x' of HCA "
        f"{lines[unsafe - 1].split(chr(34))[1]} contains '='; allowed are letters, digits and . _ - + @ /; "
        "HCA set aside",
        f"record '{hca}'": f'f.out:{quote}: the node description \'"gpu0002 "x mlx5_1"\' is not readable; '
        "HCA set aside",
    }
    # both hosts keep their other rail: every host keeps a place, in one tree, under a leaf it is cabled to
    assert graph.node_names() == clean.node_names() and all(n.fabric for n in graph.nodes)
    assert_one_tree(graph)
    assert_every_host_under_a_cabled_leaf(fab, graph)
    assert ib.check_upload(text, "f.out") == [f"{k}: {v}" for k, v in sorted(graph.unplaced.items())]


def test_an_upload_with_no_usable_record_is_refused() -> None:
    fab = IbFabric()
    leaf = fab.switch("LEAF")
    fab.hca("gpu1=x", "mlx5_0", leaf)
    fab.hca("gpu2=x", "mlx5_0", leaf)
    with pytest.raises(ProviderError, match=r"^f\.out: no usable record: 2 set aside and no host placed, e\.g\. "):
        ib.check_upload(fab.text(), "f.out")
    with pytest.raises(ProviderError, match=r"^f\.out:1: unrecognized line 'hello'"):
        ib.check_upload("hello\nworld\n", "f.out")
