"""The graph's consistency rules, checked once per graph at C speed when the graph is good.

Rules (each rejection names the node or switch):

* node, switch and domain names are safe (:mod:`topocast.model.names`);
* node names and instance IDs are unique; no name is both a node and a switch;
* no switch appears twice in one node's path; a sub-domain needs a domain;
* the paths form a tree: a switch sits at one height under one parent everywhere;
* what was set aside (``unplaced``) and the per-node ``notes`` are printable text of bounded length (they
  reach reports and views).

:func:`check_graph` first runs set-level checks over the *distinct* values (100k nodes
share ~6k switch paths and ~1.4k domains), which pass for every good graph. Only if one
fails does :func:`_find_error` walk the nodes one by one, in order, to raise the same
precise error message a per-node check would.
"""

from __future__ import annotations

from collections.abc import Mapping
from itertools import pairwise

from topocast.model.fabric import node_columns
from topocast.model.graph_fields import GraphFields
from topocast.model.names import (
    MAX_DOMAIN_NAME,
    MAX_NODE_NAME,
    MAX_SWITCH_NAME,
    all_safe,
    check_domain_name,
    check_node_name,
    check_switch_name,
)

__all__ = ["MAX_UNPLACED_KEY", "MAX_UNPLACED_REASON", "check_graph", "looks_consistent"]

#: bounds of one ``unplaced`` entry: a name or record label, and its reason
MAX_UNPLACED_KEY = 300
MAX_UNPLACED_REASON = 1000


def check_graph(graph: GraphFields) -> None:
    """Raise ``UnsafeNameError`` or ``ValueError`` (message naming the node) if the graph is inconsistent."""
    if not looks_consistent(graph):
        _find_error(graph)


def _switch_parents(paths: set[tuple[str, ...]]) -> set[tuple[str, str | None]]:
    """Every distinct (switch, parent) pair of the paths (parent None for the top of a path).

    The paths form a tree exactly when each switch has one parent (or None) everywhere:
    then following parents from any switch gives one path, hence one height.
    """
    pairs: set[tuple[str, str | None]] = set()
    for path in paths:
        pairs.update(pairwise(path))
        pairs.add((path[-1], None))
    return pairs


def looks_consistent(graph: GraphFields) -> bool:
    """True if every rule holds (never raises; says nothing about which rule fails)."""
    if graph.unplaced and _unplaced_error(graph.unplaced) is not None:
        return False
    if graph.notes and _unplaced_error(graph.notes, "notes") is not None:
        return False
    if graph.health and len({r.ref for r in graph.health}) != len(graph.health):
        return False  # two records for one object
    # The node columns (C-level passes over the nodes, kept for the renderers when a render call
    # loads the graph inside fabric.shared_views); everything after works on sets of distinct values.
    if not graph.nodes:
        return all_safe(list(graph.switch_names.values()), MAX_SWITCH_NAME, remember=True)
    col = node_columns(graph)
    names, ids, fabrics, domains, subdomains = col.names, col.ids, col.fabrics, col.accelerators, col.subdomains
    name_set = set(names)
    if len(name_set) != len(names) or not all_safe(names, MAX_NODE_NAME, cached=False):
        return False
    id_set = set(ids)
    id_set.discard(None)
    if len(id_set) != len(ids) - ids.count(None):
        return False
    paths = set(map(tuple, fabrics))
    paths.discard(())
    if any(len(set(p)) != len(p) for p in paths):
        return False
    pairs = _switch_parents(paths)
    switches = {sw for sw, _ in pairs}
    if len(switches) != len(pairs) or not all_safe(switches, MAX_SWITCH_NAME, remember=True) or name_set & switches:
        return False
    sub_set: set[str] = set(subdomains) - {None}  # type: ignore[assignment]
    if sub_set and any(sub is not None and dom is None for dom, sub in zip(domains, subdomains, strict=True)):
        return False
    domain_set: set[str] = set(domains) - {None}  # type: ignore[assignment]
    if not all_safe(domain_set | sub_set, MAX_DOMAIN_NAME, remember=True):
        return False
    return all_safe(list(graph.switch_names.values()), MAX_SWITCH_NAME, remember=True)


def _unplaced_error(unplaced: Mapping[str, str], field: str = "unplaced") -> str | None:
    """The first entry of ``unplaced`` (or ``notes``) that is not bounded printable text, as a message."""
    for key, reason in unplaced.items():
        if not key or len(key) > MAX_UNPLACED_KEY or not key.isprintable():
            return f"{field}: entry {key[:40]!r} must be printable text of 1..{MAX_UNPLACED_KEY} characters"
        if not reason or len(reason) > MAX_UNPLACED_REASON or not reason.isprintable():
            return f"{field}: the reason for {key!r} must be printable text of 1..{MAX_UNPLACED_REASON} characters"
    return None


def _find_error(graph: GraphFields) -> None:
    """Walk node by node and raise the first problem found (the check order of the rules above)."""
    problem = _unplaced_error(graph.unplaced) or _unplaced_error(graph.notes, "notes")
    if problem is not None:
        raise ValueError(problem)
    for i, node in enumerate(graph.nodes):
        check_node_name(node.name)
        for sw in node.fabric:
            check_switch_name(sw, node.name)
        if len(set(node.fabric)) != len(node.fabric):
            raise ValueError(f"nodes.{i}: node {node.name!r} has a switch twice in its fabric path {node.fabric}")
        if node.accelerator is not None:
            check_domain_name(node.accelerator, node.name)
        if node.subdomain is not None:
            check_domain_name(node.subdomain, node.name, "sub-domain")
            if node.accelerator is None:
                raise ValueError(f"nodes.{i}: node {node.name!r} has a sub-domain but no accelerator domain")
    seen_names: set[str] = set()
    seen_ids: dict[str, str] = {}
    tier_of: dict[str, tuple[int, str | None, str]] = {}
    for node in graph.nodes:
        if node.name in seen_names:
            raise ValueError(f"node name {node.name!r} appears twice")
        seen_names.add(node.name)
        if node.id is not None:
            if node.id in seen_ids:
                raise ValueError(f"instance id {node.id!r} is used by nodes {seen_ids[node.id]!r} and {node.name!r}")
            seen_ids[node.id] = node.name
        path = node.fabric
        for i, sw in enumerate(path):
            parent = path[i + 1] if i + 1 < len(path) else None
            height = len(path) - 1 - i
            prev = tier_of.setdefault(sw, (height, parent, node.name))
            if prev[:2] != (height, parent):
                raise ValueError(
                    f"switch {sw!r} has parent {prev[1]!r} for node {prev[2]!r} but {parent!r} for node "
                    f"{node.name!r}: fabric paths must form a tree"
                )
    clash = sorted(seen_names & tier_of.keys())
    if clash:
        raise ValueError(f"{clash[0]!r} is both a node and a switch")
    for sw, name in graph.switch_names.items():
        check_switch_name(name, f"switch {sw}")
