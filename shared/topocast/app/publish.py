"""The publish use case: a generation in, every publisher serving the newest manifest out.

Policies (docs/architecture.md, "Who decides what"):

* A request for a superseded generation publishes the **newest** manifest (one that is already
  published is acknowledged without calls).
* The blast-radius guard may hold it (``done``: a reconcile or the operator releases it; metric ``held``).
* A publish that did not finish everywhere (e.g. Kubernetes half done) is ``retry``: publishers are
  idempotent, so the redelivery redoes only the parts not done; the published record moves only
  when every publisher succeeded.
* A publish where the target refused some items for good (Kubernetes: an admission policy refusing one
  node pool's label PATCHes) and served all the rest is ``done`` with a warning and the metric
  ``nodes_refused``: a retry would meet the same answer (the next generation tries them again).
* What a publisher reports in its result's ``metrics`` (Kubernetes: ``Drift``, ``NodesPatched``...) is
  counted through the Metrics port, whether or not the publish finished.
* A generation that was never rendered is dead-lettered (``drop``): a retry cannot create it.

:func:`publish_manifest` is the stage under the use case: it compares the manifest's graph with the
last *published* one (the :class:`~topocast.pipeline.publish_state.PublishedRecord`, which keeps the
node names, so the comparison never depends on old generations still existing), holds the publish
when the guard says so (recording a :class:`~topocast.pipeline.guard.HoldRecord`), and records the
new published state only when every publisher succeeded. :func:`confirm_on_reconcile` is for the
reconcile (full discovery) path: it confirms, node by node, the held nodes it still sees gone, and
the next :func:`publish_manifest` counts only the rest of the loss against the limit (a held node
the reconcile sees again is simply present again).
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace

from topocast.app import metrics as m
from topocast.app.outcome import Outcome
from topocast.model.graph import TopologyGraph
from topocast.pipeline.artifacts import ArtifactNotFoundError
from topocast.pipeline.guard import (
    DEFAULT_MAX_LOSS_FRACTION,
    GuardDecision,
    check,
    confirm,
    confirmed_gone,
    override_allows,
    reconcile_confirms,
    rehold,
    seen_gone_twice,
)
from topocast.ports.protocols import ArtifactStore, GraphStore, Publisher, PublishPorts, PublishState
from topocast.ports.records import HoldRecord, Manifest, PublishedRecord, PublishResult, already_published

__all__ = ["PublishOutcome", "confirm_on_reconcile", "load_files", "publish", "publish_manifest"]

log = logging.getLogger("topocast.app")


def publish(ports: PublishPorts, generation: int) -> Outcome:
    latest = ports.artifacts.latest_manifest()
    if latest is not None and latest.generation >= generation:
        manifest = latest
    else:
        try:
            manifest = ports.artifacts.get_manifest(generation)
        except ArtifactNotFoundError as exc:
            return Outcome.drop(f"generation {generation} was never rendered: {exc}")
    if manifest.generation != generation:
        log.info("generation %d superseded by %d; publishing the newer one", generation, manifest.generation)
    if already_published(ports.publish_state.load_published(), manifest):
        return Outcome.done(f"generation {manifest.generation} is already published", generation=manifest.generation)
    outcome = publish_manifest(
        manifest,
        load_files(ports.artifacts, manifest),
        ports.publishers(),
        graphs=ports.graphs,
        state=ports.publish_state,
        max_loss_fraction=ports.guard_max_loss,
        override=ports.override.allowed_generation(),
    )
    m.report_publisher_metrics(outcome.results.values(), ports.metrics)  # Drift even when incomplete
    if outcome.held:
        ports.metrics.count(m.HELD)
        log.warning("publish of generation %d HELD by the blast-radius guard: %s", manifest.generation, outcome.detail)
        return Outcome.done(f"held: {outcome.detail}", action="held", generation=manifest.generation)
    if not outcome.published:
        ports.metrics.count(m.PUBLISH_INCOMPLETE)
        log.warning("generation %d not fully published, retrying: %s", manifest.generation, outcome.detail)
        return Outcome.retry(f"generation {manifest.generation} not fully published: {outcome.detail}")
    ports.metrics.count(m.PUBLISHES)
    refused_as = m.REPORTED_AS[m.NODES_REFUSED]
    refused = sum(int((getattr(r, "metrics", None) or {}).get(refused_as, 0)) for r in outcome.results.values())
    if refused:
        log.warning(
            "published generation %d with %d node(s) refused (not retried): %s",
            manifest.generation,
            refused,
            outcome.detail,
        )
        return Outcome.done(outcome.detail, action="published", generation=manifest.generation, refused=refused)
    log.info("published generation %d: %s", manifest.generation, outcome.detail)
    return Outcome.done(outcome.detail, action="published", generation=manifest.generation)


@dataclass(frozen=True)
class PublishOutcome:
    """What :func:`publish_manifest` did."""

    #: every publisher now serves this manifest
    published: bool
    #: the guard held it (nothing was pushed)
    held: bool
    guard: GuardDecision
    results: dict[str, PublishResult]
    detail: str


def load_files(artifacts: ArtifactStore, manifest: Manifest) -> dict[str, bytes]:
    """The bytes of every file a manifest lists (for publishing a manifest rendered earlier)."""
    return {a.file: artifacts.get_artifact(manifest.generation, a.file) for a in manifest.artifacts}


def publish_manifest(
    manifest: Manifest,
    files: Mapping[str, bytes],
    publishers: Sequence[Publisher],
    *,
    graphs: GraphStore,
    state: PublishState,
    max_loss_fraction: float = DEFAULT_MAX_LOSS_FRACTION,
    override: str | None = None,
) -> PublishOutcome:
    """Guard, publish, record. ``override``: the operator's allow-generation value, if any."""
    new_nodes = set(graphs.get(manifest.generation).graph.node_names())
    last = state.load_published()
    previous = set(last.nodes) if last is not None else None
    hold = state.load_hold()
    lost = sorted((previous or set()) - new_nodes)
    decision = check(
        previous,
        new_nodes,
        max_loss_fraction,
        confirmed_gone=confirmed_gone(hold, lost),
        override=override_allows(override, manifest.generation),
    )
    if not decision.allow:
        if hold is None or (hold.generation, hold.lost) != (manifest.generation, decision.lost):
            new = HoldRecord(manifest.generation, decision.lost, last.generation if last else None, decision.reason)
            state.save_hold(rehold(hold, new))
        return PublishOutcome(False, True, decision, {}, decision.reason)
    results = {p.name: p.publish(manifest, files) for p in publishers}
    done = all(r.published for r in results.values())
    if done:
        state.save_published(
            PublishedRecord(manifest.generation, manifest.graph_sha256, sorted(new_nodes), publishers=list(results))
        )
        if hold is not None:
            _after_publish(state, hold, manifest.generation, new_nodes)
    summary = "; ".join(f"{name}: {r.detail}" for name, r in results.items()) or "no publishers configured"
    return PublishOutcome(done, False, decision, results, f"{decision.reason}. {summary}")


