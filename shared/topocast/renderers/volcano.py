"""Volcano ``HyperNode`` objects (``topology.volcano.sh/v1alpha1``), one per switch.

A HyperNode is a network performance domain; Volcano jobs ask for
``networkTopology: {mode: hard, highestTierAllowed: N}``. Tier 1 is a leaf
switch whose members are Nodes; a higher switch lists its child switches as
``type: HyperNode`` members, with ``tier`` = 1 + the highest child tier.
``tierName`` follows the node labels (``tier-0`` = leaf), so the objects and
``fabric.topograph.run/tier-N`` describe the same thing.

Names must be DNS-1123 and, because a parent refers to them through
``exactMatch`` (validated as a qualified name by Volcano's webhook), at most
63 characters: other switch IDs are lowercased with a hash suffix (see
:func:`~topocast.renderers.k8s_common.dns_name`); the original ID is kept in
the ``topocast.dev/switch-id`` annotation. Every object carries
``app.kubernetes.io/managed-by: topocast``; a publisher deletes only
HyperNodes with that label, never ones Volcano's own discovery created.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import compress
from typing import Any

from topocast.errors import RenderError
from topocast.model.fabric import build_tree
from topocast.model.gc_pause import paused_gc
from topocast.model.graph import TopologyGraph
from topocast.renderers.base import OBJECTS_WANTED, Artifact, FormatRenderer, Renderer, RenderOptions
from topocast.renderers.k8s_common import (
    MANAGED_BY,
    MANAGED_BY_LABEL,
    MAX_LABEL_VALUE,
    all_dns_subdomains,
    all_plain,
    dns_label_node_names,
    dns_name,
    dump_yaml,
    is_dns_subdomain,
    yaml_scalar,
)
from topocast.renderers.k8s_labels import sample

FILENAME = "volcano-hypernodes.yaml"
MEDIA_TYPE = "application/yaml"
FORMAT = "volcano"
API_VERSION = "topology.volcano.sh/v1alpha1"
SWITCH_ID_ANNOTATION = "topocast.dev/switch-id"
SWITCH_NAME_ANNOTATION = "topocast.dev/switch-name"


def node_member(name: str) -> dict[str, Any]:
    """Select one Kubernetes node. ``exactMatch`` takes names of <= 63 characters;
    longer (still valid) node names are matched with an anchored regex instead."""
    if len(name) <= MAX_LABEL_VALUE:
        return {"type": "Node", "selector": {"exactMatch": {"name": name}}}
    return {"type": "Node", "selector": {"regexMatch": {"pattern": "^" + name.replace(".", r"\.") + "$"}}}


def hypernode_member(name: str) -> dict[str, Any]:
    return {"type": "HyperNode", "selector": {"exactMatch": {"name": name}}}


def render(graph: TopologyGraph, options: RenderOptions) -> Artifact:
    with paused_gc():
        return _render(graph)


@dataclass(frozen=True)
class _HyperNode:
    """What one HyperNode says: its switch, name, tier and members (child HyperNode names, then node names)."""

    switch: str
    name: str
    tier: int
    display: str | None
    children: list[str]
    nodes: list[str]

    def doc(self) -> dict[str, Any]:
        annotations = {SWITCH_ID_ANNOTATION: self.switch}
        if self.display is not None:
            annotations[SWITCH_NAME_ANNOTATION] = self.display
        return {
            "apiVersion": API_VERSION,
            "kind": "HyperNode",
            "metadata": {
                "name": self.name,
                "labels": {MANAGED_BY_LABEL: MANAGED_BY},
                "annotations": annotations,
            },
            "spec": {
                "tier": self.tier,
                "tierName": f"tier-{self.tier - 1}",
                "members": [*map(hypernode_member, self.children), *map(node_member, self.nodes)],
            },
        }


def _render(graph: TopologyGraph) -> Artifact:
    tree = build_tree(graph, no_topology_switch=False)
    order = list(tree.bfs())
    names: dict[str, str] = {}
    for sw in order:
        names[sw] = dns_name(sw)
    by_name: dict[str, str] = {}
    for sw, name in names.items():
        if name in by_name:
            raise RenderError(f"switches {by_name[name]!r} and {sw!r} both map to HyperNode name {name!r}")
        by_name[name] = sw

    warnings: list[str] = []
    placed = list(compress(tree.node_path, tree.node_path.values()))  # the nodes with a fabric path
    dns_labels = dns_label_node_names(graph)  # then every name is a valid node name, at most 63 long
    invalid = [] if dns_labels or all_dns_subdomains(placed) else sorted(n for n in placed if not is_dns_subdomain(n))
    if invalid:
        warnings.append(
            f"{len(invalid)} node name(s) are not valid Kubernetes node names and are left out of the "
            f"HyperNodes: {sample(invalid)}"
        )
    skip = set(invalid)
    tier: dict[str, int] = {}
    hypernodes: list[_HyperNode] = []
    mixed: list[str] = []
    for sw in reversed(order):  # children before parents
        children = [c for c in tree.child_switches.get(sw, []) if c in tier]
        nodes = (
            sorted(n for n in tree.child_nodes.get(sw, []) if n not in skip)
            if skip
            else sorted(tree.child_nodes.get(sw, []))
        )
        if not children and not nodes:
            continue  # HyperNode members need minItems 1
        if children and nodes:
            mixed.append(sw)
        tier[sw] = 1 + max((tier[c] for c in children), default=0)
        child_names = sorted(names[c] for c in children)
        hypernodes.append(_HyperNode(sw, names[sw], tier[sw], graph.switch_names.get(sw), child_names, nodes))
    if mixed:
        warnings.append(
            f"{len(mixed)} switch(es) have both nodes and switches below them, so their HyperNodes mix "
            f"Node and HyperNode members: {', '.join(sorted(mixed)[:5])}"
        )
    bare = graph.nodes_without_topology()
    if bare:
        warnings.append(f"{len(bare)} node(s) without topology are in no HyperNode: {sample(bare)}")
    if not hypernodes:
        warnings.append("the graph has no fabric: no HyperNodes to publish")
    hypernodes.sort(key=lambda h: (h.tier, h.name))
    docs = [h.doc() for h in hypernodes] if OBJECTS_WANTED.get() else []
    content = dump_hypernodes(hypernodes, dns_labels)
    return Artifact(FORMAT, FILENAME, content, MEDIA_TYPE, len(graph.nodes), docs, warnings)


# One HyperNode as dump_yaml prints it (spec at the top level, so members sit at two spaces), for
# values that print as one plain or quoted scalar: formatting the 100k members of a large fabric with
# one %-format each is ~10x faster than building their dicts and walking them.
_HEAD = (
    "---\napiVersion: %s\nkind: HyperNode\nmetadata:\n  name: %s\n  labels:\n    %s: %s\n  annotations:\n    %s: %s\n"
)
_SWITCH_NAME = "    %s: %s\n"
_SPEC = "spec:\n  tier: %d\n  tierName: %s\n  members:\n"
_MEMBER = "  - type: %s\n    selector:\n      exactMatch:\n        name: %s\n"


def dump_hypernodes(hypernodes: list[_HyperNode], dns_labels: bool = False) -> str:
    """``dump_yaml([h.doc() for h in hypernodes])``, byte for byte, formatted from the templates above.

    ``dns_labels``: every node name is known to be a DNS label (:func:`dns_label_node_names`).
    """
    memo: dict[str, str] = {}
    api, label_key, label_value, id_key, switch_name_key, node_kind, hypernode_kind = constants = [
        yaml_scalar(v, memo)
        for v in (
            API_VERSION,
            MANAGED_BY_LABEL,
            MANAGED_BY,
            SWITCH_ID_ANNOTATION,
            SWITCH_NAME_ANNOTATION,
            "Node",
            "HyperNode",
        )
    ]
    simple = None not in constants
    parts: list[str] = []
    for h in hypernodes:
        name, switch = yaml_scalar(h.name, memo), yaml_scalar(h.switch, memo)
        tier_name = yaml_scalar(f"tier-{h.tier - 1}", memo)
        display = yaml_scalar(h.display, memo) if h.display is not None else ""
        children = _member_lines(hypernode_kind, h.children, memo) if simple else None
        nodes = _member_lines(node_kind, h.nodes, memo, dns_labels) if simple else None
        if children is None or nodes is None or None in (name, switch, tier_name, display):
            parts.append(dump_yaml([h.doc()], memo))  # a value only PyYAML prints
            continue
        parts.append(_HEAD % (api, name, label_key, label_value, id_key, switch))
        if h.display is not None:
            parts.append(_SWITCH_NAME % (switch_name_key, display))
        parts += (_SPEC % (h.tier, tier_name), children, nodes)
    return "".join(parts)


def _member_lines(kind: str | None, names: list[str], memo: dict[str, str], dns_labels: bool = False) -> str | None:
    """The lines of :func:`node_member` / :func:`hypernode_member` entries for ``names`` (``exactMatch``
    selectors), or None for a name only PyYAML prints or one that needs a ``regexMatch``.
    ``dns_labels``: the names are known to be DNS labels (so at most 63 characters)."""
    if not names:
        return ""
    if all_plain(names, dns_labels=dns_labels) and (dns_labels or max(map(len, names)) <= MAX_LABEL_VALUE):
        head = f"  - type: {kind}\n    selector:\n      exactMatch:\n        name: "
        return head + f"\n{head}".join(names) + "\n"  # the usual case: one join for the list
    out = []
    for name in names:
        text = yaml_scalar(name, None)
        if text is None or len(name) > MAX_LABEL_VALUE:
            return None
        out.append(_MEMBER % (kind, text))
    return "".join(out)


RENDERER: Renderer = FormatRenderer(FORMAT, FILENAME, MEDIA_TYPE, "kubernetes-objects", (), render)
