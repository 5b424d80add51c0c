"""Merged sources: one provider gives the fabric tiers, an overlay the accelerator (NVLink) domains or nodes.

Topograph takes one provider per request. But EC2's "accelerator" value is the reservation-scoped
capacity block, not the NVLink clique (NVIDIA/topograph#293), and an ibnetdiscover dump knows no
NVLink at all; the GPU operator's ``nvidia.com/gpu.clique`` node label does. An overlay reads a
second source after the base provider and merges it in, node by node.

Grammar (``--overlay`` / ``TOPOCAST_OVERLAYS``, several separated by ``;``)::

    OVERLAY := SOURCE ":" ITEM ("," ITEM)*
    ITEM    := FIELD "=" VALUE
    FIELD   := domain | subdomain | fabric | preset

``k8s-labels:domain=nvidia.com/gpu.clique`` (the only SOURCE so far is ``k8s-labels``): ``domain``
and ``subdomain`` name the label keys of the accelerator domain and sub-domain; ``fabric`` a label
key of a switch tier, closest first (repeatable); ``preset`` a label set of
:data:`topocast.providers.k8s_labels.provider.PRESETS` (its fabric and domain keys both count as taken).
The overlay takes the domains when ``domain`` or ``preset`` is given, fabric when ``fabric`` or
``preset`` is.

Precedence (one rule per field, the same on every node):

* **Fabric tiers: the base wins.** The overlay's path is used only for a node the base places without
  one or does not know at all (and only when the overlay takes ``fabric``); it must fit the base's
  tree or the node is set aside: a path through a base node's name or contradicting the base's tree
  at one of its switches, or an overlay-only node named like a base switch, is refused before the
  merge (the overlay's node is set aside, or its path not taken), never the base node.
* **Accelerator domain: the overlay wins** where it has a usable value; elsewhere the base's value
  stays. The sub-domain travels with the domain it belongs to.
* Nodes are matched by instance ID, then by name; a name both know under different IDs is not merged.

Every disagreement is kept in the graph's per-node :attr:`~topocast.model.graph.TopologyGraph.notes`
(never in ``unplaced``: the node is placed, so the set-aside guard does not count it): an overlay
domain spanning several base domains (a clique across two capacity blocks), a node only one source
knows, a node whose overlay value was unsafe or missing (the base's is kept). Pure: the overlay's
graph comes from its provider; nothing here reads the world.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from topocast.errors import ProviderError
from topocast.model.changes import InstanceChange
from topocast.model.graph import Node, TopologyGraph
from topocast.model.placement import place_nodes
from topocast.providers.base import DiscoveryResult, Provider

__all__ = ["OVERLAY_SOURCES", "OverlaidProvider", "OverlaySpec", "apply_overlay", "parse_overlay"]

#: sources an overlay can read, with how an overlay's items become that provider's options
OVERLAY_SOURCES = ("k8s-labels",)
_FIELDS = ("domain", "subdomain", "fabric", "preset")


@dataclass(frozen=True)
class OverlaySpec:
    """One parsed ``SOURCE:FIELD=VALUE,...``."""

    source: str
    text: str
    domain: str | None = None
    subdomain: str | None = None
    fabric: tuple[str, ...] = ()
    preset: str | None = None

    @property
    def takes_domain(self) -> bool:
        return bool(self.domain or self.preset)

    @property
    def takes_fabric(self) -> bool:
        return bool(self.fabric or self.preset)

    def options(self) -> dict[str, Any]:
        """The overlay source's provider options (``k8s-labels``: a NodeLabelsConfig)."""
        out: dict[str, Any] = {"preset": self.preset, "accelerator_key": self.domain, "fabric_keys": list(self.fabric)}
        if self.subdomain:
            out["subdomain_key"] = self.subdomain
        if not self.preset:  # only the keys given (and nvidia.com/gpu.clique), never another scheme's labels
            out["schemes"] = ["custom"]
        return out


