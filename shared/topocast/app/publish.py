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
"""

from __future__ import annotations

import logging

from topocast.app import metrics as m
from topocast.app.outcome import Outcome
from topocast.app.ports import PublishPorts
from topocast.pipeline.artifacts import ArtifactNotFoundError
from topocast.pipeline.publish_stage import load_files, publish_manifest

__all__ = ["publish"]

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
    last = ports.publish_state.load_published()
    if last is not None and (last.generation, last.graph_sha256) == (manifest.generation, manifest.graph_sha256):
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
    refused = sum(
        int((getattr(r, "metrics", None) or {}).get(m.EMF_NAMES[m.NODES_REFUSED], 0)) for r in outcome.results.values()
    )
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
