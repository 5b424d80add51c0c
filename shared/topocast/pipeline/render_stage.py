"""The render stage: one stored graph generation in, a manifest of rendered files out.

Render everything in memory first; only when every format succeeded write the
files, then the generation's manifest, then move "latest". A failure (corrupt
graph, renderer error, storage error) therefore leaves the previous latest
manifest untouched and nothing half-written visible to publishers.

A format the graph cannot express (:class:`NotApplicableError`, e.g. topology/block
without NVLink domains) is skipped with a warning; every other failure is fatal.

``changed`` is False when the files are byte-identical to the latest manifest's
(a graph change that does not affect any configured format); callers skip
publishing then. Publishers are idempotent anyway, so publishing an unchanged
manifest again (e.g. after a failed publish) is safe.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from topocast.errors import NotApplicableError, RenderError
from topocast.pipeline.artifacts import ArtifactStore, Manifest, ManifestEntry
from topocast.pipeline.store import GraphStore, StoredGraph
from topocast.renderers import Artifact, RenderOptions, one_pass, render


@dataclass(frozen=True)
class RenderResult:
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
                artifact = render(stored.graph, fmt, options)
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
