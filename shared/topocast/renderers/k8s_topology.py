"""The topology levels Kueue and KAI share, computed once in one place.

Both schedulers take an ordered list of node label keys, coarsest first, and
group nodes by the values of those labels. The levels follow the node labels
topocast writes (see :mod:`topocast.renderers.k8s_labels`)::

    tier-(D-1)  ...  tier-1  tier-0  [accelerator domain]  kubernetes.io/hostname

where D is the deepest fabric path. The accelerator level is included only if
every node with fabric has a domain (a node missing a level label is ignored by
both schedulers). Nodes whose domain is still pending count as having one, so
the level set does not flap while a node boots: Kueue's ``levels`` are
immutable, and changing them means deleting and recreating the Topology.

Both schedulers name a domain by the values of every level above it, so the
accelerator level must sit below a tier that holds every domain whole. When
domains straddle the closest tiers (an NVLink domain cabled to two leaves),
those tiers are left out and the accelerator level goes directly below the
closest tier that holds every domain (:mod:`topocast.renderers.k8s_nesting`);
the warning names the tiers and the domains. The tier labels stay on the nodes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from topocast.errors import RenderError
from topocast.model.fabric import NO_TOPOLOGY, node_columns
from topocast.model.graph import Node, TopologyGraph
from topocast.renderers.base import RenderOptions
from topocast.renderers.k8s_common import HOSTNAME_LABEL, MANAGED_BY, MANAGED_BY_LABEL, check_dns_subdomain
from topocast.renderers.k8s_labels import LabelKeys, sample
from topocast.renderers.k8s_nesting import DomainCuts, domain_cuts

#: Both CRDs: ``spec.levels`` minItems 1, maxItems 16, nodeLabel maxLength 316.
MAX_LEVELS = 16
MAX_NODE_LABEL = 316


@dataclass(frozen=True)
class Levels:
    keys: list[str]  # coarsest -> finest, hostname last
    fabric_levels: int  # tiers labelled on the nodes (some may be left out of ``keys``)
    accelerator: bool
    warnings: list[str] = field(default_factory=list)
    #: tier keys left out so that no level cuts an accelerator domain, coarsest first
    left_out: list[str] = field(default_factory=list)


def topology_levels(graph: TopologyGraph, options: RenderOptions, scheduler: str) -> Levels:
    """Levels for ``graph`` under ``options.labels``; ``scheduler`` names the consumer in messages."""
    keys = LabelKeys(options.labels)
    col = node_columns(graph)
    depth = max(map(len, col.fabrics), default=0)
    n_fabric = keys.fabric_levels(depth)
    fabric = [k for i in reversed(range(n_fabric)) if (k := keys.fabric_key(i)) is not None]
    # every node has a domain (the usual graph), or every node with fabric has one or waits for it
    no_domain = None in col.accelerators
    accelerator = col.accelerators.count(None) < len(col.accelerators) and (
        not no_domain or all(n.accelerator is not None or n.accelerator_pending for n in graph.nodes if n.fabric)
    )
    # Keep tiers whole_from .. n_fabric-1 (fabric[] is coarsest first, so fabric[i] is tier n_fabric-1-i).
    cuts = domain_cuts(graph, n_fabric) if accelerator else None
    whole_from = cuts.deepest_whole() if cuts is not None else 0
    kept, left_out = fabric[: n_fabric - whole_from], fabric[n_fabric - whole_from :]
    levels = [*kept, *([keys.accelerator] if accelerator else []), HOSTNAME_LABEL]
    if len(levels) > MAX_LEVELS:
        raise RenderError(
            f"the fabric has {n_fabric} tiers, which gives {len(levels)} {scheduler} topology levels "
            f"(limit {MAX_LEVELS}); set labels.fabric_keys to label only the closest tiers"
        )
    if len(set(levels)) != len(levels):  # LabelKeys rejects this already; kept as the CRD's own rule
        raise RenderError(f"{scheduler} topology levels must be unique: {levels}")
    for key in levels:
        if len(key) > MAX_NODE_LABEL:
            raise RenderError(f"{scheduler} level {key[:40]!r}... is {len(key)} characters (limit {MAX_NODE_LABEL})")

    warnings: list[str] = []

    if cuts is not None and left_out:
        warnings.append(_left_out_message(scheduler, kept, left_out, cuts, whole_from))

    def lacks_a_level(n: Node) -> bool:
        # A node has tier-i for i < len(fabric); a node without fabric or domain has tier-0=no-topology.
        # Every kept tier range includes the top tier (n_fabric-1), so that is the one to have.
        bare = not n.fabric and n.accelerator is None
        fabric_ok = not kept or len(n.fabric) >= n_fabric or (n_fabric == 1 and bare)
        return not fabric_ok or (accelerator and n.accelerator is None)

    # only a node with fewer tiers than the top one or without a domain can lack one: none in the usual graph
    maybe = (kept and min(map(len, col.fabrics), default=n_fabric) < n_fabric) or (accelerator and no_domain)
    missing = sorted(n.name for n in graph.nodes if lacks_a_level(n)) if maybe else []
    if missing:
        warnings.append(
            f"{len(missing)} of {len(graph.nodes)} node(s) lack a label for some of the {len(levels)} "
            f"{scheduler} levels and will be ignored by {scheduler}: {sample(missing)}"
        )
    if n_fabric == 1 and kept and any(not n.fabric and n.accelerator is None for n in graph.nodes):
        warnings.append(f"nodes without topology carry {fabric[0]}={NO_TOPOLOGY}; {scheduler} sees them as one domain")
    if not fabric and not accelerator:
        warnings.append(
            f"the graph has no fabric or accelerator topology; the {scheduler} Topology has only the hostname level"
        )
    return Levels(levels, n_fabric, accelerator, warnings, left_out)


def _left_out_message(scheduler: str, kept: list[str], left_out: list[str], cuts: DomainCuts, whole_from: int) -> str:
    """One line: the tiers left out, how many domains each would cut, and where the domain level went."""
    spans = [
        f"{len(cuts.cut[t])} of {cuts.domains} accelerator domains span several {key} values "
        f"({sample(cuts.cut[t], 120)})"
        for t, key in zip(range(whole_from - 1, -1, -1), left_out, strict=True)  # left_out is coarsest first
    ]
    where = f"directly below {kept[-1]}" if kept else "at the top"
    what = "level" if len(left_out) == 1 else "levels"
    return (
        f"{what} {', '.join(left_out)} left out: {' and '.join(spans)}; {scheduler} would split those domains, "
        f"so the accelerator level sits {where} and every domain stays whole (the nodes keep their tier labels)"
    )


def topology_object(api_version: str, name: str, levels: list[str]) -> dict[str, Any]:
    """A cluster-scoped ``Topology`` (same shape for Kueue and KAI)."""
    check_dns_subdomain(name, "topology_object_name")
    return {
        "apiVersion": api_version,
        "kind": "Topology",
        "metadata": {"name": name, "labels": {MANAGED_BY_LABEL: MANAGED_BY}},
        "spec": {"levels": [{"nodeLabel": key} for key in levels]},
    }
