"""What changed between two graphs: nodes added, removed, moved, domains changed.

The first question after every event is "what moved?". :func:`diff_graphs` answers it
for any two graphs (two files, two generations in the store) as plain data; the CLI
(``topocast diff``), the HTML view (``--previous``) and the pull agent's report use it.

* **added / removed**: node names present in only one graph;
* **moved**: a node in both whose fabric path (its switches) changed, old -> new. Kept closest-first
  (the graph's order) in :class:`Move`; every output (text, ``--json``, the HTML view) prints paths
  **root-first** (``spine-1 > leaf-1``; JSON ``["spine-1", "leaf-1"]``), the way people read a fabric;
* **domain changed**: a node in both whose accelerator domain or sub-domain changed;
* **domains added / removed**: accelerator domains present in only one graph;
* **newly set aside / no longer set aside**: entries of the graphs' ``unplaced`` (what discovery set
  aside, with the reason) only in the new graph (or with another reason there), or only in the old one;
* **health changed**: a fabric object (switch, link, domain, capacity block) whose health state differs
  (no record = ``ok``), with the new reason and the nodes that depend on it (``docs/health.md``).

Pure and deterministic: every list is sorted by node (or domain) name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from topocast.model.graph import Node, TopologyGraph
from topocast.model.health import ObjectRef, dependents
from topocast.model.hostlist import compact_str

__all__ = ["DomainChange", "GraphDiff", "HealthChange", "Move", "diff_graphs", "diff_placements", "format_text"]


@dataclass(frozen=True)
class Move:
    """A node whose switches changed; paths are closest-first, as in the graph (``()`` = no topology)."""

    node: str
    old: tuple[str, ...]
    new: tuple[str, ...]


@dataclass(frozen=True)
class DomainChange:
    """A node whose accelerator domain or sub-domain changed (None = none)."""

    node: str
    old: tuple[str | None, str | None]
    new: tuple[str | None, str | None]


@dataclass(frozen=True)
class HealthChange:
    """A fabric object whose health state changed (``ok`` = no record); ``nodes`` depend on it."""

    object: ObjectRef
    old: str
    new: str
    reason: str
    nodes: list[str]


@dataclass(frozen=True)
class GraphDiff:
    old_nodes: int
    new_nodes: int
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    moved: list[Move] = field(default_factory=list)
    domain_changed: list[DomainChange] = field(default_factory=list)
    domains_added: list[str] = field(default_factory=list)
    domains_removed: list[str] = field(default_factory=list)
    #: name or record -> reason: set aside in the new graph, not (or for another reason) in the old one
    newly_set_aside: dict[str, str] = field(default_factory=dict)
    no_longer_set_aside: list[str] = field(default_factory=list)
    health_changed: list[HealthChange] = field(default_factory=list)

    @property
    def same(self) -> bool:
        """True when nothing differs: no node or domain change of any kind, nothing newly (or no longer) set aside."""
        changes = (self.added, self.removed, self.moved, self.domain_changed, self.domains_added, self.domains_removed,
                   self.newly_set_aside, self.no_longer_set_aside, self.health_changed)  # fmt: skip
        return not any(changes)

    def changed_nodes(self) -> set[str]:
        """Nodes of the new graph that are new or changed (what a view highlights)."""
        return {*self.added, *(m.node for m in self.moved), *(c.node for c in self.domain_changed)}

    def to_json(self) -> dict[str, Any]:
        return {
            "same": self.same,
            "old_nodes": self.old_nodes,
            "new_nodes": self.new_nodes,
            "added": self.added,
            "removed": self.removed,
            # root-first, like the text report (Move keeps the graph's closest-first order)
            "moved": [{"node": m.node, "old": _root_first(m.old), "new": _root_first(m.new)} for m in self.moved],
            "domain_changed": [
                {
                    "node": c.node,
                    "old": {"accelerator": c.old[0], "subdomain": c.old[1]},
                    "new": {"accelerator": c.new[0], "subdomain": c.new[1]},
                }
                for c in self.domain_changed
            ],
            "domains_added": self.domains_added,
            "domains_removed": self.domains_removed,
            "newly_set_aside": self.newly_set_aside,
            "no_longer_set_aside": self.no_longer_set_aside,
            "health_changed": [_health_json(h) for h in self.health_changed],
        }


def _health_json(h: HealthChange) -> dict[str, Any]:
    ref = h.object
    return {"object": str(ref), "kind": ref.kind, "id": ref.id, "peer": ref.peer, "old": h.old, "new": h.new,
            "reason": h.reason, "nodes": h.nodes}  # fmt: skip


def _domain(node: Node) -> tuple[str | None, str | None]:
    return node.accelerator, node.subdomain


def diff_graphs(old: TopologyGraph, new: TopologyGraph) -> GraphDiff:
    """Everything that differs between ``old`` and ``new``, node by node."""
    before = {n.name: n for n in old.nodes}
    after = {n.name: n for n in new.nodes}
    moved: list[Move] = []
    domains: list[DomainChange] = []
    for name in sorted(before.keys() & after.keys()):
        a, b = before[name], after[name]
        if a.fabric != b.fabric:
            moved.append(Move(name, tuple(a.fabric), tuple(b.fabric)))
        if _domain(a) != _domain(b):
            domains.append(DomainChange(name, _domain(a), _domain(b)))
    old_domains = {n.accelerator for n in old.nodes if n.accelerator is not None}
    new_domains = {n.accelerator for n in new.nodes if n.accelerator is not None}
    return GraphDiff(
        old_nodes=len(before),
        new_nodes=len(after),
        added=sorted(after.keys() - before.keys()),
        removed=sorted(before.keys() - after.keys()),
        moved=moved,
        domain_changed=domains,
        domains_added=sorted(new_domains - old_domains),
        domains_removed=sorted(old_domains - new_domains),
        newly_set_aside={k: v for k, v in sorted(new.unplaced.items()) if old.unplaced.get(k) != v},
        no_longer_set_aside=sorted(old.unplaced.keys() - new.unplaced.keys()),
        health_changed=_health_changes(old, new),
    )


def _health_changes(old: TopologyGraph, new: TopologyGraph) -> list[HealthChange]:
    """Objects whose state differs between the graphs, in object order, with the nodes depending on each
    (in the new graph, or in the old one for nodes that left)."""
    before = {r.ref: r for r in old.health}
    after = {r.ref: r for r in new.health}
    changed = sorted(
        ref
        for ref in before.keys() | after.keys()
        if (before[ref].state if ref in before else "ok") != (after[ref].state if ref in after else "ok")
    )
    if not changed:
        return []
    rows = [(n.name, n.fabric, n.accelerator, n.labels) for n in (*new.nodes, *old.nodes)]
    users = dependents(rows, changed)  # in the new graph, or in the old one for nodes that left
    return [
        HealthChange(
            ref,
            before[ref].state if ref in before else "ok",
            after[ref].state if ref in after else "ok",
            after[ref].reason if ref in after else "",
            sorted(set(users[ref])),
        )
        for ref in changed
    ]


def diff_placements(old: Mapping[str, tuple[str, ...]], new: Mapping[str, tuple[str, ...]]) -> GraphDiff:
    """Nodes added, removed and moved between two placements (node -> path, closest first): what a Slurm
    topology file says, which has no domains and nothing set aside."""
    moved = [Move(name, old[name], new[name]) for name in sorted(old.keys() & new.keys()) if old[name] != new[name]]
    return GraphDiff(
        old_nodes=len(old),
        new_nodes=len(new),
        added=sorted(new.keys() - old.keys()),
        removed=sorted(old.keys() - new.keys()),
        moved=moved,
    )


def _root_first(path: tuple[str, ...]) -> list[str]:
    """A closest-first fabric path as every output prints it: root first (``[core-1, spine-2, leaf-7]``)."""
    return list(reversed(path))


def _path(path: tuple[str, ...]) -> str:
    """Root first, the way people read a fabric: ``core-1 > spine-2 > leaf-7``."""
    return " > ".join(_root_first(path)) if path else "(no topology)"


def _dom(value: tuple[str | None, str | None]) -> str:
    domain, sub = value
    if domain is None:
        return "(none)"
    return domain if sub is None else f"{domain}/{sub}"


def format_text(d: GraphDiff, old_label: str = "old", new_label: str = "new", limit: int = 50) -> str:
    """A report for people: hostlists for added/removed nodes, one line per moved node (first ``limit``)."""
    lines = [f"--- {old_label} ({d.old_nodes} nodes)", f"+++ {new_label} ({d.new_nodes} nodes)"]
    if d.same:
        lines.append("no differences")
        return "\n".join(lines) + "\n"

    def listed(what: str, rows: list[str]) -> None:
        lines.append(f"{what}:")
        lines.extend(f"  {r}" for r in rows[:limit])
        if len(rows) > limit:
            lines.append(f"  ... and {len(rows) - limit} more (--json lists all)")

    if d.added:
        lines.append(f"added {len(d.added)} node(s): {compact_str(d.added)}")
    if d.removed:
        lines.append(f"removed {len(d.removed)} node(s): {compact_str(d.removed)}")
    if d.moved:
        listed(f"moved {len(d.moved)} node(s)", [f"{m.node}: {_path(m.old)} -> {_path(m.new)}" for m in d.moved])
    if d.domain_changed:
        rows = [f"{c.node}: {_dom(c.old)} -> {_dom(c.new)}" for c in d.domain_changed]
        listed(f"domain changed for {len(d.domain_changed)} node(s)", rows)
    if d.domains_added:
        lines.append(f"domains added ({len(d.domains_added)}): {', '.join(d.domains_added[:limit])}")
    if d.domains_removed:
        lines.append(f"domains removed ({len(d.domains_removed)}): {', '.join(d.domains_removed[:limit])}")
    if d.newly_set_aside:
        rows = [f"{k}: {v}" for k, v in d.newly_set_aside.items()]
        listed(f"newly set aside {len(d.newly_set_aside)}", rows)
    if d.no_longer_set_aside:
        listed(f"no longer set aside {len(d.no_longer_set_aside)}", d.no_longer_set_aside)
    if d.health_changed:
        rows = [
            f"{h.object}: {h.old} -> {h.new}" + (f" ({h.reason})" if h.reason else "")
            + (f", {len(h.nodes)} node(s): {compact_str(h.nodes)}" if h.nodes else ", no node")
            for h in d.health_changed
        ]  # fmt: skip
        listed(f"health changed for {len(d.health_changed)} object(s)", rows)
    counts = [
        f"{len(d.added)} added",
        f"{len(d.removed)} removed",
        f"{len(d.moved)} moved",
        f"{len(d.domain_changed)} domain changed",
    ]
    if d.newly_set_aside or d.no_longer_set_aside:
        counts += [f"{len(d.newly_set_aside)} newly set aside", f"{len(d.no_longer_set_aside)} no longer set aside"]
    if d.health_changed:
        counts.append(f"{len(d.health_changed)} health changed")
    lines.append("summary: " + ", ".join(counts))
    return "\n".join(lines) + "\n"