def _after_publish(state: PublishState, hold: HoldRecord, generation: int, published: set[str]) -> None:
    """The hold is released. Only when the generation published is older than the hold's (a manifest
    rendered before the reconcile went first) do the confirmations of nodes it still holds stay, for its
    successor, which loses them."""
    still = sorted(set(hold.confirmed_gone) & published)
    if not still or generation >= hold.generation:
        state.clear_hold()
        return
    reason = f"not held: {len(still)} published node(s) a reconcile confirmed gone, for the next publish"
    state.save_hold(replace(hold, lost=still, confirmed_gone=still, reason=reason))


def confirm_on_reconcile(
    state: PublishState,
    reconcile_graph: TopologyGraph,
    earlier: Collection[str] | None = None,
    generation: int | None = None,
    max_loss_fraction: float = DEFAULT_MAX_LOSS_FRACTION,
) -> HoldRecord | None:
    """After a full discovery: confirm, node by node, the published nodes it sees gone that an earlier read
    saw gone too: the held ones (the held generation's read) and, with ``earlier`` (the node names of the
    stored graph this discovery replaced), the ones that graph already lacked.

    Returns the hold when this read confirmed a held node not confirmed before (the caller then asks for
    the publish of the latest manifest), or None when there is nothing new to confirm. For a loss no
    publish held yet, but larger than ``max_loss_fraction`` (its publish, still to come, would be held),
    the confirmations are written as a record of their own (``generation``: the full discovery's) and
    None is returned: that publish finds them. Held nodes the read sees again are left unconfirmed: they
    are present again and drop out of the next check.
    """
    hold = state.load_hold()
    last = state.load_published()
    seen = set(reconcile_graph.node_names())
    gone = set(reconcile_confirms(hold, seen)) if hold is not None else set()
    twice = set(seen_gone_twice(last.nodes, earlier, seen)) if last is not None else set()
    if hold is None:
        lost = sorted(set(last.nodes) - seen) if last is not None else []
        if last is None or not twice or len(lost) <= max_loss_fraction * len(last.nodes):
            return None
        reason = f"not held yet: {len(twice)} published node(s) gone in two reads (the stored graph and a full one)"
        state.save_hold(confirm(HoldRecord(generation or last.generation, lost, last.generation, reason), twice))
        return None
    if not twice <= set(hold.lost):  # gone in two reads since the held attempt: part of the loss too
        hold = replace(hold, lost=sorted(set(hold.lost) | twice))
    if gone | twice <= set(hold.confirmed_gone):
        return None
    confirmed = confirm(hold, gone | twice)
    state.save_hold(confirmed)
    return confirmed
