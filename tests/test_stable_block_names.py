"""Block names that do not move: a capacity block that comes or goes changes only its own lines.

Issue 28: block names used to be positions (``blockNNN``, the alphabetical rank of the domain), so
one capacity block whose ID sorts first renamed every block, and ``pull`` reported every node as
moved. Here every expected line is written out by hand.
"""

from __future__ import annotations

import difflib
from typing import Any

import pytest

from topocast.errors import RenderError
from topocast.model.graph import TopologyGraph, graph_from_data
from topocast.renderers import render
from topocast.renderers.base import RenderOptions
from topocast.renderers.blockplan import Block, block_ids, domain_block_name
from topocast.slurm.live import node_changes

#: capacity block -> (leaf switch, first node number); 4 nodes each, the leaves under one spine
BLOCKS = {
    "cr-0b2e": ("nn-leaf2", 8),
    "cr-0c3f": ("nn-leaf3", 12),
    "cr-0d4a": ("nn-leaf4", 16),
    "cr-0e5b": ("nn-leaf5", 20),
}
#: arrives later: its ID sorts before every other one, and so does its leaf
NEW = {"cr-0001": ("nn-leaf0", 0)}


def graph(blocks: dict[str, tuple[str, int]]) -> TopologyGraph:
    nodes: list[dict[str, Any]] = []
    for cb, (leaf, first) in blocks.items():
        for i in range(first, first + 4):
            nodes.append({"name": f"gpu-{i:03d}", "fabric": [leaf, "nn-spine", "nn-core"], "accelerator": cb})
    nodes.append({"name": "login-000", "fabric": []})  # a CPU node without topology
    return graph_from_data({"cluster": "c1", "provider": "test", "nodes": nodes}, "test")


BEFORE = [
    "BlockName=cr-0b2e Nodes=gpu-[008-011]",
    "BlockName=cr-0c3f Nodes=gpu-[012-015]",
    "BlockName=cr-0d4a Nodes=gpu-[016-019]",
    "BlockName=cr-0e5b Nodes=gpu-[020-023]",
    "BlockSizes=4,8,16",  # 4 blocks: floor(log2 4) = 2 levels above the base, as with 5
]


def changed_lines(old: str, new: str) -> list[str]:
    return [line for line in difflib.ndiff(old.splitlines(), new.splitlines()) if line[:2] in ("- ", "+ ")]


def test_a_capacity_block_added_changes_only_its_own_lines() -> None:
    old = render(graph(BLOCKS), "slurm-block").content
    new = render(graph(NEW | BLOCKS), "slurm-block").content
    assert old.splitlines() == BEFORE
    # the new block comes first (its leaf is met first by the fabric walk); nothing else moves
    assert changed_lines(old, new) == ["+ BlockName=cr-0001 Nodes=gpu-[000-003]"]
    assert node_changes(old, new, "topology-block.conf").summary() == "4 added (gpu-[000-003]), 0 removed, 0 moved"


def test_a_capacity_block_expired_changes_only_its_own_lines() -> None:
    old = render(graph(NEW | BLOCKS), "slurm-block").content
    gone = dict(BLOCKS)
    del gone["cr-0c3f"]
    new = render(graph(NEW | gone), "slurm-block").content
    assert changed_lines(old, new) == ["- BlockName=cr-0c3f Nodes=gpu-[012-015]"]
    assert node_changes(old, new, "topology-block.conf").summary() == "0 added, 4 removed (gpu-[012-015]), 0 moved"


def test_positional_names_still_move_every_block_as_topograph_does() -> None:
    """What ``block_names: position`` (and ``topograph_compat``) keep: the old behaviour, for comparison."""
    position = RenderOptions(block_names="position")
    old = render(graph(BLOCKS), "slurm-block", position).content
    new = render(graph(NEW | BLOCKS), "slurm-block", position).content
    assert "16 moved (gpu-008: block001 -> block002" in node_changes(old, new, "topology-block.conf").summary()


