"""Kueue / KAI levels nest on the actual graph: no level cuts an NVLink domain.

Kueue names a domain at level k by the label values of levels 0..k (KAI the same), so an
accelerator level below a tier that an NVLink domain straddles splits the domain in two. The
renderer leaves such tiers out (``docs/kubernetes.md``, "Kueue and KAI levels"); these tests
write the expected levels and messages out, and check the result with Kueue's own reading
applied to the rendered node labels (``kueue_domain_ids`` below, independent of the renderer).
"""

from __future__ import annotations

import json
from pathlib import Path

from cli_runner import invoke
from hypothesis import given, settings
from hypothesis import strategies as st

from topocast.model.graph import Node, TopologyGraph
from topocast.renderers import render, render_many

TIER = "fabric.topograph.run/tier-"
DOMAIN = "accelerator.topograph.run/domain"
HOSTNAME = "kubernetes.io/hostname"


def graph(*nodes: Node) -> TopologyGraph:
    return TopologyGraph(cluster="c1", provider="test", nodes=list(nodes))


def node(name: str, path: str, domain: str | None = None, **kw: object) -> Node:
    """``path`` is closest-first, ``/``-separated: ``"leaf-1/spine-a/core"``."""
    return Node(name=name, fabric=path.split("/") if path else [], accelerator=domain, **kw)  # type: ignore[arg-type]


def levels(g: TopologyGraph, fmt: str = "kueue") -> list[str]:
    return [level["nodeLabel"] for level in render(g, fmt).objects[0]["spec"]["levels"]]


def kueue_domain_ids(g: TopologyGraph, level_keys: list[str]) -> dict[str, set[tuple[str, ...]]]:
    """Kueue's reading of the rendered labels: NVLink domain -> the IDs Kueue gives its nodes at the
    accelerator level (the tuple of the values of every level down to it). Nodes missing a level's
    label are ignored, as Kueue ignores them."""
    labels: dict[str, dict[str, str]] = json.loads(render(g, "k8s-labels").content)
    upto = level_keys[: level_keys.index(DOMAIN) + 1]
    ids: dict[str, set[tuple[str, ...]]] = {}
    for name, node_labels in labels.items():
        with_host = {**node_labels, HOSTNAME: name}
        if all(k in with_host for k in level_keys):
            ids.setdefault(node_labels[DOMAIN], set()).add(tuple(node_labels[k] for k in upto))
    return ids


def split_domains(g: TopologyGraph, level_keys: list[str]) -> list[str]:
    return sorted(d for d, ids in kueue_domain_ids(g, level_keys).items() if len(ids) > 1)


#: core -> spine-a -> leaf-1, leaf-2; core -> spine-b -> leaf-3. nvl-1 straddles leaf-1 and leaf-2.
STRADDLES_LEAVES = graph(
    node("n1", "leaf-1/spine-a/core", "nvl-1"),
    node("n2", "leaf-2/spine-a/core", "nvl-1"),
    node("n3", "leaf-2/spine-a/core", "nvl-2"),
    node("n4", "leaf-3/spine-b/core", "nvl-3"),
    node("n5", "leaf-3/spine-b/core", "nvl-3"),
)

NESTED = graph(
    node("n1", "leaf-1/spine-a/core", "nvl-1"),
    node("n2", "leaf-1/spine-a/core", "nvl-1"),
    node("n3", "leaf-2/spine-a/core", "nvl-2"),
    node("n4", "leaf-3/spine-b/core", "nvl-3"),
)

#: as STRADDLES_LEAVES, plus nvl-4 across spine-a and spine-b
STRADDLES_SPINES = graph(
    *STRADDLES_LEAVES.nodes,
    node("n6", "leaf-1/spine-a/core", "nvl-4"),
    node("n7", "leaf-3/spine-b/core", "nvl-4"),
)


