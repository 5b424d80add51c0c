"""Derived, plain-data views of a graph that renderers share.

The stored graph is per-node paths; schedulers want a switch tree and a set of
accelerator domains. Building these once per render keeps each renderer a
simple walk. Everything here is pure and deterministic (sorted by ID).

Several formats rendered together need the same views (the tree for slurm-tree,
slurm-yaml, volcano and html; the domains for slurm-block, slurm-yaml and html).
Inside :func:`shared_views` each view is built once per graph and handed to every
renderer that asks (:func:`shared`); the views are read-only by convention.
Outside it every call builds afresh, so a renderer called alone is unchanged.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, TypeVar

from topocast.graph import TopologyGraph

T = TypeVar("T")

#: (id(graph), key) -> (graph, value); the graph is kept so its id cannot be reused meanwhile.
_SHARED: ContextVar[dict[tuple[int, Hashable], tuple[object, Any]] | None] = ContextVar("_SHARED", default=None)


@contextmanager
def shared_views() -> Iterator[None]:
    """Within the block, :func:`shared` computes each (graph, key) once (one render call's lifetime)."""
    token = _SHARED.set({} if _SHARED.get() is None else _SHARED.get())
    try:
        yield
    finally:
        _SHARED.reset(token)


def shared(graph: object, key: Hashable, build: Callable[[], T]) -> T:
    """``build()``, or inside :func:`shared_views` the value already built for ``(graph, key)``.

    ``key`` must name everything besides the graph that the value depends on (options included).
    """
    memo = _SHARED.get()
    if memo is None:
        return build()
    slot = (id(graph), key)
    hit = memo.get(slot)
    if hit is None:
        hit = memo[slot] = (graph, build())
    return hit[1]


#: Pseudo-switch that holds nodes without topology in tree output (Topograph's convention).
NO_TOPOLOGY = "no-topology"


@dataclass
class FabricTree:
    """The switch forest: ``roots`` -> ``switches[id]`` -> child switches and attached nodes."""

    roots: list[str] = field(default_factory=list)
    child_switches: dict[str, list[str]] = field(default_factory=dict)
    child_nodes: dict[str, list[str]] = field(default_factory=dict)
    parent: dict[str, str | None] = field(default_factory=dict)
    #: node name -> switch IDs closest-first (empty for nodes without topology)
    node_path: dict[str, tuple[str, ...]] = field(default_factory=dict)
    #: node name -> instance ID (sort key Topograph uses among siblings)
    node_key: dict[str, str] = field(default_factory=dict)
    display: dict[str, str] = field(default_factory=dict)

    def name_of(self, switch: str) -> str:
        return self.display.get(switch, switch)

    def bfs(self) -> Iterator[str]:
        """Switches breadth-first, roots and children in sorted-ID order."""
        queue = deque(self.roots)
        while queue:
            sw = queue.popleft()
            yield sw
            queue.extend(self.child_switches.get(sw, ()))

    def bfs_nodes(self) -> Iterator[str]:
        """Nodes in the order a BFS over the tree meets them (siblings by instance ID)."""
        for sw in self.bfs():
            yield from self.child_nodes.get(sw, ())

    def depth(self) -> int:
        return max((len(p) for p in self.node_path.values()), default=0)


def build_tree(graph: TopologyGraph, no_topology_switch: bool = True) -> FabricTree:
    """Build the switch forest. Nodes with an empty fabric hang under ``no-topology``
    when ``no_topology_switch`` is set, so a tree file still lists every node."""
    return shared(graph, ("tree", no_topology_switch), lambda: _build_tree(graph, no_topology_switch))


def _build_tree(graph: TopologyGraph, no_topology_switch: bool) -> FabricTree:
    t = FabricTree(display=dict(graph.switch_names))
    child_sw: dict[str, set[str]] = {}
    child_nodes: dict[str, list[tuple[str, str]]] = {}
    roots: set[str] = set()
    # A validated graph gives every node of a leaf the same path: build each path tuple once
    # (nodes then share it) and walk it up only the first time its leaf is seen.
    by_leaf: dict[str, tuple[str, ...]] = {}
    node_path = t.node_path
    node_key = t.node_key
    empty: tuple[str, ...] = ()
    for node in graph.nodes:
        fabric = node.fabric
        name = node.name
        key = node.id if node.id is not None else name
        node_key[name] = key
        if not fabric:
            node_path[name] = empty
            if no_topology_switch:
                child_nodes.setdefault(NO_TOPOLOGY, []).append((key, name))
            continue
        leaf = fabric[0]
        path = by_leaf.get(leaf)
        if path is None:
            path = by_leaf[leaf] = tuple(fabric)
            child_nodes[leaf] = []
            for i, sw in enumerate(path):
                up = path[i + 1] if i + 1 < len(path) else None
                if sw in t.parent:
                    break  # the rest of the path is already known (validated to agree)
                t.parent[sw] = up
                if up is None:
                    roots.add(sw)
                else:
                    child_sw.setdefault(up, set()).add(sw)
        node_path[name] = path
        child_nodes[leaf].append((key, name))
    if NO_TOPOLOGY in child_nodes:
        roots.add(NO_TOPOLOGY)
        t.parent[NO_TOPOLOGY] = None
    t.roots = sorted(roots)
    t.child_switches = {k: sorted(v) for k, v in child_sw.items()}
    t.child_nodes = {k: [n for _, n in sorted(v)] for k, v in child_nodes.items()}
    return t


@dataclass
class Domains:
    """Accelerator domains: domain -> sub-domain (or None) -> node names (sorted)."""

    members: dict[str, dict[str | None, list[str]]] = field(default_factory=dict)

    def nodes(self, domain: str) -> list[str]:
        return sorted(n for sub in self.members[domain].values() for n in sub)

    def has_subdomains(self) -> bool:
        return any(k is not None for subs in self.members.values() for k in subs)


def build_domains(graph: TopologyGraph) -> Domains:
    return shared(graph, "domains", lambda: _build_domains(graph))


def _build_domains(graph: TopologyGraph) -> Domains:
    d = Domains()
    for node in graph.nodes:
        if node.accelerator is None:
            continue
        d.members.setdefault(node.accelerator, {}).setdefault(node.subdomain, []).append(node.name)
    for subs in d.members.values():
        for names in subs.values():
            names.sort()
    d.members = dict(sorted(d.members.items()))
    return d