def test_the_tree_leaves_out_the_node_without_topology_and_has_one_root() -> None:
    art = render(graph(BLOCKS), "slurm-tree")
    assert art.content.splitlines() == [
        "SwitchName=nn-core Switches=nn-spine",
        "SwitchName=nn-spine Switches=nn-leaf[2-5]",
        "SwitchName=nn-leaf2 Nodes=gpu-[008-011]",
        "SwitchName=nn-leaf3 Nodes=gpu-[012-015]",
        "SwitchName=nn-leaf4 Nodes=gpu-[016-019]",
        "SwitchName=nn-leaf5 Nodes=gpu-[020-023]",
    ]
    assert "login-000" in art.warnings[0] and "left out of the tree" in art.warnings[0]


# ----- names of IDs Slurm should not see as they are ---------------------------------------


@pytest.mark.parametrize(
    ("label", "name"),
    [
        ("cr-6566fbdac956fc944", "cr-6566fbdac956fc944"),  # an AWS capacity reservation: kept as it is
        ("gmf-a.R01", "gmf-a.R01"),
        # printf 'projects/p/zones/z/reservations/r/reservationBlocks/b1' | sha256sum -> ff1b8bab...
        (
            "projects/p/zones/z/reservations/r/reservationBlocks/b1",
            "projects-p-zones-z-reservations-ff1b8bab",
        ),
        ("nvl 7", "nvl-7-cd30405f"),  # printf 'nvl 7' | sha256sum -> cd30405f...
        ("x" * 41, "x" * 31 + "-3164596d"),  # 41 characters: too long; printf 'x%.0s' {1..41} | sha256sum
    ],
)
def test_a_block_name_is_the_domain_id_or_its_safe_cut_and_hash(label: str, name: str) -> None:
    assert domain_block_name(label) == name
    assert len(name) <= 40


def test_split_and_padding_blocks_take_suffixes_a_domain_id_never_has() -> None:
    blocks = [Block("d", ("n1",)), Block("d", ("n2",)), Block(None), Block("e", ("n3",)), Block(None), Block(None)]
    assert block_ids(blocks) == ["d+1", "d+2", "d+2+pad1", "e", "e+pad1", "e+pad2"]


def test_two_ids_that_cut_to_one_name_both_get_longer_digests() -> None:
    lossy = "a/b"  # cut: a-b-<8 hex of sha256('a/b')>
    short = domain_block_name(lossy)
    ids = block_ids([Block(lossy, ("n1",)), Block(short, ("n2",))])
    # the ID that equals the other's cut name keeps it; the cut one takes 16 hex digits
    assert ids == [domain_block_name(lossy, 16), short]
    assert len(set(ids)) == 2


def test_block_name_option_is_checked() -> None:
    with pytest.raises(ValueError, match="block_names"):
        RenderOptions.model_validate({"block_names": "alphabetical"})
    with pytest.raises(RenderError, match="unknown format"):
        render(graph(BLOCKS), "slurm-blocks")


# ----- through the real controllers ---------------------------------------------------------------


def split_and_padded() -> TopologyGraph:
    """Domain 'cb/7' (6 nodes) splits into two 4-node base blocks; 'cr-0a' (3 nodes) takes one, then padding."""
    nodes = [{"name": f"g{i}", "fabric": ["leaf", "spine"], "accelerator": "cb/7"} for i in range(1, 7)]
    nodes += [{"name": f"h{i}", "fabric": ["leaf", "spine"], "accelerator": "cr-0a"} for i in range(1, 4)]
    return graph_from_data({"cluster": "c1", "provider": "test", "nodes": nodes}, "test")