def test_domains_that_straddle_leaves_drop_the_leaf_level_for_kueue_and_kai() -> None:
    expected = [f"{TIER}2", f"{TIER}1", DOMAIN, HOSTNAME]
    assert levels(STRADDLES_LEAVES, "kueue") == expected
    assert levels(STRADDLES_LEAVES, "kai") == expected
    message = (
        "level fabric.topograph.run/tier-0 left out: 1 of 3 accelerator domains span several "
        "fabric.topograph.run/tier-0 values (nvl-1); {} would split those domains, so the accelerator "
        "level sits directly below fabric.topograph.run/tier-1 and every domain stays whole "
        "(the nodes keep their tier labels)"
    )
    assert render(STRADDLES_LEAVES, "kueue").warnings == [message.format("Kueue")]
    assert render(STRADDLES_LEAVES, "kai").warnings == [message.format("KAI")]
    # the labels themselves are untouched: n1 still says which leaf it is on
    labels = json.loads(render(STRADDLES_LEAVES, "k8s-labels").content)
    assert labels["n1"][f"{TIER}0"] == "leaf-1"


def test_kueues_reading_of_the_old_levels_splits_the_domain_and_of_the_new_ones_does_not() -> None:
    every_tier = [f"{TIER}2", f"{TIER}1", f"{TIER}0", DOMAIN, HOSTNAME]
    assert split_domains(STRADDLES_LEAVES, every_tier) == ["nvl-1"]  # what the Topology used to say
    assert kueue_domain_ids(STRADDLES_LEAVES, levels(STRADDLES_LEAVES)) == {
        "nvl-1": {("core", "spine-a", "nvl-1")},
        "nvl-2": {("core", "spine-a", "nvl-2")},
        "nvl-3": {("core", "spine-b", "nvl-3")},
    }


def test_nested_domains_keep_every_level_and_warn_nothing() -> None:
    art = render(NESTED, "kueue")
    assert levels(NESTED) == [f"{TIER}2", f"{TIER}1", f"{TIER}0", DOMAIN, HOSTNAME]
    assert art.warnings == []
    assert art.content == (
        "---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: Topology\nmetadata:\n  name: topocast\n  labels:\n"
        "    app.kubernetes.io/managed-by: topocast\nspec:\n  levels:\n"
        "  - nodeLabel: fabric.topograph.run/tier-2\n  - nodeLabel: fabric.topograph.run/tier-1\n"
        "  - nodeLabel: fabric.topograph.run/tier-0\n  - nodeLabel: accelerator.topograph.run/domain\n"
        "  - nodeLabel: kubernetes.io/hostname\n"
    )


def test_a_domain_across_spines_drops_both_tiers_below_the_deepest_that_holds_it() -> None:
    assert levels(STRADDLES_SPINES) == [f"{TIER}2", DOMAIN, HOSTNAME]
    assert levels(STRADDLES_SPINES, "kai") == [f"{TIER}2", DOMAIN, HOSTNAME]
    assert render(STRADDLES_SPINES, "kueue").warnings == [
        "levels fabric.topograph.run/tier-1, fabric.topograph.run/tier-0 left out: 1 of 4 accelerator domains "
        "span several fabric.topograph.run/tier-1 values (nvl-4) and 2 of 4 accelerator domains span several "
        "fabric.topograph.run/tier-0 values (nvl-[1,4]); Kueue would split those domains, so the accelerator "
        "level sits directly below fabric.topograph.run/tier-2 and every domain stays whole "
        "(the nodes keep their tier labels)"
    ]
    assert split_domains(STRADDLES_SPINES, levels(STRADDLES_SPINES)) == []


def test_a_domain_across_two_fabrics_puts_the_domain_level_on_top() -> None:
    g = graph(node("n1", "leaf-1/core-1", "nvl-1"), node("n2", "leaf-2/core-2", "nvl-1"))
    assert levels(g) == [DOMAIN, HOSTNAME]
    (warning,) = render(g, "kueue").warnings
    assert warning.startswith("levels fabric.topograph.run/tier-1, fabric.topograph.run/tier-0 left out: ")
    assert "the accelerator level sits at the top and every domain stays whole" in warning
    assert kueue_domain_ids(g, levels(g)) == {"nvl-1": {("nvl-1",)}}


