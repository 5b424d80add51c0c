"""The render use case: a debounce timer in, rendered files + a hand-off to publish out.

Policies (docs/architecture.md, "Who decides what"):

* The debouncer decides whether this timer renders (quiet window, max wait, one live timer).
* A failed render (corrupt graph, renderer error, storage) keeps the last publish in place and is
  **retried** by the debouncer (a retry timer after the quiet window); after ``render_attempts``
  failures in a row it is **dead-lettered** (outcome ``drop``: the DLQ + metric
  ``render_dead_lettered``) and the debouncer goes idle, so the next change renders again.
* A copy of the timer that arrives while its render holds the lease is **retried** (not
  acknowledged), and any failure after the claim releases it: a render that died is redone.
* Publish is requested when what is published differs from what is rendered (generation or
  graph sha256 of the published record against the current manifest), not only when the files
  changed: a publish that failed or was held earlier is caught up by the next render.
"""

from __future__ import annotations

import logging
from typing import Any

from topocast.app import metrics as m
from topocast.app.outcome import Outcome
from topocast.app.ports import RenderPorts
from topocast.pipeline.render_stage import render_generation

__all__ = ["render"]

log = logging.getLogger("topocast.app")


def render(ports: RenderPorts, timer: Any) -> Outcome:
    """Handle one debounce timer (its message body, as text or parsed)."""
    decision = ports.debouncer.on_timer(timer)
    if decision.action == "retry":  # a copy of the timer whose render holds the lease: redeliver it later
        return Outcome.retry(decision.reason, action="retry")
    if not decision.render:
        return Outcome.done(f"{decision.action}: {decision.reason}", action=decision.action)
    # from the claim on, any failure releases it (a retry timer), so the retry renders without waiting
    # out the lease; only a process death leaves the lease to run out (then a redelivered timer renders)
    try:
        result = render_generation(ports.graphs, ports.artifacts, None, ports.formats, ports.render_options)
        manifest = result.manifest
        last = ports.publish_state.load_published()
        stale = last is None or (last.generation, last.graph_sha256) != (manifest.generation, manifest.graph_sha256)
        if stale:
            ports.handoff.request_publish(manifest.generation, "rendered", manifest.graph_sha256[:12])
        after = ports.debouncer.mark_rendered(ports.cluster, decision, result.generation)
    except Exception as exc:
        ports.metrics.count(m.RENDER_FAILURES)
        after = ports.debouncer.render_failed(ports.cluster, decision, max_failures=ports.render_attempts)
        if after.action == "drop":
            ports.metrics.count(m.RENDER_DEAD_LETTERED)
            log.error("render failed for good, the last published configuration stays: %s", exc)
            return Outcome.drop(f"render failed, the last published configuration stays: {exc}", action="failed")
        log.error("render failed (%s), the last published configuration stays: %s", after.reason, exc)
        return Outcome.done(f"render failed, retry armed: {exc}", action="failed", next=after.reason)
    ports.metrics.count(m.RENDERS)
    for w in result.warnings:
        log.warning("render: %s", w)
    return Outcome.done(
        f"rendered generation {result.generation}",
        action="rendered",
        generation=result.generation,
        changed=result.changed,
        publish=stale,
        next=after.action,
    )
