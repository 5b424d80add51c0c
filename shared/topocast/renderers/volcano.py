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

from typing import Any

from topocast.errors import RenderError
from topocast.model.fabric import build_tree
from topocast.model.gc_pause import paused_gc
from topocast.model.graph import TopologyGraph
from topocast.renderers.base import Artifact, RenderOptions
from topocast.renderers.k8s_common import (
    MANAGED_BY,
    MANAGED_BY_LABEL,
    MAX_LABEL_VALUE,
    all_plain,
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
    invalid = sorted(n for n in tree.node_path if tree.node_path[n] and not is_dns_subdomain(n))
    if invalid:
        warnings.append(
            f"{len(invalid)} node name(s) are not valid Kubernetes node names and are left out of the "
            f"HyperNodes: {sample(invalid)}"
        )
    skip = set(invalid)
    tier: dict[str, int] = {}
    objects: dict[str, dict[str, Any]] = {}
    mixed: list[str] = []
    for sw in reversed(order):  # children before parents
        children = [c for c in tree.child_switches.get(sw, []) if c in objects]
        nodes = sorted(n for n in tree.child_nodes.get(sw, []) if n not in skip)
        if not children and not nodes:
            continue  # HyperNode members need minItems 1
        if children and nodes:
            mixed.append(sw)
        tier[sw] = 1 + max((tier[c] for c in children), default=0)
        members = [hypernode_member(names[c]) for c in sorted(children, key=names.__getitem__)]
        members += [node_member(n) for n in nodes]
        annotations = {SWITCH_ID_ANNOTATION: sw}
        if sw in graph.switch_names:
            annotations[SWITCH_NAME_ANNOTATION] = graph.switch_names[sw]
        objects[sw] = {
            "apiVersion": API_VERSION,
            "kind": "HyperNode",
            "metadata": {
                "name": names[sw],
                "labels": {MANAGED_BY_LABEL: MANAGED_BY},
                "annotations": annotations,
            },
            "spec": {"tier": tier[sw], "tierName": f"tier-{tier[sw] - 1}", "members": members},
        }
    if mixed:
        warnings.append(
            f"{len(mixed)} switch(es) have both nodes and switches below them, so their HyperNodes mix "
            f"Node and HyperNode members: {', '.join(sorted(mixed)[:5])}"
        )
    bare = graph.nodes_without_topology()
    if bare:
        warnings.append(f"{len(bare)} node(s) without topology are in no HyperNode: {sample(bare)}")
    if not objects:
        warnings.append("the graph has no fabric: no HyperNodes to publish")
    docs = sorted(objects.values(), key=lambda o: (o["spec"]["tier"], o["metadata"]["name"]))
    return Artifact(FORMAT, FILENAME, dump_hypernodes(docs), MEDIA_TYPE, len(graph.nodes), docs, warnings)


# Members as dump_yaml prints them (spec at the top level, so members sit at two spaces):
# formatting the 100k Node members with one %-format each is ~10x faster than walking their dicts.
_MEMBER = "  - type: %s\n    selector:\n      exactMatch:\n        name: %s\n"
_MEMBERS_EMPTY = "  members: []\n"


def dump_hypernodes(docs: list[dict[str, Any]]) -> str:
    """``dump_yaml(docs)``, byte for byte, with the ``exactMatch`` member lists formatted directly."""
    parts: list[str] = []
    memo: dict[str, str] = {}
    for doc in docs:
        spec = doc["spec"]
        members = _members_text(spec["members"], memo)
        head = dump_yaml([{**doc, "spec": {**spec, "members": []}}], memo)
        if members is None or not head.endswith(_MEMBERS_EMPTY) or list(spec)[-1] != "members":
            parts.append(dump_yaml([doc], memo))  # a shape or a value only PyYAML prints
        else:
            parts.append(head[: -len(_MEMBERS_EMPTY)] + "  members:\n" + members)
    return "".join(parts)


def _members_text(members: list[dict[str, Any]], memo: dict[str, str]) -> str | None:
    """The lines of members shaped like :func:`node_member`'s exactMatch, or None for any other."""
    selectors = [m["selector"] for m in members]
    names = [sel["exactMatch"]["name"] for sel in selectors if "exactMatch" in sel]
    if len(names) == len(members) and all_plain(names):  # the usual case: one check for the whole list
        kinds = {t: yaml_scalar(t, memo) for t in {m["type"] for m in members}}
        if None not in kinds.values():
            return "".join([_MEMBER % (kinds[m["type"]], name) for m, name in zip(members, names, strict=True)])
    out = []
    for m in members:
        match = m["selector"].get("exactMatch")
        kind = yaml_scalar(m["type"], memo)
        name = yaml_scalar(match["name"], None) if match is not None else None
        if name is None or kind is None:
            return None
        out.append(_MEMBER % (kind, name))
    return "".join(out)
