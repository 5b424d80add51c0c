"""Collapse a CLOS / fat-tree fabric into the tree a scheduler needs.

A real fabric is a DAG: every leaf has several spines, every spine several cores,
and a multi-rail host has one cable (HCA, NIC) per rail, often to different
leaves. Slurm's ``topology/tree`` and our graph need a tree: one parent per
switch, one leaf per host. :func:`collapse` builds it bottom-up, one layer at a
time, starting from the hosts:

1. **Children.** Every switch cabled to a member of the current layer gets those
   members as children (switches placed in a lower layer, i.e. chosen by one of
   its members, are ignored as parents: links inside a tier, loops; a switch that
   was only a candidate there stays free to be a parent higher up).
2. **Merge.** Switches with the *same set of children* are one logical switch:
   the redundant spines of a CLOS, the per-rail leaves of a rail-optimized
   scalable unit. The smallest ID names the group (Topograph's ``Merger`` does
   the same). The group's uplinks are the union of its switches' uplinks.
3. **Choose.** A member still cabled to several groups keeps one, in this order:
   the group it has the most cables to (a host's majority of rails), then the
   group with the most children (keeps the layer together), then the smallest
   ID. Every such decision is reported in :attr:`Collapse.choices`.
4. The groups that got at least one child form the next layer; a group whose
   children all chose another group disappears.

It stops when a layer has no uplinks; members without a parent are roots. For
a clean fat tree step 3 never fires and the result is a single tree; for a
degraded one (a missing cable, a half-cabled rail) it still is a tree, and the
choices say where the fabric was not regular. Pure; no I/O.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Choice:
    """A member (host or switch group) that was cabled to several groups and kept one."""

    member: str
    chosen: str
    others: tuple[str, ...]
    #: 1 = a host choosing a leaf, 2 = a leaf group choosing a spine, ...
    layer: int


@dataclass
class Collapse:
    """The tree: each placed host's switch path, closest first, plus what was merged and chosen."""

    paths: dict[str, tuple[str, ...]] = field(default_factory=dict)
    #: switch -> the switch that represents its group (only switches that were merged away)
    merged: dict[str, str] = field(default_factory=dict)
    choices: list[Choice] = field(default_factory=list)
    #: hosts with no cable to any switch
    unplaced: list[str] = field(default_factory=list)

    def group_of(self, switch: str) -> str:
        return self.merged.get(switch, switch)


def collapse(attach: Mapping[str, Iterable[str]], uplinks: Mapping[str, Iterable[str]]) -> Collapse:
    """Collapse a layered fabric into a forest.

    ``attach``: host -> the switches it is cabled to, one entry per cable (so a
    host with 4 HCAs on leaf A and 4 on leaf B lists A four times and B four times).
    ``uplinks``: switch -> upper switches, one entry per cable. Which switch is
    "upper" is the caller's decision (BFS distance from the leaves for
    InfiniBand, NetQ's tier numbers for NetQ).
    """
    result = Collapse()
    # candidates of the members of the current layer: member -> parent switch -> cable count
    cand: dict[str, Counter[str]] = {}
    for host, switches in attach.items():
        c = Counter(switches)
        if c:
            cand[host] = c
        else:
            result.unplaced.append(host)
    result.unplaced.sort()

    host_parent: dict[str, str] = {}
    switch_parent: dict[str, str] = {}
    placed: set[str] = set()
    layer = sorted(cand)
    depth = 0
    while layer:
        depth += 1
        kids: dict[str, set[str]] = defaultdict(set)
        for member in layer:
            for sw in cand[member]:
                if sw not in placed:
                    kids[sw].add(member)
        if not kids:
            break

        by_children: dict[frozenset[str], list[str]] = defaultdict(list)
        for sw, children in kids.items():
            by_children[frozenset(children)].append(sw)
        rep_of: dict[str, str] = {}
        group: dict[str, list[str]] = {}
        size: dict[str, int] = {}
        for members, switches in by_children.items():
            rep = min(switches)
            group[rep] = sorted(switches)
            size[rep] = len(members)
            for sw in switches:
                rep_of[sw] = rep
                if sw != rep:
                    result.merged[sw] = rep

        parent = host_parent if depth == 1 else switch_parent
        chosen: dict[str, int] = defaultdict(int)
        for member in layer:
            weight: Counter[str] = Counter()
            for sw, cables in cand[member].items():
                if sw in rep_of:
                    weight[rep_of[sw]] += cables
            if not weight:
                continue  # every uplink goes sideways or down: this member is a root
            ranked = sorted(weight, key=lambda r: (-weight[r], -size[r], r))
            parent[member] = ranked[0]
            chosen[ranked[0]] += 1
            if len(ranked) > 1:
                result.choices.append(Choice(member, ranked[0], tuple(ranked[1:]), depth))

        # only the groups some member chose are placed: a switch seen here that no member chose (a spine
        # a stray host is cabled to) stays free to be a parent in the next layer
        placed.update(sw for rep in chosen for sw in group[rep])
        layer = sorted(chosen)
        cand = {}
        for rep in layer:
            up: Counter[str] = Counter()
            for sw in group[rep]:
                up.update(uplinks.get(sw, ()))
            cand[rep] = up

    for host, leaf in host_parent.items():
        path = [leaf]
        while path[-1] in switch_parent:
            path.append(switch_parent[path[-1]])
        result.paths[host] = tuple(path)
    return result


def summarize_choices(choices: Iterable[Choice], limit: int = 5) -> list[str]:
    """One warning line per layer: how many members had to choose, with a few examples."""
    by_layer: dict[int, list[Choice]] = defaultdict(list)
    for c in choices:
        by_layer[c.layer].append(c)
    lines = []
    for layer in sorted(by_layer):
        items = sorted(by_layer[layer], key=lambda c: c.member)
        what = "host(s) are cabled to" if layer == 1 else f"tier-{layer - 1} switch group(s) are cabled to"
        shown = "; ".join(f"{c.member} -> {c.chosen} (not {', '.join(c.others)})" for c in items[:limit])
        more = f"; and {len(items) - limit} more" if len(items) > limit else ""
        lines.append(
            f"{len(items)} {what} several {'leaf' if layer == 1 else 'upper'} switch groups with different "
            f"members; each keeps the one it has most cables to: {shown}{more}"
        )
    return lines
