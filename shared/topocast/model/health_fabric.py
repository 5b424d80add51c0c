"""Fabric outages from two dumps of one fabric: a switch that vanished, a switch that lost every uplink.

A fabric dump (ibnetdiscover) only shows what answers: when a leaf dies, its hosts disappear from the dump
with it, and a leaf whose uplinks are all down shows up as a root of its own. Read naively, that is a new,
smaller topology, and the nodes would leave the scheduler's map. Here it is what it is, an outage, measured
against the last good graph (the previous generation):

* a leaf of ``previous`` that no node of ``current`` sits under: its nodes that ``current`` lost (or holds
  without a fabric) keep their last place, and the leaf gets an ``impaired`` record;
* a node whose path in ``current`` is its old path cut short (``[leaf]`` for ``[leaf, spine]``): it keeps
  its old path, and the link where the path was cut (``leaf>spine``) gets an ``impaired`` record;
* a leaf with fewer uplink cables up than the other leaves under the same parent (a regular fat tree
  cables them alike): a ``degraded`` record on its link up (:func:`uplink_records`).

Records of this kind replace the ones ``previous`` carried from ``source`` (a leaf that answers again
leaves the graph's health); other sources' records stay. Pure.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from datetime import datetime

from topocast.model.graph import Node, TopologyGraph
from topocast.model.health import HealthRecord, carry_forward
from topocast.model.placement import place_nodes

__all__ = ["fabric_outages"]


def uplink_records(graph: TopologyGraph, uplinks: Mapping[str, int], source: str, now: datetime) -> list[HealthRecord]:
    """``degraded`` records for leaves with fewer uplink cables up than their peers (the leaves under the same
    parent in ``graph``; the count most of them have, the larger one on a tie). ``uplinks``: leaf -> cables
    to a higher tier in the current dump. A leaf with none is an outage (:func:`fabric_outages`), not this."""
    parent: dict[str, str] = {}
    for n in graph.nodes:
        if len(n.fabric) > 1:
            parent.setdefault(n.fabric[0], n.fabric[1])
    peers: dict[str, list[str]] = {}
    for leaf, up in sorted(parent.items()):
        peers.setdefault(up, []).append(leaf)
    out: list[HealthRecord] = []
    for up, leaves in sorted(peers.items()):
        counts = Counter(uplinks.get(leaf, 0) for leaf in leaves)
        expected = max(counts, key=lambda c: (counts[c], c))
        for leaf in leaves:
            have = uplinks.get(leaf, 0)
            if 0 < have < expected:
                out.append(HealthRecord(kind="link", id=leaf, peer=up, state="degraded", source=source,
                                        observed_at=now, reason=f"{have} of {expected} uplinks up (its peers have "
                                        f"{expected})"))  # fmt: skip
    return out


def fabric_outages(
    previous: TopologyGraph,
    current: TopologyGraph,
    source: str,
    now: datetime,
    uplinks: Mapping[str, int] | None = None,
) -> TopologyGraph:
    """``current`` with the nodes an outage hid restored and the outage's health records (module doc); with
    ``uplinks`` (leaf -> cables up), leaves short of their peers' count too (:func:`uplink_records`)."""
    before = {n.name: n for n in previous.nodes}
    switches = {sw for n in current.nodes for sw in n.fabric}
    gone_leaves = {n.fabric[0] for n in previous.nodes if n.fabric} - switches
    kept: Counter[str] = Counter()
    cut: dict[tuple[str, str], int] = {}
    nodes: list[Node] = []
    for node in current.nodes:
        old = before.get(node.name)
        if old is not None and old.fabric and not node.fabric and old.fabric[0] in gone_leaves:
            kept[old.fabric[0]] += 1
            nodes.append(node.model_copy(update={"fabric": list(old.fabric)}))
        elif (
            old is not None and 0 < len(node.fabric) < len(old.fabric) and node.fabric == old.fabric[: len(node.fabric)]
        ):
            link = (old.fabric[len(node.fabric) - 1], old.fabric[len(node.fabric)])
            cut[link] = cut.get(link, 0) + 1
            nodes.append(node.model_copy(update={"fabric": list(old.fabric)}))
        else:
            nodes.append(node)
    present = {n.name for n in current.nodes}
    for old in previous.nodes:
        if old.name not in present and old.fabric and old.fabric[0] in gone_leaves:
            kept[old.fabric[0]] += 1
            nodes.append(old)
    found = [
        HealthRecord(kind="switch", id=leaf, state="impaired", source=source, observed_at=now,
                     reason=f"vanished from the fabric dump; {count} node(s) kept at their last place")
        for leaf, count in sorted(kept.items())
    ] + [
        HealthRecord(kind="link", id=low, peer=high, state="impaired", source=source, observed_at=now,
                     reason=f"every uplink down; {count} node(s) kept at their last place")
        for (low, high), count in sorted(cut.items())
    ]  # fmt: skip
    if uplinks is not None:
        cut_links = {(r.id, r.peer) for r in found if r.kind == "link"}
        found += [r for r in uplink_records(current, uplinks, source, now) if (r.id, r.peer) not in cut_links]
    if not found and not any(r.source == source for r in previous.health):
        return current
    mine = carry_forward([r for r in previous.health if r.source == source], found)
    health = [r for r in current.health if r.source != source] + mine
    return place_nodes(
        current.cluster, current.provider, sorted(nodes, key=lambda n: n.name), switch_names=current.switch_names,
        unplaced=current.unplaced, notes=current.notes, health=health,
    )  # fmt: skip
