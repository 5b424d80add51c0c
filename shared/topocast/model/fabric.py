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
from collections.abc import Callable, Hashable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from functools import cached_property
from itertools import chain, groupby, repeat
from operator import attrgetter, itemgetter
from typing import Any, TypeVar, cast

from topocast.model.graph_fields import GraphFields

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


class NodeColumns:
    """The graph's nodes as parallel lists in graph order: per-node work done by C-level passes
    (``zip``, ``map``, ``dict``, ``groupby``) instead of a Python loop over 100k nodes.

    The graph's checks read the plain columns at load time; the derived ones are built on first use.
    """

    def __init__(self, graph: GraphFields) -> None:
        nodes = graph.nodes
        self.names: list[str] = list(map(_name, nodes))
        self.ids: list[str | None] = list(map(_id, nodes))
        self.fabrics: list[list[str]] = list(map(_fabric, nodes))
        self.accelerators: list[str | None] = list(map(_accelerator, nodes))
        self.subdomains: list[str | None] = list(map(_subdomain, nodes))
        # Leaf and domain names repeat across nodes as distinct but equal strings (each parsed from
        # its own place in the JSON); one object per distinct name makes the tuples that hold them
        # (``shapes``) compare by identity.
        self._one: dict[str | None, str | None] = {}

    def _canonical(self, values: Iterable[str | None]) -> list[str | None]:
        listed = list(values)
        return list(map(self._one.setdefault, listed, listed))

    @cached_property
    def leaves(self) -> list[str | None]:
        """``fabric[0]`` of each node, None for a node without fabric."""
        return self._canonical(map(next, map(iter, self.fabrics), repeat(None)))

    @cached_property
    def shapes(self) -> list[tuple[str | None, str | None, str | None]]:
        """(leaf, domain, sub-domain) of each node: nodes of one shape get the same labels."""
        return list(zip(self.leaves, self._canonical(self.accelerators), self._canonical(self.subdomains), strict=True))


def node_columns(graph: GraphFields) -> NodeColumns:
    return shared(graph, "columns", lambda: NodeColumns(graph))


_name, _id, _fabric = attrgetter("name"), attrgetter("id"), attrgetter("fabric")
_accelerator, _subdomain = attrgetter("accelerator"), attrgetter("subdomain")


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
        return chain.from_iterable(map(self.child_nodes.get, self.bfs(), repeat(())))

    def depth(self) -> int:
        return max((len(p) for p in self.node_path.values()), default=0)


def build_tree(graph: GraphFields, no_topology_switch: bool = True) -> FabricTree:
    """Build the switch forest. Nodes with an empty fabric hang under ``no-topology``
    when ``no_topology_switch`` is set, so a tree file still lists every node."""
    if no_topology_switch and not graph.nodes_without_topology():
        no_topology_switch = False  # nothing to hang under it: both trees are this one, built once
    return shared(graph, ("tree", no_topology_switch), lambda: _build_tree(graph, no_topology_switch))


def _build_tree(graph: GraphFields, no_topology_switch: bool) -> FabricTree:
    t = FabricTree(display=dict(graph.switch_names))
    col = node_columns(graph)
    # A validated graph gives every node of a leaf the same path: each leaf's path tuple is built
    # once (nodes then share it) and walked up once. Per-node work is C-level (zip, map, sort).
    keys: list[str] = (
        cast("list[str]", col.ids)
        if None not in col.ids
        else [i if i is not None else n for i, n in zip(col.ids, col.names, strict=True)]
    )
    paths: dict[str | None, tuple[str, ...]] = {
        leaf: tuple(f) for leaf, f in dict(zip(col.leaves, col.fabrics, strict=True)).items()
    }
    paths[None] = ()
    t.node_path = dict(zip(col.names, map(paths.__getitem__, col.leaves), strict=True))
    child_sw: dict[str, set[str]] = {}
    roots: set[str] = set()
    for leaf, path in paths.items():
        if leaf is None:
            continue
        for i, sw in enumerate(path):
            up = path[i + 1] if i + 1 < len(path) else None
            if sw in t.parent:
                break  # the rest of the path is already known (validated to agree)
            t.parent[sw] = up
            if up is None:
                roots.add(sw)
            else:
                child_sw.setdefault(up, set()).add(sw)
    # Siblings by (instance ID, name), Topograph's order. Nodes of one leaf are mostly adjacent in the input, so
    # groupby yields few runs per leaf; runs are keyed by leaf (None: no fabric) in node order.
    runs: dict[str | None, list[tuple[str | None, str, str]]] = {}  # leaf -> (leaf, key, name)
    for leaf, run in groupby(zip(col.leaves, keys, col.names, strict=True), key=_first):
        runs.setdefault(leaf, []).extend(run)
    placed = no_topology_switch and None in runs
    if placed:
        roots.add(NO_TOPOLOGY)
        t.parent[NO_TOPOLOGY] = None
    t.roots = sorted(roots)
    t.child_switches = {k: sorted(v) for k, v in child_sw.items()}
    t.child_nodes = {
        NO_TOPOLOGY if leaf is None else leaf: list(map(_third, sorted(run)))
        for leaf, run in runs.items()
        if leaf is not None or placed
    }
    return t


_first = itemgetter(0)
_third = itemgetter(2)


@dataclass
class Domains:
    """Accelerator domains: domain -> sub-domain (or None) -> node names (sorted)."""

    members: dict[str, dict[str | None, list[str]]] = field(default_factory=dict)

    def nodes(self, domain: str) -> list[str]:
        return sorted(n for sub in self.members[domain].values() for n in sub)

    def has_subdomains(self) -> bool:
        return any(k is not None for subs in self.members.values() for k in subs)


def build_domains(graph: GraphFields) -> Domains:
    return shared(graph, "domains", lambda: _build_domains(graph))


def _build_domains(graph: GraphFields) -> Domains:
    col = node_columns(graph)
    members: dict[str, dict[str | None, list[str]]] = {}
    for (domain, sub), run in groupby(zip(col.accelerators, col.subdomains, col.names, strict=True), key=_first_two):
        if domain is not None:
            members.setdefault(domain, {}).setdefault(sub, []).extend(map(_third, run))
    for subs in members.values():
        for names in subs.values():
            names.sort()
    return Domains(dict(sorted(members.items())))


_first_two = itemgetter(0, 1)
