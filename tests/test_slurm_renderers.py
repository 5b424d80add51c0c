"""Behaviour of the Slurm renderers (topology.conf tree/block, topology.yaml, Slinky specs).

Byte compatibility with Topograph is covered by test_conformance_slurm.py; these
tests pin what an operator would notice: hostlists on the lines, the order Slurm
pairs blocks in, skeleton output that slurmctld still accepts, and clear errors
instead of empty or invalid files.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from topocast.errors import NotApplicableError, RenderError
from topocast.model.graph import TopologyGraph, graph_from_data
from topocast.renderers import render
from topocast.renderers.base import RenderOptions
from topocast.renderers.blockplan import compile_node_regexp, expand_template, validate_block_sizes
from topocast.renderers.slurm_specs import node_specs


def make_graph(nodes: list[dict[str, Any]], switch_names: dict[str, str] | None = None) -> TopologyGraph:
    return graph_from_data(
        {"cluster": "c1", "provider": "test", "nodes": nodes, "switch_names": switch_names or {}}, "test"
    )


def n(name: str, *fabric: str, acc: str | None = None, sub: str | None = None, **kw: Any) -> dict[str, Any]:
    return {"name": name, "fabric": list(fabric), "accelerator": acc, "subdomain": sub, **kw}


def opts(**kw: Any) -> RenderOptions:
    return RenderOptions.model_validate(kw)


def lines(text: str) -> list[str]:
    assert text.endswith("\n"), "Slurm files end with a newline"
    return text.splitlines()


@pytest.fixture
def two_leaf() -> TopologyGraph:
    """core -> spine -> leaf1 (gpu001-004, domain nvl-b), leaf2 (gpu005-008, domain nvl-a)."""
    nodes = [n(f"gpu{i:03d}", "leaf1", "spine", "core", acc="nvl-b") for i in range(1, 5)]
    nodes += [n(f"gpu{i:03d}", "leaf2", "spine", "core", acc="nvl-a") for i in range(5, 9)]
    return make_graph(nodes)


# ----- topology/tree ------------------------------------------------------------------


def test_tree_lines_are_breadth_first_with_hostlists(two_leaf: TopologyGraph) -> None:
    art = render(two_leaf, "slurm-tree")
    assert lines(art.content) == [
        "SwitchName=core Switches=spine",
        "SwitchName=spine Switches=leaf[1-2]",
        "SwitchName=leaf1 Nodes=gpu[001-004]",
        "SwitchName=leaf2 Nodes=gpu[005-008]",
    ]
    assert (art.filename, art.node_count, art.warnings) == ("topology-tree.conf", 8, [])


def test_tree_leaves_out_nodes_without_fabric_and_says_so() -> None:
    graph = make_graph([n("a1", "leafA", "rootA"), n("z9", "leafZ", "rootZ"), n("lost1"), n("lost2")])
    art = render(graph, "slurm-tree")
    assert lines(art.content) == [
        "SwitchName=rootA Switches=leafA",
        "SwitchName=rootZ Switches=leafZ",
        "SwitchName=leafA Nodes=a1",
        "SwitchName=leafZ Nodes=z9",
    ]
    assert art.node_count == 2
    assert art.warnings == [
        "2 node(s) have no fabric information and are left out of the tree: lost[1-2] (no_topology_switch "
        "lists them under a pseudo-switch 'no-topology', a second root: then no switch reaches every node)"
    ]


def test_tree_of_nodes_all_without_fabric_is_not_applicable_unless_asked() -> None:
    graph = make_graph([n("lost1"), n("lost2")])
    with pytest.raises(NotApplicableError, match=r"none of its 2 node\(s\) has fabric information"):
        render(graph, "slurm-tree")
    assert lines(render(graph, "slurm-tree", opts(no_topology_switch=True)).content) == [
        "SwitchName=no-topology Nodes=lost[1-2]"
    ]


def test_tree_nodes_without_fabric_go_under_no_topology_among_the_roots_when_asked() -> None:
    graph = make_graph([n("a1", "leafA", "rootA"), n("z9", "leafZ", "rootZ"), n("lost1"), n("lost2")])
    assert lines(render(graph, "slurm-tree", opts(no_topology_switch=True)).content) == [
        "SwitchName=no-topology Nodes=lost[1-2]",
        "SwitchName=rootA Switches=leafA",
        "SwitchName=rootZ Switches=leafZ",
        "SwitchName=leafA Nodes=a1",
        "SwitchName=leafZ Nodes=z9",
    ]
    warning = render(graph, "slurm-tree", opts(topograph_compat=True)).warnings[0]
    assert "no-topology" in warning and "lost[1-2]" in warning


def test_tree_display_names_print_with_id_comment() -> None:
    graph = make_graph([n("node-1", "ocid-leaf", "ocid-root")], {"ocid-leaf": "switch.1.1", "ocid-root": "switch.2.1"})
    assert lines(render(graph, "slurm-tree").content) == [
        "# switch.2.1=ocid-root",
        "SwitchName=switch.2.1 Switches=switch.1.1",
        "# switch.1.1=ocid-leaf",
        "SwitchName=switch.1.1 Nodes=node-1",
    ]


def test_tree_switch_with_both_switches_and_nodes_gets_a_synthetic_leaf() -> None:
    # Topograph prints "SwitchName=spine" twice here, which slurmctld rejects as a duplicate switch.
    graph = make_graph([n("direct1", "spine"), n("gpu1", "leaf", "spine")])
    art = render(graph, "slurm-tree")
    assert lines(art.content) == [
        "SwitchName=spine Switches=leaf,spine.nodes",
        "SwitchName=leaf Nodes=gpu1",
        "SwitchName=spine.nodes Nodes=direct1",
    ]
    assert "synthetic leaf switch 'spine.nodes'" in art.warnings[0]


def test_tree_skeleton_drops_nodes_but_keeps_every_referenced_switch_defined(two_leaf: TopologyGraph) -> None:
    text = render(two_leaf, "slurm-tree", opts(skeleton_only=True)).content
    assert "Nodes=" not in text
    assert lines(text) == [
        "SwitchName=core Switches=spine",
        "SwitchName=spine Switches=leaf[1-2]",
        "SwitchName=leaf1",
        "SwitchName=leaf2",
    ]


def test_tree_four_level_aws_fabric() -> None:
    """AWS reports up to 4 network nodes per instance; the tree keeps all levels, root first."""
    nodes = []
    for i in range(16):
        leaf, l2, l3 = f"nn-leaf{i // 4}", f"nn-l2-{i // 8}", "nn-l3-0"
        nodes.append(n(f"p5-{i:02d}", leaf, l2, l3, "nn-top", acc=f"cb-{i // 8}"))
    art = render(make_graph(nodes), "slurm-tree")
    assert lines(art.content) == [
        "SwitchName=nn-top Switches=nn-l3-0",
        "SwitchName=nn-l3-0 Switches=nn-l2-[0-1]",
        "SwitchName=nn-l2-0 Switches=nn-leaf[0-1]",
        "SwitchName=nn-l2-1 Switches=nn-leaf[2-3]",
        "SwitchName=nn-leaf0 Nodes=p5-[00-03]",
        "SwitchName=nn-leaf1 Nodes=p5-[04-07]",
        "SwitchName=nn-leaf2 Nodes=p5-[08-11]",
        "SwitchName=nn-leaf3 Nodes=p5-[12-15]",
    ]
    block = render(make_graph(nodes), "slurm-block").content
    assert lines(block) == [
        "BlockName=cb-0 Nodes=p5-[00-07]",
        "BlockName=cb-1 Nodes=p5-[08-15]",
        "BlockSizes=8,16",
    ]


def test_tree_refuses_empty_graph() -> None:
    with pytest.raises(RenderError, match=r"cluster 'c1'.*no nodes"):
        render(make_graph([]), "slurm-tree")


def test_tree_refuses_two_switches_with_one_display_name() -> None:
    graph = make_graph([n("a", "l1", "r"), n("b", "l2", "r")], {"l1": "leaf", "l2": "leaf"})
    with pytest.raises(RenderError, match=r"'l1' and 'l2' would both be written as SwitchName=leaf"):
        render(graph, "slurm-tree")


# ----- topology/block -----------------------------------------------------------------


def test_block_order_follows_fabric_and_names_are_the_domains(two_leaf: TopologyGraph) -> None:
    # leaf1 (nvl-b) is met first; each block is named after its domain, with no comment (it would repeat it)
    assert lines(render(two_leaf, "slurm-block").content) == [
        "BlockName=nvl-b Nodes=gpu[001-004]",
        "BlockName=nvl-a Nodes=gpu[005-008]",
        "BlockSizes=4,8",
    ]


def test_block_positional_names_follow_topograph(two_leaf: TopologyGraph) -> None:
    # block_names: position keeps Topograph's alphabetical IDs (nvl-a = block001) in fabric order
    assert lines(render(two_leaf, "slurm-block", opts(block_names="position")).content) == [
        "# block002=nvl-b",
        "BlockName=block002 Nodes=gpu[001-004]",
        "# block001=nvl-a",
        "BlockName=block001 Nodes=gpu[005-008]",
        "BlockSizes=4,8",
    ]


def test_block_nodes_without_domain_never_appear() -> None:
    graph = make_graph([n("g1", "l1", acc="d1"), n("g2", "l1", acc="d1"), n("cpu1", "l1"), n("cpu2")])
    art = render(graph, "slurm-block")
    assert "cpu" not in art.content
    assert art.node_count == 2


def test_block_with_sizes_pads_domains_to_aggregate_boundaries() -> None:
    # Two 3-node domains, sizes 4,8: each domain owns one 4-slot base block -> no padding needed (2*4=8).
    # A third domain makes 12 slots; one empty block pads to 16 so the last 8-aggregate is whole.
    nodes = [n(f"{d}-{i}", acc=d) for d in ("a", "b", "c") for i in range(3)]
    # The padding block is named after the block before it.
    assert lines(render(make_graph(nodes), "slurm-block", opts(block_sizes=[4, 8])).content) == [
        "BlockName=a Nodes=a-[0-2]",
        "BlockName=b Nodes=b-[0-2]",
        "BlockName=c Nodes=c-[0-2]",
        "BlockName=c+pad1",
        "BlockSizes=4,8",
    ]


def test_block_subdomains_never_share_a_base_block_and_sizes_are_inferred() -> None:
    nodes = [n(f"r1-{i}", acc="nvl", sub="rack1") for i in range(4)]
    nodes += [n(f"r2-{i}", acc="nvl", sub="rack2") for i in range(2)]
    assert lines(render(make_graph(nodes), "slurm-block").content) == [
        "BlockName=rack1 Nodes=r1-[0-3]",
        "BlockName=rack2 Nodes=r2-[0-1]",
        "BlockSizes=4,8",
    ]


def test_block_comment_cuts_domain_at_separator() -> None:
    graph = make_graph([n("g1", acc="cb-1/part"), n("g2", acc="cb-2+x")])
    text = render(graph, "slurm-block", opts(topograph_compat=True)).content
    comments = [line for line in lines(text) if line.startswith("#")]
    assert comments == ["# block001=cb-1", "# block002=cb-2"]


def test_block_names_of_ids_slurm_would_misread_are_cut_and_hashed() -> None:
    # '/' and '+' are not kept in a block name: replaced by '-', plus the first 8 hex digits of the
    # ID's sha256 (printf 'cb-1/part' | sha256sum: 8cdc6005...; 'cb-2+x': 25067958...); the comment names the ID
    graph = make_graph([n("g1", acc="cb-1/part"), n("g2", acc="cb-2+x")])
    assert lines(render(graph, "slurm-block").content) == [
        "# cb-1-part-8cdc6005=cb-1/part",
        "BlockName=cb-1-part-8cdc6005 Nodes=g1",
        "# cb-2-x-25067958=cb-2+x",
        "BlockName=cb-2-x-25067958 Nodes=g2",
        "BlockSizes=1,2",
    ]


def test_block_skeleton_keeps_comments_and_sizes(two_leaf: TopologyGraph) -> None:
    assert lines(render(two_leaf, "slurm-block", opts(skeleton_only=True, topograph_compat=True)).content) == [
        "# block002=nvl-b",
        "BlockName=block002",
        "# block001=nvl-a",
        "BlockName=block001",
        "BlockSizes=4,8",
    ]


def test_block_without_domains_is_a_clear_error() -> None:
    graph = make_graph([n("g1", "l1"), n("g2", "l1", accelerator_pending=True)])
    with pytest.raises(RenderError) as err:
        render(graph, "slurm-block")
    msg = str(err.value)
    assert "cluster 'c1'" in msg and "accelerator" in msg and "1 node(s) still wait" in msg and "slurm-tree" in msg


@pytest.mark.parametrize(
    ("sizes", "message"),
    [
        ([2, 6], r"block_sizes\[1\]=6 must be a power-of-two multiple of block_sizes\[0\]=2"),
        ([4, 4], r"block_sizes\[1\]=4 must be a power-of-two multiple"),
        ([8, 4], r"block_sizes\[1\]=4 must be a power-of-two multiple"),
        ([0], r"block_sizes\[0\]=0 is outside 1..65536"),
        ([65536, 131072], r"block_sizes\[1\]=131072 is outside 1..65536"),
        ([2**i for i in range(21)], r"21 entries; Slurm accepts at most 20"),
    ],
)
def test_block_sizes_are_validated_like_slurm(two_leaf: TopologyGraph, sizes: list[int], message: str) -> None:
    with pytest.raises(RenderError, match=message):
        render(two_leaf, "slurm-block", opts(block_sizes=sizes))


def test_valid_block_sizes_pass_validation() -> None:
    assert validate_block_sizes([9, 18, 144]) == [9, 18, 144]


def test_inferred_block_sizes_stay_within_slurm_limits() -> None:
    # 4 single-node domains would infer 1,2,4; with 40000-node domains 2 levels would exceed 65536.
    nodes = [n(f"d{d}-{i}", acc=f"d{d}") for d in range(3) for i in range(40000)]
    art = render(make_graph(nodes), "slurm-block")
    assert lines(art.content)[-1] == "BlockSizes=40000"
    assert "65536" in art.warnings[0]


# ----- blockName ----------------------------------------------------------------------

RACK = {"node_name_regexp": "^srv([0-9]{2})", "format": "rack${1}"}


def test_block_name_renames_blocks_from_node_names() -> None:
    graph = make_graph([n(f"srv{r}0{i}", acc=f"nvl-{r}") for r in (11, 12) for i in range(1, 3)])
    assert lines(render(graph, "slurm-block", opts(block_name=RACK)).content)[:2] == [
        "# rack11=nvl-11",
        "BlockName=rack11 Nodes=srv[1101-1102]",
    ]


@pytest.mark.parametrize(
    ("nodes", "fmt", "message"),
    [
        (["srv1101", "gpu1102"], "rack${1}", r"node 'gpu1102' in block 'd' \(domain 'd'\) does not match"),
        (["srv1101", "srv1201"], "rack${1}", r"nodes in block 'd' produce different block names 'rack11'"),
        (["srv1101"], "${2}", r"produces an empty name for node 'srv1101' in block 'd'"),
        (["srv1101"], "rack ${1}", r"block name 'rack 11' of block 'd' contains whitespace"),
    ],
)
def test_block_name_errors_name_node_and_block(nodes: list[str], fmt: str, message: str) -> None:
    graph = make_graph([n(x, acc="d") for x in nodes])
    with pytest.raises(RenderError, match=message):
        render(graph, "slurm-block", opts(block_name={"node_name_regexp": "^srv([0-9]{2})", "format": fmt}))


def test_block_name_duplicates_across_blocks_are_rejected() -> None:
    graph = make_graph([n("srv1101", acc="a"), n("srv1102", acc="b")])
    with pytest.raises(RenderError, match=r"blocks 'a' and 'b' produce duplicate block name 'rack11'"):
        render(graph, "slurm-block", opts(block_name=RACK))


def test_block_name_bad_regexp_is_reported() -> None:
    with pytest.raises(RenderError, match=r"nodeNameRegexp '\(' is not a valid regular expression"):
        compile_node_regexp("(")


def test_go_style_template_expansion() -> None:
    m = compile_node_regexp(r"^(?<rack>r[0-9]+)-(h[0-9]+)$").search("r7-h3")
    assert m is not None
    assert expand_template("${rack}/${2}", m) == "r7/h3"
    assert expand_template("$rack.$2", m) == "r7.h3"
    assert expand_template("$$1 and $2x", m) == "$1 and "  # $2x names group "2x", which does not exist
    assert expand_template("cost: $", m) == "cost: $"  # malformed reference stays literal


# ----- topology.yaml ------------------------------------------------------------------


def test_yaml_default_has_tree_block_and_flat(two_leaf: TopologyGraph) -> None:
    art = render(two_leaf, "slurm-yaml")
    assert art.filename == "topology.yaml"
    doc = yaml.safe_load(art.content)
    assert [t["topology"] for t in doc] == ["block", "flat", "tree"]
    by_name = {t["topology"]: t for t in doc}
    assert by_name["tree"]["cluster_default"] is True
    assert by_name["block"]["cluster_default"] is False and by_name["flat"] == {
        "topology": "flat",
        "cluster_default": False,
        "flat": True,
    }
    assert by_name["tree"]["tree"]["switches"][0] == {"switch": "core", "children": "spine"}
    assert by_name["block"]["block"] == {
        "block_sizes": [4, 8],
        "blocks": [{"block": "nvl-b", "nodes": "gpu[001-004]"}, {"block": "nvl-a", "nodes": "gpu[005-008]"}],
    }


def test_yaml_default_without_domains_has_no_block_topology() -> None:
    graph = make_graph([n("g1", "l1")])
    assert [t["topology"] for t in yaml.safe_load(render(graph, "slurm-yaml").content)] == ["flat", "tree"]
    with pytest.raises(RenderError, match=r"cluster_default 'block' is not one of the topologies rendered"):
        render(graph, "slurm-yaml", opts(cluster_default="block"))


def test_yaml_cluster_default_option(two_leaf: TopologyGraph) -> None:
    doc = yaml.safe_load(render(two_leaf, "slurm-yaml", opts(cluster_default="block")).content)
    assert [t["topology"] for t in doc if t["cluster_default"]] == ["block"]


def test_yaml_numeric_names_are_quoted_so_they_stay_strings() -> None:
    graph = make_graph([n("1101", "sw1"), n("1102", "sw1"), n("2201", "sw2")])
    text = render(graph, "slurm-yaml").content
    assert "nodes: '[1101-1102]'" in text and 'nodes: "2201"' in text
    tree = next(t for t in yaml.safe_load(text) if t["topology"] == "tree")
    assert tree["tree"]["switches"] == [{"switch": "sw1", "nodes": "[1101-1102]"}, {"switch": "sw2", "nodes": "2201"}]


def test_yaml_partitions_prune_tree_and_warn_about_unknown_nodes(two_leaf: TopologyGraph) -> None:
    topologies = {
        "p1": {"plugin": "topology/tree", "nodes": ["gpu[001-002]", "ghost7"]},
        "p2": {"plugin": "tree", "nodes": ["ghost[1-2]"]},
    }
    art = render(two_leaf, "slurm-yaml", opts(topologies=topologies))
    assert yaml.safe_load(art.content) == [
        {
            "topology": "p1",
            "cluster_default": False,
            "tree": {
                "switches": [
                    {"switch": "core", "children": "spine"},
                    {"switch": "spine", "children": "leaf1"},
                    {"switch": "leaf1", "nodes": "gpu[001-002]"},
                ]
            },
        },
        {"topology": "p2", "cluster_default": False, "flat": True},
    ]
    assert any("'p1'" in w and "ghost7" in w for w in art.warnings)
    assert any("'p2'" in w and "ghost[1-2]" in w for w in art.warnings)


def test_yaml_partition_block_uses_own_sizes_and_skeleton_drops_nodes(two_leaf: TopologyGraph) -> None:
    topologies = {"gpu": {"plugin": "block", "nodes": ["gpu[001-008]"], "block_sizes": [2, 4]}}
    text = render(two_leaf, "slurm-yaml", opts(topologies=topologies, skeleton_only=True)).content
    assert "nodes" not in text
    assert yaml.safe_load(text)[0]["block"] == {
        "block_sizes": [2, 4],
        # each 4-node domain fills two 2-node base blocks: its name and +1, +2
        "blocks": [{"block": "nvl-a+1"}, {"block": "nvl-a+2"}, {"block": "nvl-b+1"}, {"block": "nvl-b+2"}],
    }


def test_yaml_partition_errors() -> None:
    graph = make_graph([n("g1", "l1")])
    with pytest.raises(RenderError, match=r"topology 'p' specifies no nodes"):
        render(graph, "slurm-yaml", opts(topologies={"p": {"plugin": "tree", "nodes": []}}))
    with pytest.raises(RenderError, match=r"topology 'p': nodes: .*unbalanced"):
        render(graph, "slurm-yaml", opts(topologies={"p": {"plugin": "tree", "nodes": ["g[1-2"]}}))
    with pytest.raises(RenderError, match=r"no nodes"):
        render(make_graph([]), "slurm-yaml")


# ----- Slinky node specs --------------------------------------------------------------


def test_specs_tree_block_and_yaml(two_leaf: TopologyGraph) -> None:
    graph = make_graph([*two_leaf.model_dump()["nodes"], n("cpu1")], {"leaf1": "L1"})
    assert node_specs(graph, opts(), "slurm-tree")["gpu001"] == "default:core:spine:L1"
    assert node_specs(graph, opts(), "slurm-tree")["cpu1"] == "default:no-topology"
    block = node_specs(graph, opts(), "slurm-block")
    assert (block["gpu001"], block["gpu005"], block["cpu1"]) == ("default:nvl-b", "default:nvl-a", "")
    topologies = {
        "a": {"plugin": "tree", "nodes": ["gpu001"]},
        "b": {"plugin": "block", "nodes": ["gpu[001,005]"]},
        "c": {"plugin": "flat"},
    }
    specs = node_specs(graph, opts(topologies=topologies), "slurm-yaml")
    assert specs["gpu001"] == "a:core:spine:leaf1,b:nvl-b"
    assert specs["gpu005"] == "b:nvl-a"
    assert specs["gpu002"] == "" and specs["cpu1"] == ""
    assert set(specs) == {node.name for node in graph.nodes}


def test_specs_unknown_content() -> None:
    with pytest.raises(RenderError, match=r"unknown Slurm content 'slurm-ring'"):
        node_specs(make_graph([n("g1")]), opts(), "slurm-ring")
