"""How well a job landed: its nodes' spans per fabric level against the best possible on the same graph.

A *level* groups the graph's nodes: the NVLink (accelerator) domain, then each switch tier of the fabric
(tier 0 = the leaf, ``fabric[0]``; tier k = ``fabric[k]``). For a job of N nodes, per level:

* **spanned**: how many groups of that level hold at least one of the job's nodes;
* **minimum**: the fewest groups that *could* hold N nodes on this graph: the smallest k such that the k
  largest groups together hold at least N nodes. Group sizes count **every node of the graph** (not only
  the nodes free now), so the minimum is a property of the fabric, the same for every job of that size.
  Groups differ in size (a leaf with a failed node, a partial rack), which is why this is not ceil(N/size).

A node without a domain is a domain of its own (one node); a node without fabric is its own group at every
tier; a node whose path is shorter than tier k stays in the group of its top switch (its subtree). So nothing
is left out of a count, and a node the fabric does not place can only make a placement look worse.

The **highest tier crossed** is the lowest tier at which the job's nodes share one switch (0: all under one
leaf); None when no switch holds them all (separate fabrics, or a node without fabric). ``best_tier`` is the
same for the best placement: the lowest tier one of whose switches has at least N nodes.

The **score** (docs/score.md) is a weighted mean of the ratios ``minimum / spanned`` (each in (0, 1]):

    score = 1/2 * r_domain + 1/2 * mean(r_tier0, ..., r_tierT)      graph with NVLink domains and fabric
    score = mean(r_tier0, ..., r_tierT)                              fabric only
    score = r_domain                                                 domains only

so the NVLink domain weighs as much as all switch tiers together. It is computed with exact fractions: a
placement that reaches every minimum scores exactly 1.0. Pure: plain data in, plain data out.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from fractions import Fraction
from typing import Any

from topocast.errors import TopocastError
from topocast.model.graph import Node, TopologyGraph
from topocast.model.hostlist import compact_str

__all__ = [
    "DOMAIN_LEVEL",
    "JobNodes",
    "LevelSpan",
    "PlacementScore",
    "format_text",
    "minimum_groups",
    "score_placement",
]

#: the name of the NVLink (accelerator) domain level in every output
DOMAIN_LEVEL = "nvlink-domain"

#: a group key: the domain or switch ID, or ("node", name) for a node that is a group of its own
GroupKey = str | tuple[str, str]


@dataclass(frozen=True)
class JobNodes:
    """A job's allocation as a scheduler reports it: its nodes, and when it started (None: not said)."""

    job: str
    nodes: tuple[str, ...]
    start: datetime | None


@dataclass(frozen=True)
class LevelSpan:
    """One level of a placement: groups the job's nodes span against the fewest that could hold them."""

    level: str  # "nvlink-domain", "tier-0", "tier-1", ...
    spanned: int
    minimum: int
    #: the groups spanned (domain or switch IDs; a node that is a group of its own is shown by its name)
    groups: tuple[str, ...]

    @property
    def ratio(self) -> Fraction:
        return Fraction(self.minimum, self.spanned)

    def to_json(self) -> dict[str, Any]:
        return {
            "level": self.level,
            "spanned": self.spanned,
            "minimum": self.minimum,
            "ratio": float(self.ratio),
            "groups": list(self.groups),
        }


@dataclass(frozen=True)
class PlacementScore:
    nodes: tuple[str, ...]
    #: the job's nodes the graph does not know (listed, never scored)
    unknown: tuple[str, ...]
    levels: tuple[LevelSpan, ...]
    highest_tier_crossed: int | None
    best_tier: int | None
    score: Fraction

    def to_json(self) -> dict[str, Any]:
        return {
            "nodes": len(self.nodes),
            "hostlist": compact_str(self.nodes),
            "unknown": list(self.unknown),
            "levels": [lv.to_json() for lv in self.levels],
            "highest_tier_crossed": self.highest_tier_crossed,
            "best_tier": self.best_tier,
            "score": float(self.score),
        }


def minimum_groups(sizes: Iterable[int], n: int) -> int:
    """The smallest k such that the k largest of ``sizes`` hold at least ``n`` (``n`` <= their sum)."""
    held = 0
    for k, size in enumerate(sorted(sizes, reverse=True), start=1):
        held += size
        if held >= n:
            return k
    raise TopocastError(f"{n} node(s) do not fit in the graph's {held} node(s)")


def _domain_key(node: Node) -> GroupKey:
    return node.accelerator if node.accelerator is not None else ("node", node.name)