def parse_overlay(text: str) -> OverlaySpec:
    """``k8s-labels:domain=nvidia.com/gpu.clique`` -> :class:`OverlaySpec`; a bad one is one line naming it."""
    where = f"overlay {text!r}"
    source, sep, rest = text.strip().partition(":")
    if not sep or not rest.strip():
        raise ProviderError(f"{where}: expected SOURCE:FIELD=VALUE[,FIELD=VALUE...], e.g. k8s-labels:domain=KEY")
    if source not in OVERLAY_SOURCES:
        raise ProviderError(f"{where}: unknown overlay source {source!r}; known: {', '.join(OVERLAY_SOURCES)}")
    values: dict[str, list[str]] = defaultdict(list)
    for item in rest.split(","):
        key, eq, value = (part.strip() for part in item.partition("="))
        if not eq or not value or key not in _FIELDS:
            raise ProviderError(f"{where}: {item.strip()!r} is not FIELD=VALUE with FIELD one of {', '.join(_FIELDS)}")
        values[key].append(value)
    for key in ("domain", "subdomain", "preset"):
        if len(values[key]) > 1:
            raise ProviderError(f"{where}: {key} is given {len(values[key])} times")
    if not (values["domain"] or values["fabric"] or values["preset"]):
        raise ProviderError(f"{where}: takes nothing; give domain=KEY, fabric=KEY or preset=NAME")
    first = {k: v[0] for k, v in values.items() if v and k != "fabric"}
    return OverlaySpec(source, text.strip(), fabric=tuple(values["fabric"]), **first)


def apply_overlay(base: TopologyGraph, overlay: TopologyGraph, spec: OverlaySpec) -> tuple[TopologyGraph, list[str]]:
    """``base`` with ``overlay`` merged in by the precedence rule above; (graph, summary warnings)."""
    label = f"overlay {spec.source}"
    notes: dict[str, list[str]] = defaultdict(list)
    for name, note in base.notes.items():
        notes[name].append(note)
    by_id = {n.id: n for n in overlay.nodes if n.id}
    by_name = {n.name: n for n in overlay.nodes}
    matched: dict[str, Node] = {}  # base node name -> its overlay node
    for node in base.nodes:
        other = by_id.get(node.id) if node.id else None
        if other is None and node.name in by_name:
            candidate = by_name[node.name]
            if node.id and candidate.id and candidate.id != node.id:
                notes[node.name].append(
                    f"{label} has a node {node.name!r} with instance ID {candidate.id}, the base has {node.id}: "
                    "not merged; the base's values are kept"
                )
            else:
                other = candidate
        if other is not None:
            matched[node.name] = other
    claimed = {o.name for o in matched.values()} | {n.name for n in base.nodes}

    # an overlay domain whose members sit in several base domains (a clique across two capacity blocks)
    spans: dict[str, set[str]] = defaultdict(set)
    if spec.takes_domain:
        for node in base.nodes:
            other = matched.get(node.name)
            if other is not None and other.accelerator and node.accelerator:
                spans[other.accelerator].add(node.accelerator)

    # the overlay's paths are checked against the base's names before the merge: a path through a base
    # node's name, or an overlay-only node named like a base switch, would make placement find one name both
    # a node and a switch and set aside the *base* node; the offending overlay value goes instead
    # (several overlay nodes agreeing on another tree would otherwise outvote a small base in placement)
    above: dict[str, tuple[int, tuple[str, ...]]] = {}  # base switch -> (its tier, the path above it)
    for n in base.nodes:
        for tier, sw in enumerate(n.fabric):
            above.setdefault(sw, (tier, tuple(n.fabric[tier + 1 :])))
    base_switches = set(above)
    base_names = {n.name for n in base.nodes}

    def path_clash(other: Node) -> str | None:
        through = sorted(set(other.fabric) & base_names)
        if through:
            return f"{label}'s fabric path of {other.name!r} runs through {', '.join(through[:3])}, a base node"
        for tier, sw in enumerate(other.fabric):
            if sw in above and above[sw] != (tier, tuple(other.fabric[tier + 1 :])):
                return (
                    f"{label}'s fabric path of {other.name!r} ({'/'.join(other.fabric)}) contradicts the base's "
                    f"tree at switch {sw!r}"
                )
        return None

    aside = dict(base.unplaced)
    merged: list[Node] = []
    took_domain = took_fabric = 0
    for node in base.nodes:
        other = matched.get(node.name)
        update: dict[str, Any] = {}
        if spec.takes_domain:
            if other is None:
                notes[node.name].append(f"not known to {label}; the base's domain {node.accelerator!r} is kept")
            elif other.accelerator:
                if other.accelerator != node.accelerator:
                    update.update(accelerator=other.accelerator, subdomain=other.subdomain, accelerator_pending=False)
                    took_domain += 1
                bases = spans[other.accelerator]
                if len(bases) > 1:
                    notes[node.name].append(
                        f"{label} domain {other.accelerator!r} spans {len(bases)} base domains "
                        f"({', '.join(sorted(bases))}); the overlay's is used (it wins for domains)"
                    )
            else:
                why = overlay.unplaced.get(other.name)
                reason = f"{label} value not usable ({why})" if why else f"{label} has no domain for it"
                notes[node.name].append(f"{reason}; the base's domain {node.accelerator!r} is kept")
        clash = path_clash(other) if spec.takes_fabric and not node.fabric and other is not None else None
        if clash:
            notes[node.name].append(f"{clash}: not used; the node stays without a fabric path")
        elif spec.takes_fabric and not node.fabric and other is not None and other.fabric:
            update["fabric"] = list(other.fabric)
            took_fabric += 1
            notes[node.name].append(f"no fabric path from the base; {label}'s path is used")
        merged.append(node.model_copy(update=update) if update else node)

    added = []
    for other in overlay.nodes:
        if other.name in claimed or other.id in {n.id for n in matched.values() if n.id}:
            continue
        fabric = list(other.fabric) if spec.takes_fabric else []
        accelerator = other.accelerator if spec.takes_domain else None
        if not (fabric or accelerator):
            continue  # carries nothing the overlay takes (a CPU node): not this overlay's business
        clash = path_clash(other) if fabric else None
        if other.name in base_switches:
            clash = f"only {label} knows node {other.name!r}, which is the name of a base switch"
        if clash:
            aside[other.name] = f"{clash}; this overlay node is left out (the base wins for the fabric)"
            continue
        added.append(other.name)
        subdomain = other.subdomain if accelerator else None
        merged.append(other.model_copy(update={"fabric": fabric, "accelerator": accelerator, "subdomain": subdomain}))
        took = ", ".join(x for x, v in (("fabric path", fabric), ("domain", accelerator)) if v)
        notes[other.name].append(f"only {label} knows this node (the base does not); added with its {took}")

    graph = place_nodes(
        base.cluster,
        base.provider,
        merged,
        switch_names=base.switch_names,
        unplaced=aside,
        notes={name: "; ".join(lines) for name, lines in notes.items()},
    )
    conflicts = sum(1 for n in graph.notes if n not in base.notes)
    summary = (
        f"{spec.text}: {len(matched)} of {len(base.nodes)} node(s) matched, {took_domain} took the overlay's domain, "
        f"{took_fabric} its fabric path, {len(added)} added from the overlay; {conflicts} node note(s) "
        "(the graph's notes)"
    )
    return graph, [summary]


