"""A self-contained HTML fabric view, for people (``--format html``).

One file, no network: inline CSS, one inline script and the topology as inline JSON
(no URLs at all), so it opens anywhere (an S3 console preview, a ticket attachment,
an air-gapped laptop). Built to stay readable at 10,000+ nodes:

* **overview first**: the switch tree as collapsible groups, opened breadth-first
  only while a screenful of groups is visible; each group shows its node, switch and
  domain counts and a *domain fill* bar (how its nodes split over NVLink domains);
* **drill-down**: opening a leaf shows its nodes as cells; siblings are in natural
  name order (``leaf-2`` before ``leaf-10``);
* **search** by node name (substring), Slurm hostlist (``gpu-[001-004,9]``), switch
  (``leaf-00235``), Slurm block (``block003``) or domain name (``nvl-0002``, ``#3``), or a
  comma-separated mix: the matches are listed with their switch path, the first is
  revealed and marked, and a term that matches nothing is named. The URL fragment
  drives it too (``topology.html#search=gpu-0042``). A hostlist is counted before it is
  expanded (at most :data:`SEARCH_CAP` names) and a fragment that is not valid
  percent-encoding is searched as written: nothing a URL holds stops the page script;
* **occupancy** (``topocast capacity --html``, :func:`with_occupancy`): free / allocated / drained nodes per
  NVLink domain, the largest free domain and leaf, each node cell marked by its scheduler state;
* **a job** (``topology.html#job=gpu-[001-016]``): its nodes outlined and their leaves opened, with the
  NVLink domains and leaves it spans against the fewest possible (as ``topocast score`` counts them);
* **domains without relying on hue**: each domain has a number (``#12``, printed in
  every cell and bar segment) and one of 4 patterns on top of one of 12 colours, and
  the name of its Slurm block(s) (``block003``, as ``topology-block.conf`` and ``scontrol
  show topology`` say; from :func:`topocast.renderers.slurm_block.cluster_layout`);
* **what Slurm would warn about**: the warnings and errors ``validate-slurm`` prints for
  the tree and block files of this graph (``checks``, computed by the caller: e.g. two
  root switches) and the block renderer's own warnings;
* **what changed** (``render --previous OLD``): added, moved and re-domained nodes are
  outlined and counted per group, groups that lost nodes marked, removed nodes listed
  (:mod:`topocast.model.diff`).

Without JavaScript the page still shows the summary cards, the tier overview (SVG)
and the nodes without topology.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from html import escape
from importlib import resources
from itertools import compress, repeat
from operator import attrgetter, not_

import msgspec

from topocast.errors import RenderError
from topocast.model.diff import GraphDiff, diff_graphs, format_text
from topocast.model.fabric import FabricTree, build_domains, build_tree, node_columns
from topocast.model.graph import TopologyGraph
from topocast.model.health import SEVERITY, dependents, node_health
from topocast.model.hostlist import compact_str
from topocast.model.placement import set_aside_count
from topocast.renderers.base import Artifact, FormatRenderer, Renderer, RenderOptions
from topocast.renderers.slurm_block import BlockLayout, cluster_layout

FILENAME = "topology.html"
MEDIA_TYPE = "text/html"
FORMAT = "html"

#: node flags in the page data (``--previous``)
ADDED, MOVED, REDOMAINED = 1, 2, 3
#: the most node names one search may expand to (counted before expanding; the page script has the same)
SEARCH_CAP = 200_000


_DIGIT_RUNS = re.compile(r"(\d+)")


def natural_key(text: str) -> list[tuple[int, int | str]]:
    """Sort key that puts leaf-2 before leaf-10."""
    return [(0, int(p)) if p.isdigit() else (1, p) for p in _DIGIT_RUNS.split(text) if p]


_DIGITS_TO_ZERO = str.maketrans("0123456789", "0000000000")


def _one_digit_shape(names: Collection[str]) -> bool:
    """Do all ``names`` differ only in digits at the same places (gpu-000017, leaf-00012)? Names of one
    such shape sort the same by :func:`natural_key` as plain strings. One translate of the joined
    names (checked to split back into exactly them) instead of one per name."""
    joined = "\n".join(names)
    if joined.count("\n") != len(names) - 1:  # a name holds a newline: ask each one
        return len({n.translate(_DIGITS_TO_ZERO) for n in names}) <= 1
    first = next(iter(names), "").translate(_DIGITS_TO_ZERO)
    return joined.translate(_DIGITS_TO_ZERO) == "\n".join(repeat(first, len(names)))


def natural_sorted(names: Iterable[str]) -> list[str]:
    """``sorted(names, key=natural_key)``. Names of one digit shape (what generated names look like)
    sort the same as plain strings, so those skip the key (a third of the page's time at 100k nodes)."""
    items = list(names)
    if _one_digit_shape(items):
        return sorted(items)
    return sorted(items, key=natural_key)


def _script_json(data: object) -> str:
    """JSON safe inside ``<script>``: no ``</`` or ``<!--`` can end or confuse the element.

    The bytes of ``json.dumps(data, separators=(",", ":"))``: for these plain lists, dicts, strings and
    integers msgspec writes the same text, about 5x quicker, whenever its text is printable ASCII
    without a backslash (the two escape differently: non-ASCII, DEL; msgspec escapes every control
    character, so no backslash means none); for anything else the stdlib's text is used.
    """
    text = msgspec.json.encode(data)
    if text.isascii() and b"\\" not in text and b"\x7f" not in text:
        return text.decode("ascii").replace("<", "\\u003c")
    return json.dumps(data, separators=(",", ":")).replace("<", "\\u003c")


def block_layout(graph: TopologyGraph, options: RenderOptions) -> tuple[BlockLayout | None, list[str]]:
    """The block renderer's own layout (so the page names blocks as topology-block.conf does) and its warnings.

    ``None`` when the graph has no block topology (no domains, or options the block format refuses).
    """
    try:
        lay = cluster_layout(graph, options)
    except RenderError as exc:  # NotApplicableError included: no domain, so no block names to show
        return None, [] if not any(n.accelerator for n in graph.nodes) else [f"slurm-block: {exc}"]
    return lay, [f"slurm-block: {w}" for w in lay.warnings]


def lost_nodes(change: GraphDiff, old: TopologyGraph, new: TopologyGraph) -> Counter[str]:
    """Switch -> how many of its nodes (below it, at any depth) were removed or moved away since ``old``."""
    before = {n.name: n.fabric for n in old.nodes}
    after = {n.name: n.fabric for n in new.nodes}
    lost: Counter[str] = Counter()
    for name in change.removed:
        lost.update(before[name])
    for m in change.moved:
        lost.update(set(m.old) - set(after[m.node]))
    return lost


def page_data(
    graph: TopologyGraph,
    previous: GraphDiff | None = None,
    layout: BlockLayout | None = None,
    lost: Counter[str] | None = None,
) -> dict[str, object]:
    """The plain data the page script draws: switches (tree order), nodes (leaf order), domains, blocks."""
    tree = build_tree(graph, no_topology_switch=False)
    col = node_columns(graph)
    domain_names = natural_sorted({a for a in col.accelerators if a is not None})
    domain_index = {d: i for i, d in enumerate(domain_names)}
    domain_size = {domain_index[d]: sum(map(len, subs.values())) for d, subs in build_domains(graph).members.items()}
    blocks = layout.blocks if layout is not None else []
    block_names = list(layout.names) if layout is not None else []
    block_of = {n: i for i, b in enumerate(blocks) for n in b.nodes}
    lost = lost or Counter()  # switch -> nodes it no longer has (removed, or moved away)
    flags: dict[str, int] = {}
    if previous is not None:
        flags.update(dict.fromkeys((c.node for c in previous.domain_changed), REDOMAINED))
        flags.update(dict.fromkeys((m.node for m in previous.moved), MOVED))
        flags.update(dict.fromkeys(previous.added, ADDED))

    # one digit shape for all node names (or switch IDs) is one for every list of them: decided once
    sort_nodes = sorted if _one_digit_shape(col.names) else natural_sorted
    sort_switches = sorted if _one_digit_shape(tree.parent) else natural_sorted
    domains = [-1 if d is None else domain_index[d] for d in col.accelerators]  # -1: none, -2: pending
    if -1 in domains:
        domains = [-2 if d == -1 and p else d for d, p in zip(domains, map(_pending, graph.nodes), strict=True)]
    # leaf -> {domain: nodes}, {changed nodes}: in one C-level pass over the nodes
    own_counts: dict[str | None, dict[int, int]] = {}
    for (leaf, domain), n in Counter(zip(col.leaves, domains, strict=True)).items():
        own_counts.setdefault(leaf, {})[domain] = n
    own_changed = Counter(compress(col.leaves, map(flags.__contains__, col.names))) if flags else Counter()

    switches: list[list[object]] = []
    order: list[str] = []  # the nodes in page order (each switch's own nodes after its subtree's)
    switch_of: list[int] = []  # the switch (row) of each, in that order

    def add(sw: str, parent: int) -> tuple[int, dict[int, int], int]:
        """Append ``sw`` and its subtree; return (index, domain counts below, changed count below).

        A switch row: [display name, id, parent, level from the top, children, first node, end node,
        nodes below, domain segments [[domain, count]], domains below, changed nodes below,
        domains below that also have nodes elsewhere, nodes it lost since the previous graph].
        """
        index = len(switches)
        level = 0 if parent < 0 else switches[parent][3] + 1  # type: ignore[operator]
        row: list[object] = [tree.name_of(sw), sw, parent, level, [], 0, 0, 0, [], 0, 0, 0, lost.get(sw, 0)]
        switches.append(row)
        counts = dict(own_counts.get(sw, {}))
        changed = own_changed.get(sw, 0)
        for child in sort_switches(tree.child_switches.get(sw, ())):
            child_index, child_counts, child_changed = add(child, index)
            row[4].append(child_index)  # type: ignore[attr-defined]
            for d, c in child_counts.items():
                counts[d] = counts.get(d, 0) + c
            changed += child_changed
        start = len(order)
        own = sort_nodes(tree.child_nodes.get(sw, ()))
        order.extend(own)
        switch_of.extend(repeat(index, len(own)))
        total = sum(counts.values())
        segments = list(map(list, sorted(counts.items())))
        split = sum(1 for d, c in counts.items() if d >= 0 and c < domain_size[d])
        row[5:12] = [start, len(order), total, segments, sum(1 for d in counts if d >= 0), changed, split]
        return index, counts, changed

    roots = [add(r, -1)[0] for r in natural_sorted(tree.roots)]
    bare_start = len(order)
    bare = natural_sorted(compress(col.names, map(not_, col.fabrics)))
    order.extend(bare)
    switch_of.extend(repeat(-1, len(bare)))
    # A node row: [name, id, domain, sub-domain, switch, flag, block], built column by column from the
    # node columns put in page order (which often is the graph's own: the store writes nodes by name)
    ids, subdomains = col.ids, col.subdomains
    if order != col.names:
        position = {name: i for i, name in enumerate(col.names)}
        perm = list(map(position.__getitem__, order))
        ids, domains, subdomains = (
            list(map(ids.__getitem__, perm)),
            list(map(domains.__getitem__, perm)),
            list(map(subdomains.__getitem__, perm)),
        )
    block_column = list(map(block_of.get, order, repeat(-1)))
    nodes = list(
        zip(
            order,
            ["" if i is None else i for i in ids],
            domains,
            ["" if s is None else s for s in subdomains],
            switch_of,
            map(flags.get, order, repeat(0)),
            block_column,
            strict=True,
        )
    )
    domain_blocks: list[set[int]] = [set() for _ in domain_names]
    # the block(s) of each domain: one, or several with block_sizes / sub-domains
    for domain, block in set(zip(domains, block_column, strict=True)):
        if domain >= 0 and block >= 0:
            domain_blocks[domain].add(block)
    return {
        "cluster": graph.cluster,
        "switches": switches,
        "roots": roots,
        "nodes": nodes,
        "bare": [bare_start, len(order)],
        "domains": domain_names,
        "blocks": block_names,
        "domainBlocks": [sorted(b) for b in domain_blocks],
        "removed": previous.removed if previous is not None else [],
        "previous": previous is not None,
        "cap": SEARCH_CAP,
    }


_pending = attrgetter("accelerator_pending")


def _tier_svg(tree: FabricTree, graph: TopologyGraph) -> str:
    """A small picture of the tiers: one row per tier, switch count and nodes (works without script)."""
    by_tier: Counter[int] = Counter()
    for sw in tree.bfs():
        up, tier = tree.parent.get(sw), 0
        while up is not None:
            tier += 1
            up = tree.parent.get(up)
        by_tier[tier] += 1
    rows = [(f"tier {len(by_tier) - 1 - t} ({'top' if t == 0 else 'leaf' if t == len(by_tier) - 1 else 'spine'})",
             f"{by_tier[t]:,} switch(es)") for t in sorted(by_tier)]  # fmt: skip
    rows.append(("nodes", f"{len(graph.nodes):,}"))
    h = 22 * len(rows) + 8
    parts = [f'<svg width="420" height="{h}" viewBox="0 0 420 {h}" role="img" aria-label="fabric tiers">']
    for i, (label, value) in enumerate(rows):
        y = 4 + 22 * i
        width = 60 + 300 * (i + 1) / len(rows)
        x = (420 - width) / 2
        fill = "#2f3b52" if i < len(rows) - 1 else "#5b8def"
        parts.append(
            f'<rect x="{x:.0f}" y="{y}" width="{width:.0f}" height="18" rx="3" fill="{fill}"/>'
            f'<text x="210" y="{y + 13}" fill="#fff" text-anchor="middle">{escape(label)}: {escape(value)}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def _card(value: int, label: str, alert: bool = False) -> str:
    return f'<div class="card{" alert" if alert else ""}"><b>{value}</b><span>{escape(label)}</span></div>'


#: entries of ``unplaced`` the page lists (the graph file has them all)
SET_ASIDE_SHOWN = 500


def _set_aside_note(graph: TopologyGraph) -> str:
    """The list of what discovery set aside, every name and reason escaped (a kubelet may set any label)."""
    items = sorted(graph.unplaced.items())
    rows = "".join(f"<li><code>{escape(k)}</code>: {escape(v)}</li>" for k, v in items[:SET_ASIDE_SHOWN])
    more = f"<li>... and {len(items) - SET_ASIDE_SHOWN} more (the graph's <code>unplaced</code>)</li>"
    aside = set_aside_count(graph)[0]
    return (
        f'<details class="alertbox setaside" id="set-aside" open><summary><b>{aside} node(s) set aside</b> '
        "by discovery: their data breaks a rule of the graph, so they are kept without (part of) their "
        f"topology or left out</summary><ul>{rows}{more if len(items) > SET_ASIDE_SHOWN else ''}</ul></details>"
    )


def _notes_box(graph: TopologyGraph) -> str:
    """The graph's per-node notes (merged sources disagreeing), every name and note escaped."""
    items = sorted(graph.notes.items())
    rows = "".join(f"<li><code>{escape(k)}</code>: {escape(v)}</li>" for k, v in items[:SET_ASIDE_SHOWN])
    more = f"<li>... and {len(items) - SET_ASIDE_SHOWN} more (the graph's <code>notes</code>)</li>"
    return (
        f'<details class="alertbox notes" id="node-notes"><summary><b>{len(items)} node note(s)</b>: placed, '
        "but the merged sources disagree about them or one lacks them</summary>"
        f"<ul>{rows}{more if len(items) > SET_ASIDE_SHOWN else ''}</ul></details>"
    )


#: the colour of each health state in the view (the fabric health box)
_HEALTH_COLOURS = {"impaired": "#b3261e", "degraded": "#b26a00", "unknown": "#5f6368"}


def _health_box(graph: TopologyGraph) -> str:
    """Each fabric object that is not ok, coloured by its state, with the nodes it affects (docs/health.md)."""
    users = dependents(
        ((n.name, n.fabric, n.accelerator, n.labels) for n in graph.nodes), (r.ref for r in graph.health)
    )
    rows = []
    for r in sorted(graph.health, key=lambda r: (-SEVERITY[r.state], r.ref))[:SET_ASIDE_SHOWN]:
        colour = _HEALTH_COLOURS.get(r.state, "#5f6368")
        badge = f'<b style="color:#fff;background:{colour};padding:0 .4em;border-radius:3px">{escape(r.state)}</b>'
        affected = escape(compact_str(users[r.ref])) if users[r.ref] else "no node"
        reason = f": {escape(r.reason)}" if r.reason else ""
        rows.append(f"<li>{badge} <code>{escape(str(r.ref))}</code>{reason} ({escape(r.source)}); "
                    f"{len(users[r.ref])} node(s): {affected}</li>")  # fmt: skip
    return (
        f'<details class="alertbox health" id="fabric-health" open><summary><b>{len(graph.health)} fabric '
        f"object(s) not ok</b> and the nodes they affect (<code>topocast health show</code>)</summary>"
        f"<ul>{''.join(rows)}</ul></details>"
    )


def render_page(
    graph: TopologyGraph,
    previous: TopologyGraph | None = None,
    options: RenderOptions | None = None,
    checks: Sequence[str] = (),
) -> str:
    """The page; with ``previous``, what changed since it is highlighted.

    ``checks``: what ``validate-slurm`` says about this graph's Slurm files (warnings, ``invalid: ...``),
    shown with the block renderer's own warnings. The renderers cannot run those checks (they live with
    the Slurm adapter), so the caller passes them (``render_cli``).
    """
    tree = build_tree(graph, no_topology_switch=False)
    domains = build_domains(graph)
    change = diff_graphs(previous, graph) if previous is not None else None
    layout, block_warnings = block_layout(graph, options or RenderOptions())
    bare = graph.nodes_without_topology()
    pending = sum(1 for n in graph.nodes if n.accelerator_pending and n.accelerator is None)
    cards = [
        _card(len(graph.nodes), "nodes"),
        _card(len(tree.parent), "switches"),
        _card(tree.depth(), "fabric tiers"),
        _card(len(domains.members), "accelerator domains"),
        _card(len(bare), "nodes without topology", alert=bool(bare)),
    ]
    if pending:
        cards.append(_card(pending, "domains pending", alert=True))
    if graph.unplaced:
        cards.append(_card(set_aside_count(graph)[0], "set aside", alert=True))
    notes = []
    slurm = [*checks, *block_warnings]
    if slurm:
        rows = "".join(f"<li>{escape(w)}</li>" for w in slurm)
        notes.append(f'<details class="alertbox slurm" id="slurm-checks" open><summary><b>{len(slurm)} Slurm '
                     f"warning(s)</b> (what <code>topocast validate-slurm</code> and the block renderer say about "
                     f"this graph's topology files)</summary><ul>{rows}</ul></details>")  # fmt: skip
    if graph.unplaced:
        notes.append(_set_aside_note(graph))
    if graph.health:
        node_rows = [(n.name, n.fabric, n.accelerator, n.labels) for n in graph.nodes]
        hurt = node_health(node_rows, graph.health)
        cards.append(_card(len(hurt), "nodes on unhealthy fabric", alert=bool(hurt)))
        notes.append(_health_box(graph))
    if graph.notes:
        cards.append(_card(len(graph.notes), "node notes", alert=True))
        notes.append(_notes_box(graph))
    if bare:
        notes.append(
            f'<div class="alertbox"><b>{len(bare)} node(s) without topology</b> (the provider reported no '
            f"switches for them; Slurm tree files list them under <code>no-topology</code>): "
            f"{escape(compact_str(bare))}</div>"
        )
    if change is not None:
        cards.append(_card(len(change.changed_nodes()) + len(change.removed), "changed", alert=not change.same))
        notes.append(f'<details class="changes" open><summary>Changes since the previous graph</summary><pre>'
                     f"{escape(format_text(change, 'previous', 'this graph', limit=20))}</pre></details>")  # fmt: skip
    cluster = escape(graph.cluster)
    lost = lost_nodes(change, previous, graph) if change is not None and previous is not None else None
    data = _script_json(page_data(graph, change, layout, lost))
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>Topology of {cluster}</title>'
        f'<meta name="viewport" content="width=device-width"><style>{_CSS}</style></head><body>\n'
        f'<header><h1>Topology of {cluster}</h1><div class="meta">source: {escape(graph.provider)}</div>\n'
        f'<div class="cards">{"".join(cards)}</div></header>\n{"".join(notes)}\n'
        f'<details class="tiers"><summary>Tiers</summary>{_tier_svg(tree, graph)}</details>\n'
        '<div class="bar-top"><input id="q" type="search" '
        'placeholder="Search node, hostlist, switch, block or domain" '
        'aria-label="search nodes, switches, blocks and domains" size="44"> <button id="go">Find</button> '
        '<button id="all">Expand all</button> '
        '<button id="none">Collapse</button> <span id="status" role="status"></span></div>\n'
        '<div id="results"></div><div id="legend" class="note"></div><main id="tree"></main>\n'
        f'<noscript><p class="note">Turn on JavaScript to browse the switch tree and search nodes.</p></noscript>\n'
        f'<script type="application/json" id="topology">{data}</script>\n<script>{_JS}</script>\n</body></html>\n'
    )


def render(graph: TopologyGraph, options: RenderOptions) -> Artifact:
    return Artifact(FORMAT, FILENAME, render_page(graph, None, options), MEDIA_TYPE, len(graph.nodes))


def render_with_previous(
    graph: TopologyGraph, previous: TopologyGraph | None, options: RenderOptions, checks: Sequence[str] = ()
) -> Artifact:
    """The page with what changed since ``previous`` highlighted (``render --previous``) and ``checks`` shown."""
    return Artifact(FORMAT, FILENAME, render_page(graph, previous, options, checks), MEDIA_TYPE, len(graph.nodes))


def with_occupancy(page: str, states: Mapping[str, str]) -> str:
    """``page`` with the scheduler's node states (``topocast capacity --html``): the page script then shows an
    occupancy panel (free / allocated / drained per NVLink domain, the largest free domain and leaf) and marks
    each node cell by its state. ``states``: node name -> free | allocated | drained (others: unknown)."""
    block = f'<script type="application/json" id="occupancy">{_script_json(dict(states))}</script>\n'
    marker = '<script type="application/json" id="topology">'
    return page.replace(marker, block + marker, 1)


def _asset(name: str) -> str:
    return (resources.files("topocast") / "data" / "html" / name).read_text()


# Colours: 12 hues far apart in order (consecutive domain numbers never look alike); patterns
# (none, stripes, dots, cross) multiply them to 48 distinct looks, and the number is always printed.
_HUES = [210, 30, 120, 280, 0, 170, 50, 320, 90, 240, 15, 190]
_PATTERNS = [
    "none",
    "repeating-linear-gradient(45deg,#0000 0 4px,#fff6 4px 7px)",
    "radial-gradient(#fff8 1.2px,#0000 1.6px) 0 0/6px 6px",
    "repeating-linear-gradient(0deg,#0000 0 4px,#0005 4px 5px),"
    "repeating-linear-gradient(90deg,#0000 0 4px,#0005 4px 5px)",
]
_CSS = (
    _asset("view.css")
    + "".join(f".h{i}{{background-color:hsl({h},62%,{40 if i % 2 else 46}%)}}" for i, h in enumerate(_HUES))
    + "".join(f".p{i}{{background-image:{p}}}" for i, p in enumerate(_PATTERNS) if p != "none")
)
_JS = _asset("view.js")


RENDERER: Renderer = FormatRenderer(
    FORMAT,
    FILENAME,
    MEDIA_TYPE,
    "file",
    ("block_sizes", "block_name", "topograph_compat", "block_names", "slurm_version", "leave_out_domains_from"),
    render,
)
