"""topocast score's numbers: spans and minima per level worked out by hand on small graphs, the score formula,
and the test of meaning (a topology-aware placement scores strictly better than a random one; the best is 1.0)."""

from __future__ import annotations

import random
from fractions import Fraction

import pytest

from topocast.errors import TopocastError
from topocast.model.fabric import build_tree
from topocast.model.graph import TopologyGraph
from topocast.model.placement_score import minimum_groups, score_placement
from topocast.model.synth import synthetic_data


def node(name: str, fabric: list[str], acc: str | None = None) -> dict[str, object]:
    return {"name": name, "fabric": fabric, "accelerator": acc}


def hand_graph() -> TopologyGraph:
    """leaf-1: a1-a4, leaf-2: b1-b4 (both under spine-1), leaf-3: c1-c2 (spine-2); core-1 above both spines.
    NVLink: nvl-1 = a1-a4, b1, b2 (6 nodes); nvl-2 = b3, b4, c1, c2 (4 nodes)."""
    nodes = [node(f"a{i}", ["leaf-1", "spine-1", "core-1"], "nvl-1") for i in range(1, 5)]
    nodes += [node(f"b{i}", ["leaf-2", "spine-1", "core-1"], "nvl-1" if i <= 2 else "nvl-2") for i in range(1, 5)]
    nodes += [node(f"c{i}", ["leaf-3", "spine-2", "core-1"], "nvl-2") for i in range(1, 3)]
    return TopologyGraph.model_validate({"cluster": "c1", "provider": "model", "nodes": nodes})


def spans(result) -> dict[str, tuple[int, int]]:  # type: ignore[no-untyped-def]
    return {lv.level: (lv.spanned, lv.minimum) for lv in result.levels}


def test_a_job_across_two_leaves_of_one_spine() -> None:
    r = score_placement(hand_graph(), ["a1", "a2", "b1"])
    # 3 nodes: one NVLink domain (nvl-1 has 6), two leaves where leaf-1 alone (4) would do, one spine, one core
    assert spans(r) == {"nvlink-domain": (1, 1), "tier-0": (2, 1), "tier-1": (1, 1), "tier-2": (1, 1)}
    assert r.highest_tier_crossed == 1 and r.best_tier == 0
    # 1/2 * 1 + 1/2 * mean(1/2, 1, 1) = 1/2 + 5/12 = 11/12
    assert r.score == Fraction(11, 12)


def test_a_job_across_spines_and_domains() -> None:
    r = score_placement(hand_graph(), ["a1", "a2", "a3", "a4", "c1"])
    # 5 nodes: nvl-1 (6) could hold them (1), they span 2; leaves: 4+4 >= 5 so 2, spanned 2;
    # spine-1 (8) could hold them, they span 2 spines; the core holds all
    assert spans(r) == {"nvlink-domain": (2, 1), "tier-0": (2, 2), "tier-1": (2, 1), "tier-2": (1, 1)}
    assert r.highest_tier_crossed == 2 and r.best_tier == 1
    # 1/2 * 1/2 + 1/2 * mean(1, 1/2, 1) = 1/4 + 5/12 = 2/3
    assert r.score == Fraction(2, 3)


def test_the_best_placement_scores_exactly_one() -> None:
    r = score_placement(hand_graph(), ["a1", "a2", "a3", "a4", "b1", "b2"])
    # 6 nodes: nvl-1 exactly; two leaves (4+4 >= 6, 4 < 6); spine-1
    assert spans(r) == {"nvlink-domain": (1, 1), "tier-0": (2, 2), "tier-1": (1, 1), "tier-2": (1, 1)}
    assert r.score == 1 and float(r.score) == 1.0


def test_minimum_counts_the_largest_groups_not_an_average_size() -> None:
    assert minimum_groups([5, 1, 1, 1], 6) == 2  # ceil(6 / 2 nodes per leaf on average) would say 3
    assert minimum_groups([1, 3, 3, 3], 7) == 3
    assert minimum_groups([4, 4, 2], 9) == 3
    assert minimum_groups([8], 8) == 1


def test_uneven_leaves_minimum_on_a_graph() -> None:
    # leaf-big holds 5 nodes, three leaves hold 1: a 6-node job needs 2 leaves at best
    nodes = [node(f"n{i}", ["leaf-big", "spine"]) for i in range(5)]
    nodes += [node(f"m{i}", [f"leaf-{i}", "spine"]) for i in range(3)]
    g = TopologyGraph.model_validate({"cluster": "c", "provider": "model", "nodes": nodes})
    r = score_placement(g, ["n0", "n1", "n2", "n3", "m0", "m1"])
    assert spans(r) == {"tier-0": (3, 2), "tier-1": (1, 1)}
    assert r.score == Fraction(1, 2) * (Fraction(2, 3) + 1)  # no domains: the mean of the tiers


def test_nodes_without_fabric_or_domain_are_groups_of_their_own() -> None:
    nodes = [node("a", ["leaf-1"], "d1"), node("b", ["leaf-1"], "d1"), node("x", [], None)]
    g = TopologyGraph.model_validate({"cluster": "c", "provider": "model", "nodes": nodes})
    r = score_placement(g, ["a", "x"])
    assert spans(r) == {"nvlink-domain": (2, 1), "tier-0": (2, 1)}
    assert r.highest_tier_crossed is None  # no switch holds both
    alone = score_placement(g, ["x"])
    assert alone.highest_tier_crossed is None and alone.score == 1


def test_unknown_nodes_are_listed_not_scored_and_none_known_is_an_error() -> None:
    r = score_placement(hand_graph(), ["a1", "zz9", "a1"])
    assert r.nodes == ("a1",) and r.unknown == ("zz9",)
    with pytest.raises(TopocastError, match="none of the job's 2 node"):
        score_placement(hand_graph(), ["x1", "x2"])


def _compact(graph: TopologyGraph, free: list[str], n: int) -> list[str]:
    """A topology-aware policy: the first n free nodes in the fabric's breadth-first order."""
    free_set = set(free)
    return [x for x in build_tree(graph).bfs_nodes() if x in free_set][:n]


@pytest.mark.parametrize("n", [4, 18, 40, 72, 144])
def test_topology_aware_placement_beats_random_and_the_optimum_is_one(n: int) -> None:
    g = TopologyGraph.model_validate(synthetic_data(576, levels=3, nodes_per_leaf=18, fanout=4, domain_size=72))
    names = [x.name for x in g.nodes]
    # on an empty cluster, packing in fabric order reaches every minimum: the optimum
    assert score_placement(g, _compact(g, names, n)).score == 1
    for seed in range(5):
        rng = random.Random(seed)
        busy = set(rng.sample(names, 100))  # a cluster already partly used
        free = [x for x in names if x not in busy]
        aware = score_placement(g, _compact(g, free, n)).score
        scattered = score_placement(g, rng.sample(free, n)).score
        assert aware > scattered, (n, seed, float(aware), float(scattered))
