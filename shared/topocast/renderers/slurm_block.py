"""Slurm ``topology.conf`` for ``TopologyPlugin=topology/block`` (format ``slurm-block``).

One block per accelerator (NVLink / UltraServer) domain::

    BlockName=nvl1 Nodes=gpu[001-018]
    BlockName=nvl2 Nodes=gpu[019-036]
    # nvl-3-9546b195=nvl/3
    BlockName=nvl-3-9546b195 Nodes=gpu[037-054]
    BlockSizes=18,36

A ``# name=domain`` comment stands above a block whose name is not its domain's ID. With
``topograph_compat`` the file is byte-compatible with Topograph's (``# block001=nvl1``...).

Plain blocks print in the order a breadth-first walk of the fabric first meets a
node of the domain (Slurm pairs *adjacent* blocks, so fabric neighbours should be
adjacent). Each block is named after its domain's ID (``cr-0a1b...``: see
:func:`topocast.renderers.blockplan.block_ids`), so a domain that comes or goes changes
only its own lines. With ``block_names: position`` (or ``topograph_compat``) blocks are
numbered as Topograph does, alphabetically by domain. With ``block_sizes`` (or sub-domains)
the blocks are complemented with placeholders (see :mod:`topocast.renderers.blockplan`).
``block_name`` renames blocks from their node names. Skeleton mode drops ``Nodes=``.

Nodes without an accelerator domain never appear, nor (with ``leave_out_domains_from``) the nodes of a
domain whose health record is that bad: its nodes stay schedulable for jobs that do not ask for a block.
A graph without any domain is an error, never an empty file: slurmctld would silently lose block
scheduling.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from topocast.errors import NotApplicableError, RenderError
from topocast.model.fabric import FabricTree, build_domains, build_tree, node_columns, shared
from topocast.model.graph import TopologyGraph
from topocast.model.health import bad_domains
from topocast.model.hostlist import compact_str
from topocast.renderers.base import Artifact, BlockNameOptions, FormatRenderer, Renderer, RenderOptions
from topocast.renderers.blockplan import (
    BLOCK_SINCE,
    Block,
    Members,
    block_ids,
    display_name,
    name_blocks,
    plan,
    release_text,
)

FILENAME = "topology-block.conf"
MEDIA_TYPE = "text/plain"


@dataclass
class BlockLayout:
    """A planned block topology: parallel lists of blocks and their final names."""

    blocks: list[Block]
    names: list[str]
    sizes: list[int]
    warnings: list[str] = field(default_factory=list)
    #: named by position (Topograph): the comments then show domains as Topograph does (:func:`display_name`)
    positional: bool = False

    @cached_property
    def hostlists(self) -> list[str]:
        """The hostlist of each block's nodes (``Nodes=``, ``nodes:``): compacted once per layout."""
        return [compact_str(b.nodes) for b in self.blocks]

    def node_block(self) -> dict[str, str]:
        """node name -> name of the block holding it."""
        return {n: name for b, name in zip(self.blocks, self.names, strict=True) for n in b.nodes}


def domain_order(graph: TopologyGraph, tree: FabricTree | None = None) -> list[str]:
    """Accelerator domains in the order a BFS of the fabric first meets one of their nodes.

    Without any fabric (e.g. a DRA-style source) the order is alphabetical. A node's BFS
    position is (BFS rank of its leaf switch, instance ID). The fabric tree is the one the
    tree formats of the same render call use (``tree``, or the shared one).
    """
    return list(shared(graph, "domain_order", lambda: _domain_order(graph, tree)))


def _domain_order(graph: TopologyGraph, tree: FabricTree | None) -> list[str]:
    col = node_columns(graph)
    if not any(col.fabrics):
        return sorted({d for d in col.accelerators if d is not None})
    if tree is None:
        tree = build_tree(graph)  # shared with the tree formats of the same render call
    domain_of = dict(zip(col.names, col.accelerators, strict=True))
    # The tree lists each switch's nodes by (instance ID, name), so walking it breadth-first
    # meets every node in BFS position order: the first node met decides a domain's place.
    order = dict.fromkeys(map(domain_of.get, tree.bfs_nodes()))
    order.pop(None, None)  # nodes without a domain
    return list(order)  # type: ignore[arg-type]


def layout(
    members: Members,
    order: list[str],
    sizes: list[int] | None,
    block_name: BlockNameOptions | None,
    id_format: str,
    where: str = "block_sizes",
    alphabetical_ids: bool = False,
    topograph_compat: bool = False,
    positional: bool = False,
    release: tuple[int, int] | None = None,
) -> BlockLayout:
    """Plan blocks and name them: after their domains (:func:`~topocast.renderers.blockplan.block_ids`),
    or with ``positional`` by number, ``id_format`` being ``block%03d`` (topology.conf) or ``block%d``
    (YAML). Positional IDs number blocks in output order, except that cluster-wide plain blocks keep
    the alphabetical rank of their domain (``alphabetical_ids``), as Topograph's topology.conf does.
    ``release``: the target Slurm (undersized blocks, see :func:`~topocast.renderers.blockplan.plan`).
    """
    p = plan(members, order, sizes, where, topograph_compat, release)
    if positional:
        ids = [
            id_format % (b.rank if alphabetical_ids and b.rank is not None else i + 1) for i, b in enumerate(p.blocks)
        ]
    else:
        ids = block_ids(p.blocks)
    return BlockLayout(p.blocks, name_blocks(p.blocks, ids, block_name), p.sizes, p.warnings, positional)


