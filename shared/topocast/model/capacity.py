"""Free capacity per domain right now: free, allocated and drained nodes per NVLink domain, leaf and block,
the largest job that fits in one of them, and how fragmented the free nodes are.

Node states come from the scheduler (:mod:`topocast.slurm.jobs` reads Slurm's, :mod:`topocast.k8s.workloads`
Kubernetes'):
each node is ``free`` (a new job may start on it now), ``allocated`` (running work) or ``drained`` (out of
service: drained, down, failing, in maintenance, not responding). A graph node the scheduler did not report
is ``unknown`` and counts as not free; a reported node the graph does not hold is listed, never dropped.

Fragmentation, in nodes:

* **block** (:func:`block_fragmentation`), exactly as Slurm's ``topology/block`` plugin computes it for
  backfill (``topology_p_get_fragmentation`` in ``src/plugins/topology/block/topology_block.c``): a base
  block is available when at least ``BlockSizes[0]`` of its nodes are available; the sum of the sizes (in
  base blocks) of every unavailable base block and of every unavailable aggregate block (an aligned run of
  ``BlockSizes[j] / BlockSizes[0]`` base blocks holding an unavailable one), times the base block's node
  count, plus the number of unavailable nodes in blocks. All free = 0.
* **tree** (:func:`tree_fragmentation`): Slurm's ``topology/tree`` returns 0; topocast's figure is the same
  idea over switches: the sum of the node counts of every switch (any tier) that has a node not free.

Pure: plain data in, plain data out.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from topocast.errors import TopocastError
from topocast.model.graph import Node, TopologyGraph

__all__ = [
    "STATES",
    "Capacity",
    "DomainCapacity",
    "NodeState",
    "block_fragmentation",
    "cluster_capacity",
    "tree_fragmentation",
]

NodeState = Literal["free", "allocated", "drained", "unknown"]
STATES: tuple[NodeState, ...] = ("free", "allocated", "drained", "unknown")


@dataclass(frozen=True)
class DomainCapacity:
    """One group (an NVLink domain, a leaf switch or a Slurm block) and its nodes by state."""

    level: str  # "nvlink-domain" | "leaf" | "block"
    name: str
    counts: dict[str, int]

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def to_json(self) -> dict[str, Any]:
        return {"level": self.level, "name": self.name, "nodes": self.total, **self.counts}


@dataclass(frozen=True)
class Capacity:
    cluster: str
    totals: dict[str, int]
    domains: list[DomainCapacity]
    #: level -> the most free nodes in one group of that level (the largest job that fits in one)
    largest_free: dict[str, int]
    block_fragmentation: int | None
    tree_fragmentation: int
    #: nodes the scheduler reported that the graph does not hold
    not_in_graph: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster,
            "totals": self.totals,
            "largest_free": self.largest_free,
            "block_fragmentation": self.block_fragmentation,
            "tree_fragmentation": self.tree_fragmentation,
            "not_in_graph": self.not_in_graph,
            "domains": [d.to_json() for d in self.domains],
        }


def _counts(names: Sequence[str], states: Mapping[str, NodeState]) -> dict[str, int]:
    counts: dict[str, int] = dict.fromkeys(STATES, 0)
    for name in names:
        counts[states.get(name, "unknown")] += 1
    return counts


def _groups(nodes: Sequence[Node], key: Callable[[Node], str | None]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for node in nodes:
        k = key(node)
        if k is not None:
            out.setdefault(k, []).append(node.name)
    return dict(sorted(out.items()))


def block_fragmentation(blocks: Sequence[Sequence[str]], block_sizes: Sequence[int], available: set[str]) -> int:
    """Slurm's block fragmentation (module docstring) of ``blocks`` (node names per base block, in
    topology.conf order) with ``block_sizes`` (``BlockSizes``, in nodes) when ``available`` are usable.

    A transcription of the plugin's loop, its edge cases included: an aggregate that does not fit before
    the last block is counted only through the flag a fully available aggregate before it left set.
    """
    if not block_sizes or any(s <= 0 for s in block_sizes):
        raise TopocastError(f"block sizes {list(block_sizes)!r}: expected positive node counts")
    base = block_sizes[0]
    sizes = [s // base for s in block_sizes]  # in base blocks, as the plugin keeps them (sizes[0] == 1)
    count = len(blocks)
    flagged = [False] * len(sizes)
    frag = 0
    for i, nodes in enumerate(blocks):
        if sum(1 for n in nodes if n in available) >= base:
            for j in range(1, len(sizes)):
                if i % sizes[j] == 0 and sizes[j] <= count - i:
                    flagged[j] = True
        else:
            for j in range(len(sizes)):
                if flagged[j] or (i % sizes[j] == 0 and sizes[j] <= count - i):
                    frag += sizes[j]
                    flagged[j] = False
    in_blocks = {n for nodes in blocks for n in nodes}
    return frag * base + len(in_blocks) - len(in_blocks & available)


def tree_fragmentation(graph: TopologyGraph, available: set[str]) -> int:
    """Sum of the node counts of every switch (any tier) with a node that is not available."""
    under: dict[str, int] = {}
    busy: set[str] = set()
    for node in graph.nodes:
        for switch in node.fabric:
            under[switch] = under.get(switch, 0) + 1
            if node.name not in available:
                busy.add(switch)
    return sum(under[s] for s in busy)


def cluster_capacity(
    graph: TopologyGraph,
    states: Mapping[str, NodeState],
    blocks: Sequence[tuple[str, Sequence[str]]] = (),
    block_sizes: Sequence[int] = (),
) -> Capacity:
    """Capacity of ``graph`` with the scheduler's ``states`` (node name -> state).

    ``blocks`` ((name, nodes) in topology.conf order) and ``block_sizes`` are the Slurm block layout
    (``renderers.slurm_block.cluster_layout``); without them there is no block level and no block figure.
    """
    domains: list[DomainCapacity] = []
    largest: dict[str, int] = {}
    levels: list[tuple[str, dict[str, list[str]]]] = [
        ("nvlink-domain", _groups(graph.nodes, lambda n: n.accelerator)),
        ("leaf", _groups(graph.nodes, lambda n: n.fabric[0] if n.fabric else None)),
    ]
    if blocks:
        # padding blocks (no nodes) count for fragmentation, not as a group anyone can use
        levels.append(("block", {name: list(nodes) for name, nodes in blocks if nodes}))
    for level, groups in levels:
        if not groups:
            continue
        rows = [DomainCapacity(level, name, _counts(names, states)) for name, names in groups.items()]
        domains.extend(rows)
        largest[level] = max(r.counts["free"] for r in rows)
    free = {name for name, state in states.items() if state == "free"}
    in_graph = {n.name for n in graph.nodes}
    return Capacity(
        cluster=graph.cluster,
        totals=_counts([n.name for n in graph.nodes], states),
        domains=domains,
        largest_free=largest,
        block_fragmentation=block_fragmentation([b for _, b in blocks], block_sizes, free & in_graph)
        if blocks
        else None,
        tree_fragmentation=tree_fragmentation(graph, free),
        not_in_graph=sorted(states.keys() - in_graph),
    )
