"""The render use case: a debounce timer in, rendered files + a hand-off to publish out.

Policies (docs/architecture.md, "Who decides what"):

* The debouncer decides whether this timer renders (quiet window, max wait, one live timer).
* A timer that arrives while the render it started holds the lease is ``retry``: if that render
  died, the redelivery after the lease renders.
* A render that fails after its claim (corrupt graph, renderer error, storage, the publish hand-off,
  recording the render) keeps the last publish in place, **releases** the claim (the timer is due
  again) and is ``retry``, so the platform's redelivery renders at once; after ``render_attempts``
  failures in a row it is **dead-lettered** (outcome ``drop``: the DLQ + metric
  ``render_dead_lettered``) and the debouncer goes idle, so the next change renders again.
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
from topocast.pipeline.debounce import Decision
from topocast.pipeline.render_stage import render_generation

__all__ = ["render"]

log = logging.getLogger("topocast.app")


def render(ports: RenderPorts, timer: Any) -> Outcome:
    """Handle one debounce timer (its message body, as text or parsed)."""
    decision = ports.debouncer.on_timer(timer)
    if decision.action == "retry":
        return Outcome.retry(decision.reason, action="retry")
    if not decision.render:
        return Outcome.done(f"{decision.action}: {decision.reason}", action=decision.action)
    try:
        return _render(ports, decision)
    except Exception as exc:  # anything after the claim: release it, so the retry renders at once
        ports.metrics.count(m.RENDER_FAILURES)
        after = ports.debouncer.render_failed(ports.cluster, decision, max_failures=ports.render_attempts)
        if after.action == "drop":
            ports.metrics.count(m.RENDER_DEAD_LETTERED)
            log.error("render failed for good, the last published configuration stays: %s", exc)
            return Outcome.drop(f"render failed, the last published configuration stays: {exc}", action="failed")
        log.error("render failed (%s), the last published configuration stays: %s", after.reason, exc)
        if after.action != "retry":  # another timer took over: it renders
            return Outcome.done(f"render failed, {after.reason}: {exc}", action="failed")
        return Outcome.retry(f"render failed, retrying: {exc}", action="failed", next=after.reason)


def _render(ports: RenderPorts, decision: Decision) -> Outcome:
    result = render_generation(ports.graphs, ports.artifacts, None, ports.formats, ports.render_options)
    ports.metrics.count(m.RENDERS)
    for w in result.warnings:
        log.warning("render: %s", w)
    manifest = result.manifest
    last = ports.publish_state.load_published()
    stale = last is None or (last.generation, last.graph_sha256) != (manifest.generation, manifest.graph_sha256)
    if stale:
        ports.handoff.request_publish(manifest.generation, "rendered", manifest.graph_sha256[:12])
    after = ports.debouncer.mark_rendered(ports.cluster, decision, result.generation)
    return Outcome.done(
        f"rendered generation {result.generation}",
        action="rendered",
        generation=result.generation,
        changed=result.changed,
        publish=stale,
        next=after.action,
    )
