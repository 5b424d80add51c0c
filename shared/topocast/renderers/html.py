"""A self-contained HTML picture of the topology, for people (``--format html``).

One file: inline CSS and one inline SVG, no script, no fonts or images from the
network, no URLs at all, so it opens anywhere (an S3 console preview, a ticket
attachment, an air-gapped laptop). The SVG draws the switch forest top-down
(roots at the top), and the nodes in a band under the leaves, coloured by
accelerator (NVLink) domain. Nodes without topology sit in a red dashed box at
the right. Hovering anything shows its details (SVG ``<title>``).

To stay usable at 10k+ nodes, a leaf with more than ``MAX_CELLS`` nodes is
drawn as one bar split by domain with a count (the tooltip lists the nodes as
hostlists), and when the tree has more than ``MAX_COLUMNS`` columns, whole
subtrees below some tier fold into one box each.
"""

from __future__ import annotations

import colorsys
import hashlib
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from html import escape

from topocast.fabric import FabricTree, build_domains, build_tree
from topocast.graph import Node, TopologyGraph
from topocast.hostlist import compact_str
from topocast.renderers.base import Artifact, RenderOptions

FILENAME = "topology.html"
MEDIA_TYPE = "text/html"
FORMAT = "html"

COL_W = 76  # one column per leaf (or folded subtree)
BOX_W = 68
BOX_H = 22
ROW_H = 64  # vertical distance between tiers
CELL_H = 13
MAX_CELLS = 16  # nodes drawn one by one under a leaf; more become a bar
BAR_H = 18
MAX_COLUMNS = 400  # about 30k px: wide, but scrolls fine; beyond that, subtrees fold
MARGIN = 16
CHARS = 11  # characters that fit in a box at the font size below
MAX_TITLE = 3000  # tooltip characters
MAX_LEGEND = 48

NO_DOMAIN = "#c3c8d0"
PENDING = "#eceef1"
BARE = "#f6c9c4"  # no topology and no domain


def domain_colour(domain: str) -> str:
    """A stable colour per domain name (the same domain keeps its colour across renders)."""
    h = hashlib.sha256(domain.encode()).digest()
    hue = int.from_bytes(h[:2], "big") % 360
    sat = 55 + h[2] % 3 * 10
    light = 42 + h[3] % 3 * 8
    return f"hsl({hue},{sat}%,{light}%)"


def text_colour(fill: str) -> str:
    """Black or white, whichever reads better on ``fill`` (an ``hsl(...)`` or ``#rrggbb`` colour)."""
    if fill.startswith("hsl("):
        h, s, lum = (float(v.rstrip("%")) for v in fill[4:-1].split(","))
        r, g, b = colorsys.hls_to_rgb(h / 360, lum / 100, s / 100)
    else:
        r, g, b = (int(fill[i : i + 2], 16) / 255 for i in (1, 3, 5))
    return "#111" if 0.2126 * r + 0.7152 * g + 0.0722 * b > 0.5 else "#fff"


def node_colour(node: Node) -> str:
    if node.accelerator is not None:
        return domain_colour(node.accelerator)
    if node.accelerator_pending:
        return PENDING
    return NO_DOMAIN if node.fabric else BARE


def _group_height(count: int) -> int:
    return count * CELL_H if count <= MAX_CELLS else BAR_H + 28


def _natural(text: str) -> list[tuple[int, int | str]]:
    """Sort key that puts leaf-2 before leaf-10 (the picture reads left to right)."""
    return [(0, int(p)) if p.isdigit() else (1, p) for p in re.split(r"(\d+)", text) if p]


def _short(text: str, n: int = CHARS) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def _title(lines: list[str]) -> str:
    text = "\n".join(lines)
    if len(text) > MAX_TITLE:
        text = text[: MAX_TITLE - 1] + "…"
    return f"<title>{escape(text)}</title>"


