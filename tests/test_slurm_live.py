"""Live-update planning, parsing like Slurm, topology.yaml checks, reserved names and BlockSizes inference.

Pure tests (no controller) plus the 22.05 tier's part of the live path: a controller
without dynamic topology must be reconfigured, and a topology.yaml is one clear message.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest
from slurm_fixtures import ControllerFactory, requires_slurm

from topocast.errors import RenderError
from topocast.model.graph import Node, TopologyGraph
from topocast.renderers import render
from topocast.renderers.base import RenderOptions
from topocast.slurm.conffile import parse_conf_text
from topocast.slurm.live import apply_topology, node_spec, placements, plan_live
from topocast.slurm.topofile import parse_topology
from topocast.slurm.topoyaml import parse_topology_yaml
from topocast.slurm.validate import validate_topology_text

TREE = (
    "SwitchName=root Switches=spine[1-2]\nSwitchName=spine1 Switches=leaf[1-2]\nSwitchName=spine2 Switches=leaf3\n"
    "SwitchName=leaf1 Nodes=n[1-4]\nSwitchName=leaf2 Nodes=n[5-8]\nSwitchName=leaf3 Nodes=n[9-12]\n"
)
NEW_VERSION = (26, 5)


# ----- parse like Slurm ---------------------------------------------------------------------------


@pytest.mark.parametrize("sep", ["\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029", "\x0b", "\x0c", "\r"])
def test_only_newline_ends_a_line_and_other_separators_are_refused(sep: str) -> None:
    text = f"SwitchName=s1 Nodes=n[1-4]{sep}SwitchName=s2 Nodes=n[5-8]\n"
    lines = parse_conf_text(text)
    assert len(lines) == 1  # as slurmctld reads it: one record
    topo = parse_topology(text)
    assert not topo.switches and len(topo.errors) == 1
    assert f"U+{ord(sep):04X}" in topo.errors[0] and "topology.conf:1:" in topo.errors[0]


def test_non_ascii_in_a_value_is_refused_but_allowed_in_a_comment() -> None:
    ok = parse_topology("# café switch\nSwitchName=s1 Nodes=n1\n")
    assert not ok.errors and list(ok.switches) == ["s1"]
    bad = parse_topology("SwitchName=s\u00e91 Nodes=n1\n")
    assert bad.errors and "U+00E9" in bad.errors[0]


def test_topology_yaml_checks_each_topology_like_topology_conf() -> None:
    text = (
        "- topology: a\n  cluster_default: true\n  tree:\n    switches:\n"
        "      - switch: r\n        children: s[1-3]\n      - switch: s1\n        nodes: n[1-2]\n"
        "      - switch: s2\n        nodes: n[2-3]\n"
        "- topology: b\n  block:\n    block_sizes: [4, 12]\n    blocks:\n      - block: x\n        nodes: n1\n"
        "- topology: a\n  flat: true\n"
        "- cluster_default: false\n  topology: c\n  flat: true\n"
    )
    result = parse_topology_yaml(text)
    joined = "\n".join(result.errors)
    assert "unknown child switch 's3'" in joined
    assert "n2 is in more than one leaf switch" in joined
    assert "12 is not a power-of-two multiple of 4" in joined and "Invalid BlockSizes" in joined
    assert "topology 'a' is defined twice" in joined
    assert "'topology' must be the first key" in joined


def test_topology_yaml_refuses_aliases_and_control_characters() -> None:
    alias = "- topology: &x a\n  flat: true\n- topology: *x\n  flat: true\n"
    assert "anchors and aliases" in parse_topology_yaml(alias).errors[0]
    ctrl = '- topology: t\n  tree:\n    switches:\n      - switch: "s\\x1e1"\n        nodes: n1\n'
    assert "U+001E" in parse_topology_yaml(ctrl).errors[0]


def test_topology_yaml_nested_past_the_depth_cap_is_one_error_naming_the_line() -> None:
    # a real topology.yaml nests 5 levels (list, topology, tree, switches, switch); 65 is refused before any
    # node is built, however deep the rest goes (the pure-Python composer was quadratic in the depth)
    deep = "- topology: t\n  tree:\n    switches:\n" + "      - " + "[" * 65 + "]" * 65 + "\n"
    assert parse_topology_yaml(deep).errors == ["topology.yaml:4: nested deeper than 64 levels"]
    fine = "- topology: t\n  tree:\n    switches:\n      - switch: s1\n        nodes: n1\n"
    assert parse_topology_yaml(fine).errors == []
    huge = parse_topology_yaml("[" * 2_000_000)
    assert len(huge.errors) == 1 and huge.errors[0].startswith("topology.yaml:1: ")


def test_an_empty_topology_is_the_25_11_fatal_rule() -> None:
    result = parse_topology_yaml("- topology: t\n  block:\n    block_sizes: [4]\n    blocks: []\n")
    assert any("defines no blocks" in e and "25.11" in e for e in result.errors)


# ----- the reserved no-topology name ----------------------------------------------------------------


def test_a_real_switch_named_no_topology_is_refused_in_every_slurm_format() -> None:
    graph = TopologyGraph(
        cluster="c",
        provider="model",
        nodes=[Node(name="a1", fabric=["no-topology", "spine"]), Node(name="a2")],
    )
    for fmt in ("slurm-tree", "slurm-yaml"):
        with pytest.raises(RenderError, match="reserves for nodes without fabric"):
            render(graph, fmt)
    named = TopologyGraph(
        cluster="c",
        provider="model",
        nodes=[Node(name="a1", fabric=["leaf-9"]), Node(name="a2")],
        switch_names={"leaf-9": "no-topology"},
    )
    with pytest.raises(RenderError, match="display name 'no-topology'"):
        render(named, "slurm-tree")


def test_the_pseudo_switch_still_takes_nodes_without_fabric_when_asked() -> None:
    graph = TopologyGraph(cluster="c", provider="model", nodes=[Node(name="a1", fabric=["leaf"]), Node(name="a2")])
    assert render(graph, "slurm-tree").content == "SwitchName=leaf Nodes=a1\n"  # a2 left out by default
    content = render(graph, "slurm-tree", RenderOptions(no_topology_switch=True)).content
    assert content.count("SwitchName=no-topology") == 1 and "SwitchName=no-topology Nodes=a2" in content


# ----- BlockSizes from the prevailing domain size ---------------------------------------------------


def big_cluster() -> TopologyGraph:
    """138 full NVL72 domains plus one with 64 nodes: 10,000 nodes."""
    nodes = []
    for d in range(139):
        size = 64 if d == 70 else 72
        nodes += [Node(name=f"g{d:03d}-{i:02d}", accelerator=f"nvl{d:03d}") for i in range(size)]
    assert len(nodes) == 138 * 72 + 64 == 10000
    return TopologyGraph(cluster="c", provider="model", nodes=nodes)


def block_sizes_line(content: str) -> str:
    return next(line for line in content.splitlines() if line.startswith("BlockSizes="))


def test_one_partial_domain_does_not_lower_the_base_block_size() -> None:
    graph = big_cluster()
    # 139 blocks -> floor(log2(139)) = 7 doublings of the prevailing 72
    assert block_sizes_line(render(graph, "slurm-block").content) == "BlockSizes=72,144,288,576,1152,2304,4608,9216"
    compat = render(graph, "slurm-block", RenderOptions(topograph_compat=True)).content
    assert block_sizes_line(compat) == "BlockSizes=64,128,256,512,1024,2048,4096,8192"


def test_a_tie_goes_to_the_larger_domain_and_yaml_follows_the_same_rule() -> None:
    nodes = [Node(name=f"a{i}", accelerator="d1") for i in range(4)]
    nodes += [Node(name=f"b{i}", accelerator="d2") for i in range(2)]
    graph = TopologyGraph(cluster="c", provider="model", nodes=nodes)
    for_26 = RenderOptions(slurm_version="26.05")  # keeps d2, below the base size
    assert block_sizes_line(render(graph, "slurm-block", for_26).content) == "BlockSizes=4,8"
    yml = render(graph, "slurm-yaml", RenderOptions(cluster_default="block", slurm_version="26.05")).content
    assert "block_sizes:\n        - 4\n        - 8\n" in yml
    # for a Slurm not given (or before 25.05) d2 is left out: one block, one level
    assert block_sizes_line(render(graph, "slurm-block").content) == "BlockSizes=4"


def test_render_cli_topograph_compat_flag(tmp_path: Path) -> None:
    nodes = [Node(name=f"a{i}", accelerator="d1") for i in range(4)] + [Node(name="b0", accelerator="d2")]
    path = tmp_path / "g.json"
    path.write_text(TopologyGraph(cluster="c", provider="model", nodes=nodes).model_dump_json())
    exe = [sys.executable, "-m", "topocast.cli", "render", "--graph", str(path), "-f", "slurm-block"]
    plain = subprocess.run([*exe, "--slurm-version", "26.05"], capture_output=True, text=True, check=True).stdout
    compat = subprocess.run([*exe, "--topograph-compat"], capture_output=True, text=True, check=True).stdout
    assert block_sizes_line(plain) == "BlockSizes=4,8" and block_sizes_line(compat) == "BlockSizes=1,2"


# ----- live planning (pure) ---------------------------------------------------------------------------


def test_placements_are_root_first_paths_blocks_and_every_yaml_topology() -> None:
    assert placements(TREE).specs["n5"] == "default:root:spine1:leaf2"
    assert placements("BlockName=b1 Nodes=n[1-2]\nBlockSizes=2\n").specs == {"n1": "default:b1", "n2": "default:b1"}
    yml = (
        "- topology: tr\n  tree:\n    switches:\n      - switch: r\n        children: s1\n"
        "      - switch: s1\n        nodes: n[1-2]\n"
        "- topology: bl\n  block:\n    block_sizes: [1]\n    blocks:\n      - block: x\n        nodes: n2\n"
        "- topology: f\n  flat: true\n"
    )
    assert placements(yml, "topology.yaml").specs == {"n1": "tr:r:s1", "n2": "tr:r:s1,bl:x"}
    assert node_spec(yml, "n2", "topology.yaml") == "tr:r:s1,bl:x"
    with pytest.raises(Exception, match="in no switch or block"):
        node_spec(yml, "n9", "topology.yaml")


@pytest.mark.parametrize(
    ("new", "reason"),
    [
        (TREE.replace("SwitchName=spine2 Switches=leaf3\n", ""), "would be deleted"),
        (
            TREE.replace("root Switches=spine[1-2]", "root Switches=spine1").replace(
                "spine1 Switches=leaf[1-2]", "spine1 Switches=leaf[1-2],spine2"
            ),
            "moves from root to spine1",
        ),
        (TREE + "SwitchName=top2 Switches=leaf9\nSwitchName=leaf9 Nodes=n13\n", "new root switch 'top2'"),
        (TREE.replace("leaf3 Nodes=n[9-12]", "leaf3 Nodes=n[9-11]"), "leave the topology: n12"),
    ],
)
def test_what_forces_a_reconfigure(new: str, reason: str) -> None:
    plan = plan_live(TREE, new, NEW_VERSION, max_share=1.0)
    assert not plan.live and reason in plan.reason, plan.reason


def test_live_update_hostlists_keep_every_node_of_mixed_padding() -> None:
    # n9 and n010 join leaf2: "n[9-010]" would make scontrol update n9 and n10, and leave n010 behind
    head, mixed = "SwitchName=spine Switches=leaf[1-2]\n", "n9,n010,gpu98,gpu099,gpu100"
    old = f"{head}SwitchName=leaf1 Nodes={mixed}\nSwitchName=leaf2 Nodes=n1\n"
    new = f"{head}SwitchName=leaf1 Nodes=n1\nSwitchName=leaf2 Nodes={mixed}\n"
    plan = plan_live(old, new, NEW_VERSION, max_share=1.0)
    assert plan.live, plan.reason
    assert plan.moves == [("n1", "default:spine:leaf1"), ("gpu[98,099-100],n[9,010]", "default:spine:leaf2")]


def test_added_nodes_and_new_switches_below_a_known_one_go_live_grouped_by_destination() -> None:
    new = TREE.replace("root Switches=spine[1-2]", "root Switches=spine[1-2,9]") + (
        "SwitchName=spine9 Switches=leaf9\nSwitchName=leaf9 Nodes=n[13-14]\n"
    )
    new = new.replace("leaf1 Nodes=n[1-4]", "leaf1 Nodes=n[1-3]").replace(
        "leaf3 Nodes=n[9-12]", "leaf3 Nodes=n[4,9-12]"
    )
    plan = plan_live(TREE, new, NEW_VERSION, max_share=0.5)
    assert plan.live, plan.reason
    assert plan.moves == [("n4", "default:root:spine2:leaf3"), ("n[13-14]", "default:root:spine9:leaf9")]
    assert "1 moved, 2 added" in plan.reason
    assert plan.before == {"n4": "default:root:spine1:leaf1", "n13": None, "n14": None}


def test_share_limit_sends_a_big_move_to_reconfigure() -> None:
    new = TREE.replace("leaf1 Nodes=n[1-4]", "leaf1 Nodes=n1").replace("leaf3 Nodes=n[9-12]", "leaf3 Nodes=n[2-4,9-12]")
    plan = plan_live(TREE, new, (26, 5), max_share=0.1)
    assert not plan.live and "3 of 12 nodes change place (25.0%)" in plan.reason
    assert plan_live(TREE, new, (26, 5), max_share=0.3).live


def test_an_old_controller_always_reconfigures() -> None:
    new = TREE.replace("leaf1 Nodes=n[1-4]", "leaf1 Nodes=n[1-3]").replace(
        "leaf3 Nodes=n[9-12]", "leaf3 Nodes=n[4,9-12]"
    )
    plan = plan_live(TREE, new, (22, 5))
    assert not plan.live and "22.05 has no dynamic topology" in plan.reason and ">= 25.05" in plan.reason


# ----- the 22.05 tier ---------------------------------------------------------------------------------


@pytest.mark.slurm
@requires_slurm
def test_a_controller_without_dynamic_topology_is_reconfigured(slurm_controller_factory: ControllerFactory) -> None:
    nodes = [f"n{i}" for i in range(1, 13)]
    ctl = slurm_controller_factory(nodes, TREE)
    new = TREE.replace("leaf1 Nodes=n[1-4]", "leaf1 Nodes=n[1-3]").replace(
        "leaf3 Nodes=n[9-12]", "leaf3 Nodes=n[4,9-12]"
    )
    data = new.encode()
    result = apply_topology(
        data,
        ctl.topology_path,
        expected_sha256=hashlib.sha256(data).hexdigest(),
        slurm_conf=ctl.conf_path,
        install=ctl.install,
    )
    assert result.ok and result.applied == "reconfigure" and result.reconfigured, result.message
    assert "22.05 has no dynamic topology" in result.why and "by reconfigure because" in result.message
    assert "n4" in ctl.show_topology()["leaf3"].nodes


@pytest.mark.slurm
@requires_slurm
def test_a_topology_yaml_on_22_05_is_one_message_and_is_not_installed(tmp_path: Path) -> None:
    head = (
        "- topology: t\n  cluster_default: true\n  tree:\n    switches:\n      - switch: r\n        children: s[0-39]\n"
    )
    yml = head + "".join(f"      - switch: s{i}\n        nodes: n{i}\n" for i in range(40))
    result = validate_topology_text(yml, source="topology.yaml")
    assert result.ok and not result.controller_checked
    assert len(result.warnings) == 1 and "needs Slurm >= 25.05" in result.warnings[0]
    path = tmp_path / "topology.yaml"
    path.write_text(yml)
    cp = subprocess.run(
        [sys.executable, "-m", "topocast.cli", "validate-slurm", "--topology", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert cp.returncode == 0 and len(cp.stderr.strip().splitlines()) == 1, cp.stderr
    from topocast.slurm.install import install_topology

    dest = tmp_path / "etc" / "topology.yaml"
    dest.parent.mkdir()
    out = install_topology(yml.encode(), dest, expected_sha256=hashlib.sha256(yml.encode()).hexdigest())
    assert out.action == "refused" and "ignores topology.yaml" in out.message and not dest.exists()


def test_yaml_content_for_a_topology_conf_destination_is_refused(tmp_path: Path) -> None:
    from topocast.slurm.install import install_topology

    yml = b"- topology: t\n  flat: true\n"
    dest = tmp_path / "topology.conf"
    out = install_topology(yml, dest, expected_sha256=hashlib.sha256(yml).hexdigest(), validate=False)
    assert out.action == "refused" and "read as topology.conf" in out.message and not dest.exists()


def test_a_wrong_sha256_is_refused_before_planning(tmp_path: Path) -> None:
    dest = tmp_path / "topology.conf"
    dest.write_text(TREE)
    out = apply_topology(b"SwitchName=s Nodes=n1\n", dest, expected_sha256="0" * 64, allow_reconfigure=False)
    assert out.action == "refused" and out.failed_step == "sha256" and dest.read_text() == TREE


def test_node_topology_cli_by_hostname_and_by_instance_id(tmp_path: Path) -> None:
    from cli_runner import invoke

    topo = tmp_path / "topology-tree.conf"
    topo.write_text(TREE)
    graph = tmp_path / "graph.json"
    nodes = [Node(name="n10", id="i-0abc", fabric=["leaf3", "spine2", "root"])]
    graph.write_text(TopologyGraph(cluster="c", provider="aws", nodes=nodes).model_dump_json())
    src = f"file://{topo}"
    by_name = invoke(["node-topology", "--source", src, "--hostname", "n5"])
    assert by_name.exit_code == 0 and by_name.stdout.strip() == "default:root:spine1:leaf2"
    args = ["node-topology", "--source", src, "--instance-id", "i-0abc", "--graph", f"file://{graph}", "--json"]
    by_id = invoke(args)
    assert by_id.exit_code == 0, by_id.output
    assert '"node": "n10"' in by_id.stdout and '"topology": "default:root:spine2:leaf3"' in by_id.stdout
    missing = invoke(["node-topology", "--source", src, "--instance-id", "i-none", "--graph", f"file://{graph}"])
    assert missing.exit_code == 2 and "i-none" in missing.output and "Traceback" not in missing.output
    templ = invoke(
        ["node-topology", "--source", src, "--instance-id", "i-0abc", "--graph", "file:///x/{generation}/g.json"]
    )
    assert templ.exit_code == 2 and "carries no generation" in templ.output


def test_topology_yaml_moves_nodes_of_a_mixed_switch_under_a_synthetic_leaf() -> None:
    nodes = [Node(name=f"a{i}", fabric=["leaf1", "spine1", "core"]) for i in range(4)]
    nodes += [Node(name=f"b{i}", fabric=["spine1", "core"]) for i in range(2)]
    art = render(TopologyGraph(cluster="c", provider="model", nodes=nodes), "slurm-yaml")
    tree = art.content.split("- topology: tree", 1)[1]
    assert "- switch: spine1\n          children: leaf1,spine1.nodes\n" in tree
    assert "- switch: spine1.nodes\n          nodes: b[0-1]\n" in tree
    result = parse_topology_yaml(art.content)
    assert result.errors == []
    assert placements(art.content, "topology.yaml").specs["b0"] == "tree:core:spine1:spine1.nodes"


def test_a_yaml_mapping_is_one_yaml_error_not_a_page_of_key_value_errors() -> None:
    text = "topology: t\ncluster_default: true\ntree:\n  switches:\n    - switch: s\n      nodes: n1\n"
    result = validate_topology_text(text, source="topology.conf", controller=False)
    assert result.kind == "yaml" and len(result.errors) == 1 and "not a mapping" in result.errors[0]
