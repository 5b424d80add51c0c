"""Slurm >= 25.05 ``topology.yaml`` (format ``slurm-yaml``): several named topologies at once.

With ``options.topologies`` (one entry per partition) the output matches
Topograph's per-partition YAML byte for byte: topologies sorted by name, each

* ``tree``: the fabric pruned to the partition's nodes, breadth-first, switches by
  **ID** (display names are a topology.conf comment feature), ``children`` and
  ``nodes`` as hostlists; the nodes of a switch that also has child switches hang
  under a synthetic leaf ``<switch>.nodes`` (slurmctld 26.05 would otherwise drop
  its children: "Ignoring children switches"), as in ``slurm-tree``;
* ``block``: the partition's nodes grouped by accelerator domain, IDs ``block1..``,
  complemented/padded when block sizes are given or sub-domains exist, optional
  ``block_name`` naming;
* ``flat``: just ``flat: true``.

A partition's ``nodes`` are hostlist expressions; ``None`` means every node of the
graph (an explicit empty list is an error, as in Topograph). Nodes the graph does
not know, or (for block) that have no accelerator domain, are skipped with a
warning in ``Artifact.warnings``; a partition left with nothing becomes
``flat: true``. A topology's own ``block_sizes`` / ``block_name`` win over the global
options. Skeleton mode drops every ``nodes`` field.

Without ``options.topologies`` we emit a cluster-wide default set, sorted by name:
``block`` (only when the graph has accelerator domains; the same blocks and
names as the ``slurm-block`` file), ``flat``, and ``tree`` (all nodes).
``options.cluster_default`` (``tree`` by default) names the one with
``cluster_default: true``.

The text mimics Go yaml.v3 (4-space indented nested sequences, quoting rules in
:mod:`topocast.renderers.yamlv3`) rather than PyYAML, so files diff cleanly
against Topograph's.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from functools import cached_property, partial
from itertools import chain

from topocast.errors import HostlistError, RenderError
from topocast.model.fabric import NO_TOPOLOGY, FabricTree, build_tree
from topocast.model.graph import Node, TopologyGraph
from topocast.model.hostlist import compact_str, expand
from topocast.renderers.base import (
    Artifact,
    FormatRenderer,
    Renderer,
    RenderOptions,
    TopologySpec,
    topology_name_problem,
)
from topocast.renderers.slurm_block import cluster_layout, domain_order, layout
from topocast.renderers.slurm_tree import check_reserved_names, empty_graph_error, node_hostlists, slurm_tree
from topocast.renderers.yamlv3 import scalar

FILENAME = "topology.yaml"
MEDIA_TYPE = "application/yaml"


@dataclass
class Unit:
    """One ``- topology:`` entry, the nodes it holds and, per node, its Slinky spec unit (``S1:S2`` or ``block3``)."""

    name: str
    default: bool
    flat: bool = False
    #: (switch, children hostlist, nodes hostlist)
    switches: list[tuple[str, str, str]] | None = None
    block_sizes: list[int] | None = None
    #: (block name, nodes hostlist)
    blocks: list[tuple[str, str]] | None = None
    #: the nodes the entry holds
    members: Collection[str] = ()
    #: builds :attr:`parents`, which only Slinky's per-node specs read
    spec_units: Callable[[], dict[str, str]] = dict

    @cached_property
    def parents(self) -> dict[str, str]:
        """Node -> its Slinky spec unit."""
        return self.spec_units()


def _path_units(tree: FabricTree, nodes: Collection[str]) -> dict[str, str]:
    """Node -> its switches root first, joined by ``:`` (a leaf's nodes share one path, joined once)."""
    paths = [tree.node_path[n] or (NO_TOPOLOGY,) for n in nodes]
    joined = {path: ":".join(reversed(path)) for path in set(paths)}
    return dict(zip(nodes, map(joined.__getitem__, paths), strict=True))


class _Context:
    """Per-render shared state: the fabric tree and the node -> accelerator maps, built once."""

    def __init__(self, graph: TopologyGraph, options: RenderOptions) -> None:
        self.graph = graph
        self.options = options
        check_reserved_names(graph)
        fabric = build_tree(graph)
        self.order = domain_order(graph, fabric)
        # A switch with both nodes and child switches: slurmctld 26.05 keeps the nodes and drops the
        # children ("Ignoring children switches"), so its nodes move under a synthetic leaf, as in slurm-tree.
        self.tree: FabricTree
        self.tree, self.warnings = slurm_tree(graph)

    @cached_property
    def nodes(self) -> dict[str, Node]:
        """Name -> node, for the named topologies (the cluster-wide ones never need it)."""
        return {n.name: n for n in self.graph.nodes}

    def select(self, topo: str, spec: TopologySpec) -> list[str]:
        """Known node names of a partition, in the order given; unknown ones are warned about."""
        if spec.nodes is None:
            return list(self.nodes)
        if not spec.nodes:
            raise RenderError(f"topology {topo!r} specifies no nodes")
        try:
            names = expand(spec.nodes)
        except HostlistError as exc:
            raise RenderError(f"topology {topo!r}: nodes: {exc}") from None
        known = [n for n in dict.fromkeys(names) if n in self.nodes]
        unknown = [n for n in dict.fromkeys(names) if n not in self.nodes]
        if unknown:
            self.warnings.append(
                f"topology {topo!r}: skipped {len(unknown)} node(s) not in the graph: {compact_str(unknown)}"
            )
        return known

    def tree_unit(self, topo: str, spec: TopologySpec) -> Unit:
        unit = Unit(topo, spec.cluster_default)
        tree = self.tree
        if spec.nodes is None:  # every node: every switch, with all its children and nodes
            members: Collection[str] = tree.node_path.keys()
            hostlists = node_hostlists(self.graph)
            unit.switches = [
                (sw, compact_str(tree.child_switches.get(sw, ())), hostlists.get(sw, "")) for sw in tree.bfs()
            ]
        else:
            selected = set(self.select(topo, spec))
            members = selected
            required: set[str] = set()
            for path in {tree.node_path[n] or (NO_TOPOLOGY,) for n in selected}:  # a leaf's nodes share one
                required.update(path)
            if not required:
                unit.flat = True
                return unit
            unit.switches = []
            for sw in tree.bfs():
                if sw not in required:
                    continue
                children = [c for c in tree.child_switches.get(sw, ()) if c in required]
                leaves = [n for n in tree.child_nodes.get(sw, ()) if n in selected]
                unit.switches.append((sw, compact_str(children), compact_str(leaves)))
        unit.members = members
        unit.spec_units = partial(_path_units, tree, members)
        return unit

    def block_unit(self, topo: str, spec: TopologySpec) -> Unit:
        unit = Unit(topo, spec.cluster_default)
        members: dict[str, dict[str | None, list[str]]] = {}
        no_domain: list[str] = []
        for name in self.select(topo, spec):
            node = self.nodes[name]
            if node.accelerator is None:
                no_domain.append(name)
            else:
                members.setdefault(node.accelerator, {}).setdefault(node.subdomain, []).append(name)
        if no_domain:
            self.warnings.append(
                f"topology {topo!r}: skipped {len(no_domain)} node(s) without an accelerator domain: "
                f"{compact_str(no_domain)}"
            )
        if not members:
            unit.flat = True
            return unit
        sizes = spec.block_sizes or self.options.block_sizes
        block_name = spec.block_name or self.options.block_name
        lay = layout(
            members,
            self.order,
            sizes,
            block_name,
            "block%d",
            f"topology {topo!r} block_sizes",
            topograph_compat=self.options.topograph_compat,
            positional=self.options.positional_block_names,
            release=self.options.slurm_release,
        )
        self.warnings.extend(f"topology {topo!r}: {w}" for w in lay.warnings)
        unit.block_sizes = lay.sizes
        unit.blocks = list(zip(lay.names, lay.hostlists, strict=True))
        unit.members = list(chain.from_iterable(b.nodes for b in lay.blocks))
        unit.spec_units = lay.node_block
        return unit

    def default_units(self) -> list[Unit]:
        wanted = self.options.cluster_default
        units = [self.tree_unit("tree", TopologySpec(plugin="tree", cluster_default=wanted == "tree"))]
        units.append(Unit("flat", wanted == "flat", flat=True))
        if self.order:
            lay = cluster_layout(self.graph, self.options)
            self.warnings.extend(lay.warnings)
            units.append(
                Unit(
                    "block",
                    wanted == "block",
                    block_sizes=lay.sizes,
                    blocks=list(zip(lay.names, lay.hostlists, strict=True)),
                    members=list(chain.from_iterable(b.nodes for b in lay.blocks)),
                    spec_units=lay.node_block,
                )
            )
        if wanted not in {u.name for u in units}:
            have = ", ".join(sorted(u.name for u in units))
            raise RenderError(f"cluster_default {wanted!r} is not one of the topologies rendered ({have})")
        return sorted(units, key=lambda u: u.name)


def build_units(graph: TopologyGraph, options: RenderOptions) -> tuple[list[Unit], list[str]]:
    """The topologies to write (sorted by name) and the warnings collected on the way."""
    if not graph.nodes:
        raise empty_graph_error(graph, "topology.yaml")
    ctx = _Context(graph, options)
    if not options.topologies:
        return ctx.default_units(), ctx.warnings
    units: list[Unit] = []
    for topo in sorted(options.topologies):
        # RenderOptions checks the names when loaded; options copied or built without validation
        # (model_copy, model_construct) come here unchecked, and what is written must still be readable
        problem = topology_name_problem(topo)
        if problem:
            raise RenderError(f"topologies: {problem}")
        spec = options.topologies[topo]
        kind = spec.kind
        if kind == "tree":
            units.append(ctx.tree_unit(topo, spec))
        elif kind == "block":
            units.append(ctx.block_unit(topo, spec))
        else:
            units.append(Unit(topo, spec.cluster_default, flat=True))
    return units, ctx.warnings


def emit(units: list[Unit], skeleton: bool) -> str:
    """Write units the way yaml.v3 marshals Topograph's ``[]*TopologyUnit``."""
    if not units:
        return "[]\n"
    out: list[str] = []
    for u in units:
        out.append(f"- topology: {scalar(u.name)}")
        out.append(f"  cluster_default: {'true' if u.default else 'false'}")
        if u.flat:
            out.append("  flat: true")
        if u.switches is not None:
            out.append("  tree:")
            out.append("    switches:" + ("" if u.switches else " []"))
            for sw, children, nodes in u.switches:
                out.append(f"        - switch: {scalar(sw)}")
                if children:
                    out.append(f"          children: {scalar(children)}")
                if nodes and not skeleton:
                    out.append(f"          nodes: {scalar(nodes)}")
        if u.blocks is not None:
            out.append("  block:")
            out.append("    block_sizes:" + ("" if u.block_sizes else " []"))
            out.extend(f"        - {s}" for s in u.block_sizes or ())
            out.append("    blocks:" + ("" if u.blocks else " []"))
            for name, nodes in u.blocks:
                out.append(f"        - block: {scalar(name)}")
                if nodes and not skeleton:
                    out.append(f"          nodes: {scalar(nodes)}")
    return "\n".join(out) + "\n"


def render(graph: TopologyGraph, options: RenderOptions) -> Artifact:
    units, warnings = build_units(graph, options)
    placed = set().union(*(u.members for u in units)) if units else set()
    return Artifact(
        "slurm-yaml", FILENAME, emit(units, options.skeleton_only), MEDIA_TYPE, len(placed), warnings=warnings
    )


RENDERER: Renderer = FormatRenderer(
    "slurm-yaml",
    FILENAME,
    MEDIA_TYPE,
    "slurm",
    (
        "block_sizes",
        "block_name",
        "topologies",
        "skeleton_only",
        "cluster_default",
        "topograph_compat",
        "block_names",
        "slurm_version",
        "leave_out_domains_from",
    ),
    render,
)