@dataclass
class _Picture:
    graph: TopologyGraph
    tree: FabricTree
    nodes: dict[str, Node]
    cut: int  # switches at this depth with child switches are folded
    depth: dict[str, int] = field(default_factory=dict)
    svg: list[str] = field(default_factory=list)
    column: int = 0
    band_y: int = 0
    folded: int = 0
    tallest: int = 0  # height of the tallest node group

    def x(self) -> float:
        self.column += 1
        return MARGIN + (self.column - 1) * COL_W + COL_W / 2

    def row_y(self, depth: int) -> int:
        return MARGIN + depth * ROW_H

    def subtree_nodes(self, sw: str) -> list[str]:
        out = list(self.tree.child_nodes.get(sw, []))
        for child in self.tree.child_switches.get(sw, []):
            out.extend(self.subtree_nodes(child))
        return out

    def edge(self, x1: float, y1: float, x2: float, y2: float) -> None:
        mid = y2 - (ROW_H - BOX_H) / 2 if y2 - y1 > ROW_H / 2 else (y1 + y2) / 2
        if x1 == x2:
            self.svg.append(f'<path class="e" d="M{x1:g} {y1:g}V{y2:g}"/>')
        else:
            self.svg.append(f'<path class="e" d="M{x1:g} {y1:g}V{mid:g}H{x2:g}V{y2:g}"/>')

    def box(self, x: float, y: float, label: str, cls: str, title: list[str]) -> None:
        self.svg.append(
            f'<g class="{cls}">{_title(title)}<rect x="{x - BOX_W / 2:g}" y="{y}" width="{BOX_W}" '
            f'height="{BOX_H}" rx="4"/><text x="{x:g}" y="{y + 15}">{escape(_short(label))}</text></g>'
        )

    def group(self, x: float, names: list[str], heading: str) -> None:
        """The nodes under one column: one cell each, or a bar split by domain."""
        y = self.band_y
        self.tallest = max(self.tallest, _group_height(len(names)))
        if len(names) <= MAX_CELLS:
            for i, name in enumerate(names):
                n = self.nodes[name]
                info = [
                    name,
                    f"id: {n.id or '-'}",
                    f"domain: {n.accelerator or ('pending' if n.accelerator_pending else '-')}",
                ]
                if n.subdomain:
                    info.append(f"sub-domain: {n.subdomain}")
                top = y + i * CELL_H
                fill = node_colour(n)
                self.svg.append(
                    f'<g class="n">{_title(info)}<rect x="{x - BOX_W / 2:g}" y="{top}" width="{BOX_W}" '
                    f'height="{CELL_H - 1}" fill="{fill}"/>'
                    f'<text x="{x:g}" y="{top + 9}" fill="{text_colour(fill)}">'
                    f"{escape(_short(name, CHARS + 1))}</text></g>"
                )
            return
        by_domain: dict[str, list[str]] = defaultdict(list)
        colours: dict[str, str] = {}
        for name in names:
            n = self.nodes[name]
            key = n.accelerator or ("(pending)" if n.accelerator_pending else "(no domain)")
            by_domain[key].append(name)
            colours[key] = node_colour(n)
        parts = sorted(by_domain.items(), key=lambda kv: (-len(kv[1]), kv[0]))
        lines = [f"{heading}: {len(names)} nodes in {len(parts)} domain(s)"]
        lines += [f"{d} ({len(ns)}): {compact_str(sorted(ns))}" for d, ns in parts]
        self.svg.append(f'<g class="bar">{_title(lines)}')
        plural = "" if len(parts) == 1 else "s"
        left = x - BOX_W / 2
        for d, ns in parts:
            w = BOX_W * len(ns) / len(names)
            self.svg.append(f'<rect x="{left:.2f}" y="{y}" width="{w:.2f}" height="{BAR_H}" fill="{colours[d]}"/>')
            left += w
        self.svg.append(
            f'<rect class="outline" x="{x - BOX_W / 2:g}" y="{y}" width="{BOX_W}" height="{BAR_H}"/>'
            f'<text x="{x:g}" y="{y + BAR_H + 12}">{len(names)} nodes</text>'
            f'<text class="sub" x="{x:g}" y="{y + BAR_H + 24}">{len(parts)} domain{plural}</text></g>'
        )

    def place(self, sw: str) -> float:
        """Draw ``sw`` and everything below it; return its x."""
        d = self.depth[sw]
        y = self.row_y(d)
        name = self.tree.name_of(sw)
        children = self.tree.child_switches.get(sw, [])
        below = self.subtree_nodes(sw)
        info = [f"{name} (id {sw})" if name != sw else sw, f"level {d + 1} from the top", f"{len(below)} nodes below"]
        if children and d >= self.cut:
            self.folded += 1
            x = self.x()
            n_sw = self._count_switches(sw) - 1
            self.box(x, y, name, "sw folded", [*info, f"{n_sw} switches folded into this box"])
            self.edge(x, y + BOX_H, x, self.band_y)
            self.group(x, sorted(below, key=_natural), name)
            return x
        children = sorted(children, key=_natural)
        xs = [self.place(c) for c in children]
        direct = sorted(self.tree.child_nodes.get(sw, []), key=_natural)
        if direct:
            nx = self.x()
            xs.append(nx)
            self.group(nx, direct, name)
        x = (xs[0] + xs[-1]) / 2
        for c, cx in zip(children, xs, strict=False):
            self.edge(x, y + BOX_H, cx, self.row_y(self.depth[c]))
        if direct:
            self.edge(x, y + BOX_H, xs[-1], self.band_y)
        self.box(x, y, name, "sw", info)
        return x

    def _count_switches(self, sw: str) -> int:
        return 1 + sum(self._count_switches(c) for c in self.tree.child_switches.get(sw, []))


