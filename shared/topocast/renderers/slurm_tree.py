"""Slurm ``topology.conf`` for ``TopologyPlugin=topology/tree`` (format ``slurm-tree``).

Byte-compatible with Topograph: switches breadth-first from the roots, siblings
in sorted-ID order, child lists compressed into hostlists::

    SwitchName=core Switches=spine[1-2]
    SwitchName=spine1 Switches=leaf[1-2]
    SwitchName=leaf1 Nodes=gpu[001-008]

A switch with a display name (``graph.switch_names``) prints as that name, after a
``# Name=ID`` comment. Nodes without fabric information (CPU login nodes, say) are left
out of the file, with a warning naming them: a switch for them would be a second root,
and no switch would reach every node. With ``no_topology_switch`` (and ``topograph_compat``)
they hang under the pseudo switch ``no-topology``, which sorts among the roots, as in
Topograph. That name is reserved: a real
switch whose ID or display name is ``no-topology`` is refused with a clear error
(it would be a second ``SwitchName=no-topology``, fatal to slurmctld, or silently
take the unplaced nodes in), see :func:`check_reserved_names`.

Skeleton mode (Slinky dynamic nodes) drops the ``Nodes=`` lists. Unlike Topograph,
a switch that only had nodes keeps a bare ``SwitchName=X`` line, because its parent
still names it and slurmctld treats an undefined child switch as fatal.

A switch that has both nodes and child switches (fabrics of mixed depth, e.g. 3- and
4-level AWS instance types under one spine) cannot be written as such: Topograph prints
two ``SwitchName`` lines for it, which slurmctld rejects as a duplicate switch, and one
line with both ``Switches=`` and ``Nodes=`` is rejected too. We move those nodes under a
synthetic leaf ``<switch>.nodes`` (hashed if too long), which keeps them below the same
switch, and say so in a warning.

An empty graph is an error: an empty topology.conf silently disables topology-aware
scheduling (and is fatal in Slurm >= 25.11).
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping
from itertools import repeat
from operator import contains

from topocast.errors import NotApplicableError, RenderError
from topocast.model.fabric import NO_TOPOLOGY, FabricTree, build_tree, node_columns, shared
from topocast.model.graph import TopologyGraph
from topocast.model.hostlist import compact_str
from topocast.renderers.base import Artifact, FormatRenderer, Renderer, RenderOptions

FILENAME = "topology-tree.conf"
MEDIA_TYPE = "text/plain"


def empty_graph_error(graph: TopologyGraph, what: str) -> RenderError:
    return RenderError(
        f"cannot render {what} for cluster {graph.cluster!r}: the graph has no nodes "
        "(refusing to publish an empty topology, which would disable topology-aware scheduling)"
    )


def check_reserved_names(graph: TopologyGraph) -> None:
    """A real switch may not be called ``no-topology``: that name belongs to the pseudo-switch."""
    if any(map(contains, node_columns(graph).fabrics, repeat(NO_TOPOLOGY))):
        node = next(n for n in graph.nodes if NO_TOPOLOGY in n.fabric)
        raise RenderError(
            f"node {node.name!r}: its fabric names a switch {NO_TOPOLOGY!r}, a name topocast reserves for "
            "nodes without fabric information (two SwitchName=no-topology lines are fatal to slurmctld); "
            "rename that switch in the source (e.g. a display name in switch_names)"
        )
    for sw, name in graph.switch_names.items():
        if name == NO_TOPOLOGY and sw != NO_TOPOLOGY:
            raise RenderError(
                f"switch {sw!r} has display name {NO_TOPOLOGY!r}, a name topocast reserves for nodes "
                "without fabric information; choose another display name"
            )


def check_display_names(tree: FabricTree) -> None:
    """Two switches printing under one name would be a duplicate SwitchName, fatal to slurmctld."""
    if not tree.display:
        return
    seen: dict[str, str] = {}
    for sw in tree.parent:
        name = tree.name_of(sw)
        other = seen.setdefault(name, sw)
        if other != sw:
            a, b = sorted((other, sw))
            raise RenderError(f"switches {a!r} and {b!r} would both be written as SwitchName={name}")


def synthetic_leaf_name(switch: str, taken: set[str]) -> str:
    name = f"{switch}.nodes"
    if len(name) > 64 or name in taken:
        name = f"{switch[:40]}.nodes-{hashlib.sha256(switch.encode()).hexdigest()[:12]}"
    if name in taken:
        raise RenderError(f"cannot name a leaf switch for the nodes directly under switch {switch!r}")
    return name


def split_mixed_switches(tree: FabricTree) -> tuple[FabricTree, list[str]]:
    """Move nodes of switches that also have child switches under a synthetic leaf (see module doc)."""
    mixed = [sw for sw in tree.child_nodes if sw in tree.child_switches]
    if not mixed:
        return tree, []
    t = dataclasses.replace(
        tree,
        child_switches={k: list(v) for k, v in tree.child_switches.items()},
        child_nodes=dict(tree.child_nodes),
        parent=dict(tree.parent),
        node_path=dict(tree.node_path),
    )
    taken = {tree.name_of(sw) for sw in tree.parent}
    notes = []
    for sw in sorted(mixed):
        leaf = synthetic_leaf_name(tree.name_of(sw), taken)
        taken.add(leaf)
        nodes = t.child_nodes.pop(sw)
        t.child_nodes[leaf] = nodes
        t.parent[leaf] = sw
        t.child_switches[sw] = sorted([*t.child_switches[sw], leaf])
        for n in nodes:
            t.node_path[n] = (leaf, *t.node_path[n])
        notes.append(
            f"switch {tree.name_of(sw)!r} has both child switches and {len(nodes)} node(s); "
            f"the nodes are listed under synthetic leaf switch {leaf!r}"
        )
    return t, notes


def slurm_tree(graph: TopologyGraph) -> tuple[FabricTree, list[str]]:
    """The fabric tree as the Slurm tree formats write it (no mixed switches, see
    :func:`split_mixed_switches`) and the notes about it; slurm-tree and slurm-yaml share it."""

    def build() -> tuple[FabricTree, list[str]]:
        check_reserved_names(graph)
        return split_mixed_switches(build_tree(graph))

    tree, notes = shared(graph, "slurm_tree", build)
    return tree, list(notes)  # callers extend their warnings


def slurm_tree_view(graph: TopologyGraph, no_topology_switch: bool = True) -> tuple[FabricTree, list[str]]:
    """The FabricTree as Slurm's tree plugin needs it: checked names, no mixed switches; nodes without
    fabric information under the pseudo-switch ``no-topology`` (``no_topology_switch``) or left out."""

    def build() -> tuple[FabricTree, list[str]]:
        check_reserved_names(graph)
        check_display_names(build_tree(graph))
        tree, notes = slurm_tree(graph)
        if no_topology_switch or NO_TOPOLOGY not in tree.parent:
            return tree, notes
        # the same tree without the pseudo-switch: a few dict copies, not a second build from the nodes
        return dataclasses.replace(
            tree,
            roots=[r for r in tree.roots if r != NO_TOPOLOGY],
            child_nodes={sw: ns for sw, ns in tree.child_nodes.items() if sw != NO_TOPOLOGY},
            parent={sw: up for sw, up in tree.parent.items() if sw != NO_TOPOLOGY},
        ), notes

    tree, notes = shared(graph, ("slurm_tree_view", no_topology_switch), build)
    return tree, list(notes)


def node_hostlists(graph: TopologyGraph) -> dict[str, str]:
    """Switch -> hostlist of the nodes right below it in :func:`slurm_tree` (``Nodes=``, ``nodes:``), for
    every switch with nodes: one compaction per render call for slurm-tree, slurm-yaml and Slinky."""
    tree, _ = slurm_tree(graph)
    return shared(graph, "slurm_node_hostlists", lambda: {sw: compact_str(ns) for sw, ns in tree.child_nodes.items()})


def node_paths(graph: TopologyGraph) -> dict[str, str]:
    """node -> root-first switch names joined by ``:`` (the unit of a Slinky ``default:`` spec)."""
    tree, _ = slurm_tree_view(graph)
    out: dict[str, str] = {}
    for node in graph.nodes:
        path = tree.node_path[node.name] or (NO_TOPOLOGY,)
        out[node.name] = ":".join(tree.name_of(sw) for sw in reversed(path))
    return out


def switch_lines(tree: FabricTree) -> list[tuple[str | None, str, str, list[str], list[str]]]:
    """What each ``SwitchName`` line of the file says, in file order: the ``# name=ID`` comment above it
    (or None), the switch ID, its ``SwitchName``, child switch names (``Switches=``) and nodes (``Nodes=``);
    one of the two lists is empty."""
    lines: list[tuple[str | None, str, str, list[str], list[str]]] = []
    for sw in tree.bfs():
        name = tree.name_of(sw)
        comment = f"# {name}={sw}" if sw in tree.display else None
        children = tree.child_switches.get(sw)
        nodes = tree.child_nodes.get(sw)
        if children:
            lines.append((comment, sw, name, [tree.name_of(c) for c in children], []))
        if nodes:  # never together with children: see split_mixed_switches
            lines.append((comment, sw, name, [], nodes))
    return lines


def render_tree(tree: FabricTree, skeleton: bool, hostlists: Mapping[str, str] | None = None) -> str:
    """The file's text; ``hostlists``: :func:`node_hostlists` of the graph ``tree`` is the tree of (else computed)."""
    lines: list[str] = []
    for comment, sw, name, children, nodes in switch_lines(tree):
        if comment:
            lines.append(comment)
        if children:
            lines.append(f"SwitchName={name} Switches={compact_str(children)}")
        elif skeleton:
            lines.append(f"SwitchName={name}")
        else:
            lines.append(f"SwitchName={name} Nodes={hostlists[sw] if hostlists is not None else compact_str(nodes)}")
    return "\n".join(lines) + "\n"