@dataclass
class OverlaidProvider:
    """A base provider whose every result gets the overlays applied (each a full read of its source)."""

    base: Provider
    overlays: Sequence[tuple[OverlaySpec, Provider]] = field(default_factory=tuple)
    name: str = field(init=False)
    incremental: bool = field(init=False)

    def __post_init__(self) -> None:
        self.name, self.incremental = self.base.name, self.base.incremental

    def discover_full(self, previous: TopologyGraph | None) -> DiscoveryResult:
        return self._apply(self.base.discover_full(previous))

    def discover_changes(self, previous: TopologyGraph, changes: Sequence[InstanceChange]) -> DiscoveryResult:
        return self._apply(self.base.discover_changes(previous, changes))

    def scope(self, change: InstanceChange) -> str | None:
        return self.base.scope(change)

    def _apply(self, result: DiscoveryResult) -> DiscoveryResult:
        graph, warnings, calls = result.graph, list(result.warnings), dict(result.api_calls)
        for spec, provider in self.overlays:
            read = provider.discover_full(None)
            warnings += [f"overlay {spec.source}: {w}" for w in read.warnings]
            for op, count in read.api_calls.items():
                calls[f"overlay.{op}"] = calls.get(f"overlay.{op}", 0) + count
            graph, summary = apply_overlay(graph, read.graph, spec)
            warnings += summary
        return DiscoveryResult(graph, calls, warnings, unsettled=result.unsettled)