def _columns(tree: FabricTree, depth: dict[str, int], cut: int) -> int:
    def cols(sw: str) -> int:
        children = tree.child_switches.get(sw, [])
        if children and depth[sw] >= cut:
            return 1
        return sum(cols(c) for c in children) + (1 if tree.child_nodes.get(sw) else 0)

    return sum(cols(r) for r in tree.roots)


def _svg(graph: TopologyGraph, tree: FabricTree) -> tuple[str, _Picture]:
    depth: dict[str, int] = {}
    for sw in tree.bfs():
        parent = tree.parent.get(sw)
        depth[sw] = 0 if parent is None else depth[parent] + 1
    max_depth = max(depth.values(), default=-1)
    cut = max_depth  # no switch at max depth has children: nothing folded
    while cut > 0 and _columns(tree, depth, cut) > MAX_COLUMNS:
        cut -= 1
    pic = _Picture(graph, tree, {n.name: n for n in graph.nodes}, cut, depth)
    pic.band_y = pic.row_y(max(min(cut, max_depth) + 1, 1))
    for root in sorted(tree.roots, key=_natural):
        pic.place(root)
    bare = graph.nodes_without_topology()
    if bare:
        if pic.column:
            pic.column += 1  # a gap before the red box
        x = pic.x()
        y = MARGIN
        pic.svg.append(
            f'<rect class="bare" x="{x - COL_W / 2 + 2:g}" y="{y - 6}" width="{COL_W - 4}" '
            f'height="{pic.band_y - y + _group_height(len(bare)) + 12}"/>'
        )
        pic.box(x, y, "no topology", "sw bare-sw", [f"{len(bare)} node(s) without topology"])
        pic.edge(x, y + BOX_H, x, pic.band_y)
        pic.group(x, sorted(bare, key=_natural), "no topology")
    height = pic.band_y + pic.tallest + 2 * MARGIN
    width = MARGIN * 2 + max(pic.column, 1) * COL_W
    body = "".join(pic.svg)
    svg = (
        f'<svg width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="fabric tree">{body}</svg>'
    )
    return svg, pic


_CSS = """
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;margin:20px;
  color:#1d2430;background:#fafbfc}
h1{font-size:20px;margin:0 0 4px} .meta{color:#5b6472;margin-bottom:12px}
.cards{display:flex;flex-wrap:wrap;gap:10px;margin:10px 0 14px}
.card{background:#fff;border:1px solid #d8dde5;border-radius:6px;padding:6px 12px;min-width:96px}
.card b{display:block;font-size:20px} .card span{color:#5b6472;font-size:12px}
.card.alert{border:2px dashed #c62828;background:#fdecea} .card.alert b{color:#c62828}
.legend{display:flex;flex-wrap:wrap;gap:4px 14px;margin:6px 0 12px;font-size:12px}
.legend i{display:inline-block;width:12px;height:12px;border-radius:2px;margin-right:4px;vertical-align:-2px;
  border:1px solid #0002}
.note{font-size:12px;color:#5b6472;margin:4px 0}
.alertbox{border:2px dashed #c62828;background:#fdecea;border-radius:6px;padding:8px 12px;margin:8px 0;font-size:13px}
.scroll{overflow:auto;border:1px solid #d8dde5;background:#fff;border-radius:6px}
svg text{font:10px ui-monospace,"DejaVu Sans Mono",Menlo,Consolas,monospace;text-anchor:middle}
svg .sw rect{fill:#2f3b52} svg .sw text{fill:#fff}
svg .folded rect{fill:#6b7a99;stroke:#2f3b52;stroke-dasharray:3 2}
svg .bare-sw rect{fill:#c62828}
svg .n rect{stroke:#fff;stroke-width:.5} svg .n text{font-size:8.5px}
svg .bar .outline{fill:none;stroke:#2f3b52} svg .bar .sub{fill:#5b6472}
svg .e{fill:none;stroke:#9aa3b2;stroke-width:1}
svg .bare{fill:#fdecea;stroke:#c62828;stroke-width:2;stroke-dasharray:6 3}
table{border-collapse:collapse;font-size:12px;margin-top:6px}
td,th{border:1px solid #d8dde5;padding:2px 8px;text-align:left}
details{margin-top:12px}
"""