@pytest.mark.slurm_current
def test_derived_split_and_padding_names_load_in_slurm_26(sid_controller_factory: Any) -> None:
    graph = split_and_padded()
    text = render(graph, "slurm-block", RenderOptions(block_sizes=[4, 8], slurm_version="26.05")).content
    # printf 'cb/7' | sha256sum -> 9119603b...: 'cb/7' holds a '/', so its name is cut and hashed
    assert text.splitlines() == [
        "# cb-7-9119603b+1=cb/7",
        "BlockName=cb-7-9119603b+1 Nodes=g[1-4]",
        "# cb-7-9119603b+2=cb/7",
        "BlockName=cb-7-9119603b+2 Nodes=g[5-6]",
        "BlockName=cr-0a Nodes=h[1-3]",
        "BlockName=cr-0a+pad1",
        "BlockSizes=4,8",
    ]
    ctl = sid_controller_factory(graph.node_names(), text, topology_plugin="topology/block")
    assert [x for x in ctl.log_lines() if "error" in x.lower() or "fatal" in x.lower()] == []
    shown = {name: b.nodes for name, b in ctl.show_blocks().items()}
    assert shown["cb-7-9119603b+1"] == ("g1", "g2", "g3", "g4") and shown["cr-0a"] == ("h1", "h2", "h3")


@pytest.mark.slurm
def test_the_tree_without_the_node_lacking_topology_loads_in_slurm_22(slurm_controller_factory: Any) -> None:
    cluster = graph(BLOCKS)
    ctl = slurm_controller_factory(cluster.node_names(), render(cluster, "slurm-tree").content)
    shown = ctl.show_topology()
    assert sorted(sw for sw, info in shown.items() if info.level == 0) == [f"nn-leaf{i}" for i in range(2, 6)]
    assert not any("login-000" in info.nodes for info in shown.values())


# ----- the target Slurm as the functions' setting ---------------------------------------------------


def test_topocast_slurm_version_reaches_the_render_options() -> None:
    from topocast.config import settings_from_env, with_slurm_version
    from topocast.errors import TopocastError

    env = {"TOPOCAST_CLUSTER": "c1", "TOPOCAST_SLURM_VERSION": "24.11"}
    s = settings_from_env(env)
    options = with_slurm_version(s.render_options, s.slurm_version)
    assert options.slurm_release == (24, 11)
    with pytest.raises(TopocastError, match="TOPOCAST_SLURM_VERSION"):
        settings_from_env({**env, "TOPOCAST_SLURM_VERSION": "latest"})
    with pytest.raises(TopocastError, match=r"TOPOCAST_SLURM_VERSION \(24.11\) and TOPOCAST_RENDER_OPTIONS"):
        settings_from_env({**env, "TOPOCAST_RENDER_OPTIONS": '{"slurm_version": "26.05"}'})


def test_an_undersized_block_per_target_release() -> None:
    nodes = [{"name": f"a{i}", "fabric": [], "accelerator": "full"} for i in range(4)]
    nodes += [{"name": f"a{i}", "fabric": [], "accelerator": "full-2"} for i in range(4, 8)]
    nodes += [{"name": "b0", "fabric": [], "accelerator": "partial"}]
    g = graph_from_data({"cluster": "c1", "provider": "test", "nodes": nodes}, "test")
    kept = render(g, "slurm-block", RenderOptions(slurm_version="25.05"))
    assert kept.content.splitlines()[-2:] == ["BlockName=partial Nodes=b0", "BlockSizes=4,8"]
    assert kept.warnings == [
        "block of domain 'partial' (1 node(s): b0) kept below the base block size 4: Slurm 25.05 accepts it"
    ]
    left = render(g, "slurm-block", RenderOptions(slurm_version="24.11"))
    assert "partial" not in left.content and left.content.splitlines()[-1] == "BlockSizes=4,8"
    assert left.warnings == [
        "block of domain 'partial' (1 node(s): b0) left out, its nodes are in no block: it is smaller than the base "
        "block size 4, which Slurm 23.02-24.11 rejects, and the target is Slurm 24.11 (slurm_version 25.05 or later "
        "keeps it)"
    ]
    old = render(g, "slurm-block", RenderOptions(slurm_version="22.05"))
    assert old.warnings[-1] == "Slurm 22.05 does not read topology/block files (23.02 or later does)"
