"""Which fabric tiers cut an accelerator domain, read the way Kueue and KAI read their levels.

Kueue names a domain at level k by the values of levels 0..k (coarsest first): two nodes share a
level-k domain only when they agree on every level above it as well. KAI builds its domain IDs the
same way. With the accelerator (NVLink) level below ``tier-t``, a domain whose nodes hang off two
``tier-t`` switches becomes two scheduler domains, and a job that asks for one NVLink domain gets
part of one, without any error.

Fabric tiers among themselves always nest on a validated graph (every node of a leaf has the same
path and a switch has one parent, so a ``tier-t`` value has one chain of values above it), and a
host lies in one domain. So the one pair of adjacent levels that can cut is (lowest kept tier,
accelerator domain), and this module computes, for every tier, which domains it would cut.
"""

from __future__ import annotations

from dataclasses import dataclass

from topocast.model.fabric import node_columns, shared
from topocast.model.graph import TopologyGraph


@dataclass(frozen=True)
class DomainCuts:
    """``cut[t]``: the domains whose nodes disagree on tiers ``t .. n_fabric-1`` (sorted).

    A domain cut at tier t is cut at every tier below it too, so ``cut[0] ⊇ cut[1] ⊇ ...``.
    """

    domains: int  # domains with at least one node that carries every tier label
    cut: list[list[str]]

    def deepest_whole(self) -> int:
        """The closest tier (0 = leaf) that keeps every domain whole; ``len(cut)`` when none does."""
        return next((t for t, names in enumerate(self.cut) if not names), len(self.cut))


def domain_cuts(graph: TopologyGraph, n_fabric: int) -> DomainCuts:
    """Domain cuts of the ``n_fabric`` labelled tiers (shared by the Kueue and KAI renderers)."""
    return shared(graph, ("domain-cuts", n_fabric), lambda: _domain_cuts(graph, n_fabric))


def _domain_cuts(graph: TopologyGraph, n_fabric: int) -> DomainCuts:
    col = node_columns(graph)
    paths = dict(zip(col.leaves, col.fabrics, strict=True))  # a validated graph has one path per leaf
    above: dict[str, set[tuple[str, ...]]] = {}  # domain -> the labelled paths of its nodes
    for domain, leaf in set(zip(col.accelerators, col.leaves, strict=True)):
        if domain is None or leaf is None:
            continue  # no domain label (none yet, or pending), or no tier labels: cuts nothing
        path = paths[leaf]
        if len(path) < n_fabric:
            continue  # lacks the top tier's label, so Kueue and KAI ignore the node
        above.setdefault(domain, set()).add(tuple(path[:n_fabric]))
    cut = [sorted(d for d, ps in above.items() if len({p[t:] for p in ps}) > 1) for t in range(n_fabric)]
    return DomainCuts(len(above), cut)
