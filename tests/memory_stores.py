"""In-memory stores for tests: the pipeline's ports (graph generations, rendered artifacts, publish state)
without a bucket, each behaving like its object-store adapter (same generations, same errors)."""

from __future__ import annotations

import threading
from datetime import UTC, datetime

from topocast.errors import StaleGenerationError
from topocast.model.graph import TopologyGraph
from topocast.pipeline.artifacts import ArtifactNotFoundError
from topocast.pipeline.store import GenerationNotFoundError, plan_write
from topocast.ports.records import HoldRecord, Manifest, PublishedRecord, StoredGraph, WriteResult

__all__ = ["MemoryArtifactStore", "MemoryGraphStore", "MemoryPublishState"]


class MemoryGraphStore:
    """In-process :class:`GraphStore` (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._generations: dict[int, StoredGraph] = {}
        self._latest: int | None = None

    def latest(self) -> StoredGraph | None:
        with self._lock:
            return None if self._latest is None else self._generations[self._latest]

    def get(self, generation: int) -> StoredGraph:
        with self._lock:
            try:
                return self._generations[generation]
            except KeyError:
                raise GenerationNotFoundError(f"graph generation {generation} not found") from None

    def write_if_changed(self, graph: TopologyGraph, *, expected_generation: int | None) -> WriteResult:
        new_hash = graph.content_hash()
        with self._lock:
            current = None if self._latest is None else self._generations[self._latest]
            plan = plan_write(self._latest, current.content_hash if current else None, new_hash, expected_generation)
            if plan.action == "stale":
                raise StaleGenerationError(plan.reason)
            if plan.action == "unchanged":
                return WriteResult(plan.generation, changed=False)
            self._generations[plan.generation] = StoredGraph(plan.generation, graph, new_hash, datetime.now(UTC))
            self._latest = plan.generation
            return WriteResult(plan.generation, changed=True)

    def replace_unreadable(self, graph: TopologyGraph) -> WriteResult:
        """Nothing in memory is ever unreadable: the next generation, on top of the latest."""
        current = self.latest()
        return self.write_if_changed(graph, expected_generation=current.generation if current else None)


class MemoryArtifactStore:
    """In-process :class:`ArtifactStore`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.files: dict[tuple[int, str], bytes] = {}
        self.manifests: dict[int, Manifest] = {}
        self.latest: int | None = None

    def artifact_uri(self, generation: int, filename: str) -> str:
        return f"memory://rendered/{generation:012d}/{filename}"

    def put_artifact(self, generation: int, filename: str, content: bytes, media_type: str) -> str:
        with self._lock:
            self.files[(generation, filename)] = content
        return self.artifact_uri(generation, filename)

    def get_artifact(self, generation: int, filename: str) -> bytes:
        try:
            return self.files[(generation, filename)]
        except KeyError:
            raise ArtifactNotFoundError(f"{self.artifact_uri(generation, filename)} not found") from None

    def put_manifest(self, manifest: Manifest) -> bool:
        with self._lock:
            self.manifests[manifest.generation] = manifest
            if self.latest is None or manifest.generation >= self.latest:
                self.latest = manifest.generation
                return True
            return False

    def get_manifest(self, generation: int) -> Manifest:
        try:
            return self.manifests[generation]
        except KeyError:
            raise ArtifactNotFoundError(f"no manifest for generation {generation}") from None

    def latest_manifest(self) -> Manifest | None:
        return None if self.latest is None else self.manifests[self.latest]


class MemoryPublishState:
    """In-process :class:`~topocast.ports.protocols.PublishState`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.published: PublishedRecord | None = None
        self.hold: HoldRecord | None = None

    def load_published(self) -> PublishedRecord | None:
        return self.published

    def save_published(self, record: PublishedRecord) -> None:
        with self._lock:
            self.published = record

    def load_hold(self) -> HoldRecord | None:
        return self.hold

    def save_hold(self, hold: HoldRecord) -> None:
        with self._lock:
            self.hold = hold

    def clear_hold(self) -> None:
        with self._lock:
            self.hold = None
