"""The render use case: a debounce timer in, rendered files + a hand-off to publish out.

Policies (docs/architecture.md, "Who decides what"):

* The debouncer decides whether this timer renders (quiet window, max wait, one live timer).
* A timer that arrives while the render it started holds the lease is ``retry``: if that render
  died, the redelivery after the lease renders.
* A render that fails after its claim (corrupt graph, renderer error, storage, the publish hand-off,
  recording the render) keeps the last publish in place, **releases** the claim (the timer is due
  again) and is ``retry``, so the platform's redelivery renders at once; after the debounce policy's ``render_attempts``
  failures in a row it is **dead-lettered** (outcome ``drop``: the DLQ + metric
  ``render_dead_lettered``) and the debouncer goes idle, so the next change renders again.
* Publish is requested when what is published differs from what is rendered (generation or
  graph sha256 of the published record against the current manifest), not only when the files
  changed: a publish that failed or was held earlier is caught up by the next render.

:func:`render_generation` is the stage under the use case: one stored graph generation in, a
manifest of rendered files out. It renders everything in memory first; only when every format
succeeded it writes the files, then the generation's manifest, then moves "latest". A failure
(corrupt graph, renderer error, storage error) therefore leaves the previous latest manifest
untouched and nothing half-written visible to publishers.

A format the graph cannot express (:class:`NotApplicableError`, e.g. topology/block
without NVLink domains) is skipped with a warning; every other failure is fatal.

``changed`` is False when the files are byte-identical to the latest manifest's
(a graph change that does not affect any configured format); callers skip
publishing then. Publishers are idempotent anyway, so publishing an unchanged
manifest again (e.g. after a failed publish) is safe.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from topocast.app import metrics as m
from topocast.app.outcome import Outcome
from topocast.errors import NotApplicableError, RenderError
from topocast.ports.debounce import Decision, Timer
from topocast.ports.protocols import ArtifactStore, GraphStore, RenderPorts
from topocast.ports.records import Manifest, ManifestEntry, StoredGraph, already_published
from topocast.renderers import Artifact, RenderOptions, one_pass
from topocast.renderers import render as render_format

__all__ = ["RenderResult", "render", "render_generation"]

log = logging.getLogger("topocast.app")


def render(ports: RenderPorts, timer: Timer) -> Outcome:
    """Handle one debounce timer (parsed where its delivery entered: :func:`topocast.app.routing.timer`)."""
    decision = ports.debouncer.on_timer(timer)
    if decision.action == "retry":
        return Outcome.retry(decision.reason, action="retry")
    if not decision.render:
        return Outcome.done(f"{decision.action}: {decision.reason}", action=decision.action)
    try:
        return _render(ports, decision)
    except Exception as exc:  # anything after the claim: release it, so the retry renders at once
        ports.metrics.count(m.RENDER_FAILURES)
        after = ports.debouncer.render_failed(ports.cluster, decision)
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
    stale = not already_published(ports.publish_state.load_published(), manifest)
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


@dataclass(frozen=True)
class RenderResult:
    """What :func:`render_generation` did."""

    #: the graph generation that was rendered
    generation: int
    #: False: the files equal the latest manifest's, nothing new was written, skip publishing
    changed: bool
    #: the manifest that describes the current files (the previous one when unchanged)
    manifest: Manifest
    #: file name -> content, for publishers that push the bytes
    files: dict[str, bytes]
    warnings: list[str] = field(default_factory=list)
    detail: str = ""


def _render_all(
    stored: StoredGraph, formats: Sequence[str], options: RenderOptions, skipped: list[str]
) -> list[Artifact]:
    artifacts: list[Artifact] = []
    seen: dict[str, str] = {}
    with one_pass():  # the formats share one pass: tree, domains and block layout are built once
        for fmt in formats:
            try:
                artifact = render_format(stored.graph, fmt, options)
            except NotApplicableError as exc:  # e.g. block topology of a cluster without NVLink domains
                skipped.append(f"{fmt}: skipped: {exc}")
                continue
            except Exception as exc:
                raise RenderError(f"generation {stored.generation}: format {fmt!r} failed: {exc}") from exc
            if artifact.filename in seen:
                raise RenderError(
                    f"formats {seen[artifact.filename]!r} and {fmt!r} both write {artifact.filename!r}; "
                    "configure only one of them"
                )
            seen[artifact.filename] = fmt
            artifacts.append(artifact)
    return artifacts


def render_generation(
    store: GraphStore,
    artifact_store: ArtifactStore,
    generation: int | None,
    formats: Sequence[str],
    options: RenderOptions | None = None,
) -> RenderResult:
    """Render ``generation`` (None: the latest) in every format and record it in the artifact store."""
    if not formats:
        raise RenderError("no output formats configured")
    stored = store.latest() if generation is None else store.get(generation)
    if stored is None:
        raise RenderError("nothing to render: the graph store is empty")
    skipped: list[str] = []
    artifacts = _render_all(stored, formats, options or RenderOptions(), skipped)
    if not artifacts:
        raise RenderError(f"generation {stored.generation}: no configured format applies: {'; '.join(skipped)}")
    warnings = skipped + [f"{a.format}: {w}" for a in artifacts for w in a.warnings]
    files = {a.filename: a.content.encode() for a in artifacts}
    manifest = Manifest(
        generation=stored.generation,
        graph_sha256=stored.content_hash,
        artifacts=tuple(
            ManifestEntry(a.format, a.filename, a.sha256, a.node_count, a.media_type, len(files[a.filename]))
            for a in artifacts
        ),
        rendered_at=datetime.now(UTC).isoformat(),
    )
    previous = artifact_store.latest_manifest()
    if previous is not None and previous.fingerprint() == manifest.fingerprint():
        # same sha256 per file, so the bytes just rendered are the stored ones
        return RenderResult(
            stored.generation,
            False,
            previous,
            files,
            warnings,
            f"files identical to generation {previous.generation}'s",
        )
    for a in artifacts:
        artifact_store.put_artifact(stored.generation, a.filename, files[a.filename], a.media_type)
    moved = artifact_store.put_manifest(manifest)
    if not moved:
        return RenderResult(
            stored.generation,
            False,
            manifest,
            files,
            warnings,
            "a newer generation was rendered meanwhile; latest left as is",
        )
    return RenderResult(stored.generation, True, manifest, files, warnings, "rendered")
