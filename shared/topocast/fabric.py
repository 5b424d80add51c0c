"""Derived, plain-data views of a graph that renderers share.

The stored graph is per-node paths; schedulers want a switch tree and a set of
accelerator domains. Building these once per render keeps each renderer a
simple walk. Everything here is pure and deterministic (sorted by ID).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field

from topocast.graph import TopologyGraph

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
    t = FabricTree(display=dict(graph.switch_names))
    child_sw: dict[str, set[str]] = {}
    child_nodes: dict[str, list[tuple[str, str]]] = {}
    roots: set[str] = set()
    for node in graph.nodes:
        path = tuple(node.fabric)
        t.node_path[node.name] = path
        key = node.id if node.id is not None else node.name
        t.node_key[node.name] = key
        if not path:
            if no_topology_switch:
                child_nodes.setdefault(NO_TOPOLOGY, []).append((key, node.name))
                roots.add(NO_TOPOLOGY)
                t.parent[NO_TOPOLOGY] = None
            continue
        child_nodes.setdefault(path[0], []).append((key, node.name))
        for i, sw in enumerate(path):
            up = path[i + 1] if i + 1 < len(path) else None
            if sw in t.parent:
                break  # the rest of the path is already known (validated to agree)
            t.parent[sw] = up
            if up is None:
                roots.add(sw)
            else:
                child_sw.setdefault(up, set()).add(sw)
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