def no_domains_error(graph: TopologyGraph) -> RenderError:
    pending = sum(1 for n in graph.nodes if n.accelerator_pending)
    hint = f" ({pending} node(s) still wait for the provider to report one)" if pending else ""
    return NotApplicableError(
        f"cannot render topology/block for cluster {graph.cluster!r}: none of its {len(graph.nodes)} node(s) "
        f"has an accelerator (NVLink/UltraServer) domain{hint}; use the slurm-tree format instead"
    )


def cluster_layout(graph: TopologyGraph, options: RenderOptions) -> BlockLayout:
    """The cluster-wide block layout (also the source of ``default:blockNNN`` Slinky specs).

    Shared within one render call by every format that needs it (block, topology.yaml, Slinky).
    """
    domains = build_domains(graph)
    if not domains.members:
        raise no_domains_error(graph)
    least = options.leave_out_domains_from
    left_out = bad_domains(graph.health, least) if least and graph.health else {}
    members = {d: m for d, m in domains.members.items() if d not in left_out}
    if not members:
        raise RenderError(
            f"every accelerator domain of cluster {graph.cluster!r} is {least} or worse: a block topology "
            "without blocks is not rendered (the last good one stays)"
        )

    def build() -> BlockLayout:
        sizes, name = options.block_sizes, options.block_name
        lay = layout(
            members,
            [d for d in domain_order(graph) if d not in left_out],
            sizes,
            name,
            "block%03d",
            alphabetical_ids=True,
            topograph_compat=options.topograph_compat,
            positional=options.positional_block_names,
            release=options.slurm_release,
        )
        lay.warnings += [
            f"domain {d} left out of the blocks: {r.kind} {r.state}" + (f" ({r.reason})" if r.reason else "")
            for d, r in sorted(left_out.items())
            if d in domains.members
        ]
        return lay

    key = (
        "cluster_layout",
        tuple(options.block_sizes or ()),
        options.block_name and options.block_name.model_dump_json(),
        options.topograph_compat,
        options.positional_block_names,
        options.slurm_release,
        tuple(sorted(left_out)),
    )
    return shared(graph, key, build)


def block_lines(lay: BlockLayout) -> list[tuple[str | None, str, tuple[str, ...]]]:
    """What each ``BlockName`` line of the file says, in file order: the ``# name=domain`` comment above
    it (None for padding and for a block named exactly as its domain), the block's name and its nodes."""
    lines = []
    for block, name in zip(lay.blocks, lay.names, strict=True):
        shown = block.label if block.label is None or not lay.positional else display_name(block.label)
        redundant = shown == name and not lay.positional  # Topograph writes it even then
        lines.append((None if shown is None or redundant else f"# {name}={shown}", name, block.nodes))
    return lines


def render_layout(lay: BlockLayout, skeleton: bool) -> str:
    lines: list[str] = []
    for (comment, name, nodes), hostlist in zip(block_lines(lay), lay.hostlists, strict=True):
        if comment is not None:
            lines.append(comment)
        if nodes and not skeleton:
            lines.append(f"BlockName={name} Nodes={hostlist}")
        else:
            lines.append(f"BlockName={name}")
    lines.append("BlockSizes=" + ",".join(map(str, lay.sizes)))
    return "\n".join(lines) + "\n"


def file_records(
    graph: TopologyGraph, options: RenderOptions
) -> tuple[list[tuple[int, str, tuple[str, ...]]], tuple[int, list[int]]]:
    """The lines of this graph's file as records: each ``BlockName`` line (line number, block name, the
    nodes of ``Nodes=``) and the ``BlockSizes`` line (line number, sizes), for checks that would otherwise
    re-read the text."""
    lay = cluster_layout(graph, options)
    records: list[tuple[int, str, tuple[str, ...]]] = []
    lineno = 0
    for comment, name, nodes in block_lines(lay):
        lineno += 1 if comment is None else 2
        records.append((lineno, name, () if options.skeleton_only else nodes))
    return records, (lineno + 1, list(lay.sizes))


def render(graph: TopologyGraph, options: RenderOptions) -> Artifact:
    lay = cluster_layout(graph, options)
    content = render_layout(lay, options.skeleton_only)
    count = sum(len(b.nodes) for b in lay.blocks)
    warnings = list(lay.warnings)
    release = options.slurm_release
    if release is not None and release < BLOCK_SINCE:
        warnings.append(f"{release_text(release)} does not read topology/block files (23.02 or later does)")
    return Artifact("slurm-block", FILENAME, content, MEDIA_TYPE, count, warnings=warnings)


RENDERER: Renderer = FormatRenderer(
    "slurm-block",
    FILENAME,
    MEDIA_TYPE,
    "slurm",
    (
        "block_sizes",
        "block_name",
        "skeleton_only",
        "topograph_compat",
        "block_names",
        "slurm_version",
        "leave_out_domains_from",
    ),
    render,
)