def test_nodes_without_a_domain_or_fabric_do_not_break_the_rule() -> None:
    extra = [
        node("bare", ""),  # nothing known: tier-0=no-topology, no domain
        node("nofabric", "", "nvl-1"),  # domain known, fabric not: no tier labels, Kueue ignores it
        node("booting", "leaf-3/spine-b/core", accelerator_pending=True),  # domain not reported yet
        node("short", "leaf-9/spine-z", "nvl-2"),  # lacks tier-2, Kueue ignores it
    ]
    nested = graph(*NESTED.nodes, *extra)
    assert levels(nested) == [f"{TIER}2", f"{TIER}1", f"{TIER}0", DOMAIN, HOSTNAME]
    assert not any("left out" in w for w in render(nested, "kueue").warnings)
    straddling = graph(*STRADDLES_LEAVES.nodes, *extra)
    assert levels(straddling) == [f"{TIER}2", f"{TIER}1", DOMAIN, HOSTNAME]
    warnings = render(straddling, "kueue").warnings
    assert warnings[0].startswith("level fabric.topograph.run/tier-0 left out: 1 of 3 accelerator domains span")
    assert warnings[1] == (
        "4 of 9 node(s) lack a label for some of the 4 Kueue levels and will be ignored by Kueue: "
        "bare,booting,nofabric,short"
    )
    assert split_domains(straddling, levels(straddling)) == []


def test_a_one_tier_fabric_left_out_stops_calling_bare_nodes_one_domain() -> None:
    g = graph(node("n1", "leaf-1", "nvl-1"), node("n2", "leaf-2", "nvl-1"), node("bare", ""))
    assert levels(g) == [DOMAIN, HOSTNAME]
    warnings = render(g, "kueue").warnings
    assert len(warnings) == 2 and warnings[0].startswith("level fabric.topograph.run/tier-0 left out: ")
    assert warnings[1] == (
        "1 of 3 node(s) lack a label for some of the 2 Kueue levels and will be ignored by Kueue: bare"
    )


def test_render_report_names_the_format(tmp_path: Path) -> None:
    arts = render_many(STRADDLES_LEAVES, ["kueue", "kai"])
    assert [a.format for a in arts] == ["kueue", "kai"]
    path = tmp_path / "g.json"
    path.write_text(STRADDLES_LEAVES.model_dump_json())
    result = invoke(["render", "--graph", path, "-f", "kueue"])
    assert result.exit_code == 0
    assert "topocast: warning: kueue: level fabric.topograph.run/tier-0 left out: 1 of 3" in result.stderr
    assert "Traceback" not in result.output


# Fabric: 2 cores x 2 spines x 2 leaves; every node gets a leaf and one of 4 domains at random.
LEAVES = [f"leaf-{c}{s}{leaf}/spine-{c}{s}/core-{c}" for c in range(2) for s in range(2) for leaf in range(2)]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(LEAVES), st.integers(0, 3)), min_size=1, max_size=14))
def test_kueue_never_splits_a_domain_and_keeps_every_tier_it_can(placed: list[tuple[str, int]]) -> None:
    g = graph(*(node(f"n{i}", path, f"nvl-{d}") for i, (path, d) in enumerate(placed)))
    kept = levels(g)
    assert split_domains(g, kept) == []
    assert levels(g, "kai") == kept
    tiers = [f"{TIER}2", f"{TIER}1", f"{TIER}0"]
    lowest = max((tiers.index(k) for k in kept if k in tiers), default=-1)  # index of the closest kept tier
    if lowest < 2:  # minimal: putting back the next tier down would split a domain
        more = [*tiers[: lowest + 2], DOMAIN, HOSTNAME]
        assert split_domains(g, more) != []