def _tier_key(tier: int) -> Callable[[Node], GroupKey]:
    def key(node: Node) -> GroupKey:
        if not node.fabric:
            return ("node", node.name)
        return node.fabric[tier] if tier < len(node.fabric) else node.fabric[-1]

    return key


def _shown(key: GroupKey) -> str:
    return key if isinstance(key, str) else key[1]


def _levels(graph: TopologyGraph) -> list[tuple[str, Callable[[Node], GroupKey]]]:
    levels: list[tuple[str, Callable[[Node], GroupKey]]] = []
    if any(n.accelerator is not None for n in graph.nodes):
        levels.append((DOMAIN_LEVEL, _domain_key))
    depth = max((len(n.fabric) for n in graph.nodes), default=0)
    levels.extend((f"tier-{t}", _tier_key(t)) for t in range(depth))
    return levels


def _weights(names: Sequence[str]) -> list[Fraction]:
    tiers = sum(1 for n in names if n != DOMAIN_LEVEL)
    if DOMAIN_LEVEL in names and tiers:
        return [Fraction(1, 2) if n == DOMAIN_LEVEL else Fraction(1, 2 * tiers) for n in names]
    return [Fraction(1, len(names))] * len(names)


def score_placement(graph: TopologyGraph, job_nodes: Iterable[str]) -> PlacementScore:
    """Score the placement of ``job_nodes`` (names; duplicates count once) on ``graph``."""
    by_name = {n.name: n for n in graph.nodes}
    wanted = sorted(set(job_nodes))
    known = [name for name in wanted if name in by_name]
    unknown = tuple(name for name in wanted if name not in by_name)
    if not wanted:
        raise TopocastError("the job names no nodes")
    if not known:
        sample = ", ".join(unknown[:5])
        raise TopocastError(f"none of the job's {len(wanted)} node(s) is in the graph of cluster "
                            f"{graph.cluster!r} (e.g. {sample})")  # fmt: skip
    levels = _levels(graph)
    if not levels:
        raise TopocastError(f"the graph of cluster {graph.cluster!r} has no fabric and no NVLink domains to score")
    n = len(known)
    spans: list[LevelSpan] = []
    one_switch: list[bool] = []  # per tier: one switch (not a node of its own) holds every job node
    for name, key in levels:
        sizes = Counter(map(key, graph.nodes))
        spanned = sorted({key(by_name[x]) for x in known}, key=_shown)
        spans.append(LevelSpan(name, len(spanned), minimum_groups(sizes.values(), n), tuple(map(_shown, spanned))))
        if name != DOMAIN_LEVEL:
            one_switch.append(len(spanned) == 1 and isinstance(spanned[0], str))
    tiers = [s for s in spans if s.level != DOMAIN_LEVEL]
    crossed = next((i for i, shared in enumerate(one_switch) if shared), None)
    best = next((i for i, s in enumerate(tiers) if s.minimum == 1), None)
    weights = _weights([s.level for s in spans])
    score = sum((w * s.ratio for w, s in zip(weights, spans, strict=True)), Fraction(0))
    return PlacementScore(tuple(known), unknown, tuple(spans), crossed, best, score)


def format_text(result: PlacementScore, graph_label: str = "") -> str:
    """The human report: one line per level, then the highest tier crossed and the score."""
    lines = [
        f"job: {len(result.nodes)} node(s) {compact_str(result.nodes)}"
        + (f"  graph: {graph_label}" if graph_label else "")
    ]
    if result.unknown:
        lines.append(f"not in the graph (not scored): {len(result.unknown)} {compact_str(result.unknown)}")
    lines.append(f"{'level':<14} {'spanned':>7} {'minimum':>7}  groups")
    for lv in result.levels:
        shown = ", ".join(lv.groups[:8]) + (f", ... ({len(lv.groups) - 8} more)" if len(lv.groups) > 8 else "")
        lines.append(f"{lv.level:<14} {lv.spanned:>7} {lv.minimum:>7}  {shown}")
    crossed = (
        "none (no switch holds all of them)"
        if result.highest_tier_crossed is None
        else f"tier-{result.highest_tier_crossed}"
    )
    best = "none" if result.best_tier is None else f"tier-{result.best_tier}"
    lines.append(f"highest tier crossed: {crossed} (best possible: {best})")
    lines.append(f"score: {float(result.score):.3f} (1.0 = the best placement this graph allows)")
    return "\n".join(lines) + "\n"
