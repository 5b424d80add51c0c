"""Degrade per node, never per cluster: build a graph from what a source reported, setting aside what breaks it.

Every provider ends in :func:`place_nodes`. One odd record (an unsafe name, two machines claiming one
name, a path that contradicts every other node's, a name that is also a switch) used to fail the whole
discovery; here it is set aside with its reason in :attr:`TopologyGraph.unplaced`, and the rest of the
cluster is placed exactly as it would be without it.

What happens to a node that breaks a rule (:mod:`topocast.model.checks` lists the rules):

* unsafe node name, name shared by several nodes, instance ID shared by several nodes, name that is also
  a switch: the node is **left out** (it cannot be named safely, or it is not known which claim is true);
* unsafe switch name in its path, a switch twice in its path, a path that contradicts the tree the other
  nodes agree on: the node is **kept without a fabric path** (Slurm still knows it, with no topology);
* unsafe accelerator / sub-domain name, a sub-domain without a domain: the node keeps its path and
  **loses the domain**.

For a contradiction the placement most nodes report wins, switch by switch (ties go to the lower
height, then the parent's name), so one kubelet or one miscabled host never re-shapes the tree for the
others. A good graph takes the fast path: one consistency check at C speed, nothing copied.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from itertools import pairwise

from pydantic import ValidationError

from topocast.errors import TopocastError, UnsafeNameError
from topocast.model.checks import MAX_UNPLACED_KEY, MAX_UNPLACED_REASON
from topocast.model.graph import Node, TopologyGraph
from topocast.model.health import HealthRecord
from topocast.model.names import check_domain_name, check_node_name, check_switch_name

__all__ = [
    "carry_unplaced",
    "notes_report",
    "place_nodes",
    "record_label",
    "set_aside_count",
    "set_aside_lines",
    "set_aside_report",
]

#: ``unplaced`` keys that name a switch (a dropped display name), not a node: never counted as nodes
SWITCH_PREFIX = "switch "


def record_label(value: object) -> str:
    """A printable, bounded label for a record that cannot be named safely (``record 'gpu-03=x'``)."""
    text = repr(value)
    if len(text) > MAX_UNPLACED_KEY - 10:
        text = text[: MAX_UNPLACED_KEY - 13] + "..."
    return f"record {text}"


def _reason(text: str) -> str:
    text = "".join(ch if ch.isprintable() else "?" for ch in text)
    return text if len(text) <= MAX_UNPLACED_REASON else text[: MAX_UNPLACED_REASON - 3] + "..."


def place_nodes(
    cluster: str,
    provider: str,
    nodes: Sequence[Node],
    *,
    switch_names: Mapping[str, str] | None = None,
    unplaced: Mapping[str, str] | None = None,
    notes: Mapping[str, str] | None = None,
    health: Sequence[HealthRecord] = (),
) -> TopologyGraph:
    """The graph of ``nodes``, with every node that breaks a rule set aside (see the module doc).

    ``unplaced`` carries what the source itself already set aside (a record it could not parse). Raises
    only for what is not a node's fault: an unsafe cluster name. ``notes``: per-node notes kept with the
    graph (:attr:`TopologyGraph.notes`), bounded like the reasons. ``health``: the fabric health records.
    """
    aside: dict[str, str] = {k: _reason(v) for k, v in (unplaced or {}).items()}
    kept_notes = {k[:MAX_UNPLACED_KEY]: _reason(v) for k, v in (notes or {}).items() if k and v}
    names = dict(switch_names or {})
    try:  # the usual case: the graph's own check (at C speed) passes, and runs once
        return TopologyGraph(
            cluster=cluster, provider=provider, nodes=list(nodes), switch_names=names, unplaced=aside,
            notes=kept_notes, health=list(health),
        )  # fmt: skip
    except (ValidationError, TopocastError):
        pass  # some node breaks a rule: find it below
    kept = _drop_unnameable(nodes, aside)
    kept = [_clean_node(n, aside) for n in kept]
    kept = _resolve_tree(kept, aside)
    switches = {sw for n in kept for sw in n.fabric}
    final: list[Node] = []
    for node in kept:
        if node.name in switches:
            aside[node.name] = f"node name {node.name!r} is also a switch of the fabric; left out"
        else:
            final.append(node)
    safe_names = {}
    for sw, display in names.items():
        try:
            safe_names[sw] = check_switch_name(display, f"switch {sw}")
        except UnsafeNameError as exc:
            aside[f"{SWITCH_PREFIX}{sw}"] = _reason(f"display name dropped: {exc}")
    return TopologyGraph(
        cluster=cluster, provider=provider, nodes=final, switch_names=safe_names, unplaced=aside, notes=kept_notes,
        health=list(health),
    )  # fmt: skip


def _drop_unnameable(nodes: Iterable[Node], aside: dict[str, str]) -> list[Node]:
    """Nodes with a safe, unique name and a unique instance ID; the others go to ``aside``."""
    candidates: list[Node] = []
    for node in nodes:
        try:
            check_node_name(node.name)
        except UnsafeNameError as exc:
            aside[record_label(node.name)] = _reason(f"{exc}; left out")
            continue
        candidates.append(node)
    by_name = Counter(n.name for n in candidates)
    by_id = Counter(n.id for n in candidates if n.id is not None)
    holders: dict[str, list[str]] = defaultdict(list)
    for n in candidates:
        if n.id is not None and by_id[n.id] > 1:
            holders[n.id].append(n.name)
    kept: list[Node] = []
    for node in candidates:
        if by_name[node.name] > 1:
            ids = sorted(str(n.id) for n in candidates if n.name == node.name)
            aside[node.name] = _reason(
                f"{by_name[node.name]} machines claim the name {node.name!r} (ids {', '.join(ids)}); left out"
            )
        elif node.id is not None and by_id[node.id] > 1:
            aside[node.name] = _reason(
                f"instance id {node.id!r} is claimed by nodes {', '.join(sorted(holders[node.id]))}; left out"
            )
        else:
            kept.append(node)
    return kept


def _clean_node(node: Node, aside: dict[str, str]) -> Node:
    """``node`` without the parts that are unsafe on their own (its path, its domain)."""
    update: dict[str, object] = {}
    try:
        for sw in node.fabric:
            check_switch_name(sw, node.name)
        if len(set(node.fabric)) != len(node.fabric):
            raise ValueError(f"switch listed twice in fabric path {node.fabric}")
    except (UnsafeNameError, ValueError) as exc:
        aside[node.name] = _reason(f"fabric path dropped: {exc}")
        update["fabric"] = []
    try:
        if node.accelerator is not None:
            check_domain_name(node.accelerator, node.name)
        if node.subdomain is not None:
            check_domain_name(node.subdomain, node.name, "sub-domain")
            if node.accelerator is None:
                raise ValueError("a sub-domain without an accelerator domain")
    except (UnsafeNameError, ValueError) as exc:
        aside[node.name] = _reason(f"accelerator domain dropped: {exc}")
        update["accelerator"] = None
        update["subdomain"] = None
    return node.model_copy(update=update) if update else node


def _placements(path: Sequence[str]) -> list[tuple[str, int, str | None]]:
    """(switch, height, parent) for each switch of a closest-first path."""
    height = len(path) - 1
    out: list[tuple[str, int, str | None]] = [(sw, height - i, parent) for i, (sw, parent) in enumerate(pairwise(path))]
    if path:
        out.append((path[-1], 0, None))
    return out


def _resolve_tree(nodes: list[Node], aside: dict[str, str]) -> list[Node]:
    """Keep the placement most nodes report for each switch; strip the paths that contradict it."""
    votes: dict[str, Counter[tuple[int, str | None]]] = defaultdict(Counter)
    for node in nodes:
        for sw, height, parent in _placements(node.fabric):
            votes[sw][(height, parent)] += 1
    winner = {
        sw: min(counts.items(), key=lambda kv: (-kv[1], kv[0][0], kv[0][1] or ""))[0] for sw, counts in votes.items()
    }
    out: list[Node] = []
    for node in nodes:
        clash = next(
            ((sw, h, p) for sw, h, p in _placements(node.fabric) if winner[sw] != (h, p)),
            None,
        )
        if clash is None:
            out.append(node)
            continue
        sw, _, parent = clash
        agreed_height, agreed_parent = winner[sw]
        count = votes[sw][winner[sw]]
        aside[node.name] = _reason(
            f"fabric path {'/'.join(reversed(node.fabric))} contradicts {count} other node(s): switch {sw!r} is "
            f"under {agreed_parent!r} there (height {agreed_height}), under {parent!r} here; kept without topology"
        )
        out.append(node.model_copy(update={"fabric": []}))
    return out


def carry_unplaced(previous: TopologyGraph, *, reread: Iterable[str], nodes: Iterable[str]) -> dict[str, str]:
    """What ``previous`` set aside that still holds after an incremental update to the node names ``nodes``.

    An entry of a node that was re-read now (``reread``: the new read decides again) or that is gone
    (in ``previous.nodes``, not in ``nodes``) is dropped; every other entry (nodes not re-read, records,
    switches) is kept, so an incremental update never forgets what a full discovery set aside.
    """
    gone = {n.name for n in previous.nodes}.difference(nodes)
    drop = gone.union(reread)
    return {key: why for key, why in previous.unplaced.items() if key not in drop}


def set_aside_count(graph: TopologyGraph) -> tuple[int, int]:
    """(nodes set aside, nodes discovery saw): kept without (part of) their topology plus left out, of all.

    Entries naming a switch (a dropped display name) are not nodes and count in neither.
    """
    names = {n.name for n in graph.nodes}
    nodes = [k for k in graph.unplaced if not k.startswith(SWITCH_PREFIX)]  # node names have no spaces
    left_out = sum(k not in names for k in nodes)
    return len(nodes), len(graph.nodes) + left_out


def set_aside_lines(unplaced: Mapping[str, str], limit: int = 10) -> list[str]:
    """A bounded sample, in name order, as ``name: reason`` lines (plus ``... and N more``) for people."""
    items = sorted(unplaced.items())
    lines = [f"{key}: {why}" for key, why in items[:limit]]
    if len(items) > limit:
        lines.append(f"... and {len(items) - limit} more")
    return lines


def notes_report(graph: TopologyGraph, limit: int = 10) -> list[str]:
    """What a command prints about the graph's per-node ``notes``: a head line and a bounded sample (empty: none)."""
    if not graph.notes:
        return []
    head = f"{len(graph.notes)} node note(s): placed, but the sources disagree about them or one lacks them"
    return [head, *(f"  {line}" for line in set_aside_lines(graph.notes, limit))]


def set_aside_report(graph: TopologyGraph, limit: int = 10) -> list[str]:
    """What a command prints on stderr: ``N set aside of M node(s) ...`` and a bounded sample (empty: nothing)."""
    if not graph.unplaced:
        return []
    aside, seen = set_aside_count(graph)
    others = len(graph.unplaced) - aside
    extra = f" (and {others} switch display name(s))" if others else ""
    head = f"{aside} set aside of {seen} node(s){extra}: kept without (part of) their topology or left out"
    return [head, *(f"  {line}" for line in set_aside_lines(graph.unplaced, limit))]