def file_records(graph: TopologyGraph, options: RenderOptions) -> list[tuple[int, str, str, list[str]]]:
    """The ``SwitchName`` lines of this graph's file as records: (line number, switch name, the
    ``Switches=`` hostlist, the nodes of ``Nodes=``), for checks that would otherwise re-read the text."""
    tree, _ = slurm_tree_view(graph, options.keeps_no_topology_switch)
    records: list[tuple[int, str, str, list[str]]] = []
    lineno = 0
    for comment, _sw, name, children, nodes in switch_lines(tree):
        lineno += 2 if comment else 1
        records.append((lineno, name, compact_str(children), [] if options.skeleton_only else nodes))
    return records


def render(graph: TopologyGraph, options: RenderOptions) -> Artifact:
    if not graph.nodes:
        raise empty_graph_error(graph, "topology/tree")
    keep = options.keeps_no_topology_switch
    missing = graph.nodes_without_topology()
    if missing and not keep and len(missing) == len(graph.nodes):
        raise NotApplicableError(
            f"cannot render topology/tree for cluster {graph.cluster!r}: none of its {len(graph.nodes)} node(s) "
            "has fabric information (no_topology_switch lists them all under one pseudo-switch)"
        )
    tree, warnings = slurm_tree_view(graph, keep)
    if missing and keep:
        warnings.append(
            f"{len(missing)} node(s) have no fabric information and are listed under switch "
            f"{NO_TOPOLOGY!r}: {compact_str(missing)}"
        )
    elif missing:
        warnings.append(
            f"{len(missing)} node(s) have no fabric information and are left out of the tree: "
            f"{compact_str(missing)} (no_topology_switch lists them under a pseudo-switch {NO_TOPOLOGY!r}, "
            "a second root: then no switch reaches every node)"
        )
    skeleton = options.skeleton_only

    def text() -> str:
        return render_tree(tree, skeleton, None if skeleton else node_hostlists(graph))

    # the same file a Slinky ConfigMap of the same render call holds: written once
    content = shared(graph, ("slurm_tree_text", skeleton, keep), text)
    count = len(graph.nodes) - (0 if keep else len(missing))
    return Artifact("slurm-tree", FILENAME, content, MEDIA_TYPE, count, warnings=warnings)


RENDERER: Renderer = FormatRenderer(
    "slurm-tree", FILENAME, MEDIA_TYPE, "slurm", ("skeleton_only", "topograph_compat", "no_topology_switch"), render
)