def render(graph: TopologyGraph, options: RenderOptions) -> Artifact:
    tree = build_tree(graph, no_topology_switch=False)
    domains = build_domains(graph)
    svg, pic = _svg(graph, tree)
    bare = graph.nodes_without_topology()
    pending = sorted(n.name for n in graph.nodes if n.accelerator_pending and n.accelerator is None)
    no_domain = sum(1 for n in graph.nodes if n.fabric and n.accelerator is None and not n.accelerator_pending)
    bare_no_domain = sum(1 for n in graph.nodes if not n.fabric and n.accelerator is None and not n.accelerator_pending)

    def card(value: int, label: str, alert: bool = False) -> str:
        return f'<div class="card{" alert" if alert else ""}"><b>{value}</b><span>{escape(label)}</span></div>'

    cards = [
        card(len(graph.nodes), "nodes"),
        card(len(tree.parent), "switches"),
        card(tree.depth(), "fabric tiers"),
        card(len(domains.members), "accelerator domains"),
        card(len(bare), "nodes without topology", alert=bool(bare)),
    ]
    if pending:
        cards.append(card(len(pending), "domains pending", alert=True))
    sizes = Counter({d: len(domains.nodes(d)) for d in domains.members})
    legend = [
        f'<span><i style="background:{domain_colour(d)}"></i>{escape(d)} ({sizes[d]})</span>'
        for d in sorted(domains.members)[:MAX_LEGEND]
    ]
    if len(domains.members) > MAX_LEGEND:
        legend.append(f"<span>… and {len(domains.members) - MAX_LEGEND} more domains (see the table below)</span>")
    if no_domain:
        legend.append(f'<span><i style="background:{NO_DOMAIN}"></i>no domain ({no_domain})</span>')
    if pending:
        legend.append(f'<span><i style="background:{PENDING}"></i>domain pending ({len(pending)})</span>')
    if bare_no_domain:
        legend.append(f'<span><i style="background:{BARE}"></i>no topology, no domain ({bare_no_domain})</span>')
    notes: list[str] = []
    if bare:
        notes.append(
            f'<div class="alertbox"><b>{len(bare)} node(s) without topology</b> (the provider reported no '
            f"switches for them; Slurm tree files list them under <code>no-topology</code>): "
            f"{escape(compact_str(bare))}</div>"
        )
    if pic.folded:
        notes.append(
            f'<p class="note">{pic.folded} subtree(s) starting {pic.cut} level(s) below the top are folded into '
            "one box each to keep the picture readable; hover a box or bar for its nodes.</p>"
        )
    rows = []
    for d in sorted(domains.members)[:500]:
        names = domains.nodes(d)
        leaves = {tree.node_path[n][0] for n in names if tree.node_path.get(n)}
        rows.append(
            f'<tr><td><i style="display:inline-block;width:10px;height:10px;background:{domain_colour(d)}"></i> '
            f"{escape(d)}</td><td>{len(names)}</td><td>{len(leaves)}</td><td>{escape(compact_str(names))}</td></tr>"
        )
    table = (
        f"<details><summary>{len(domains.members)} accelerator domain(s)</summary><table><tr><th>domain</th>"
        f"<th>nodes</th><th>leaf switches</th><th>hostlist</th></tr>{''.join(rows)}</table></details>"
        if rows
        else ""
    )
    cluster = escape(graph.cluster)
    page = (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>Topology of {cluster}</title>'
        f"<style>{_CSS}</style></head><body>\n"
        f'<h1>Topology of {cluster}</h1><div class="meta">source: {escape(graph.provider)}</div>\n'
        f'<div class="cards">{"".join(cards)}</div>\n<div class="legend">{"".join(legend)}</div>\n'
        f'{"".join(notes)}\n<div class="scroll">{svg}</div>\n{table}\n</body></html>\n'
    )
    return Artifact(FORMAT, FILENAME, page, MEDIA_TYPE, len(graph.nodes))
