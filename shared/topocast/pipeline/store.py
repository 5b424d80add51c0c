"""Graph generations: the versioned store every stage reads and discover writes.

Discover writes each *different* graph as a new, immutable generation
(1, 2, 3, ...); render and publish name what they worked on by generation.
Writers use optimistic concurrency: a writer says which generation it based its
graph on (``expected_generation``), and if another writer has stored a newer one
in the meantime the write is refused with :class:`StaleGenerationError` so the
caller re-reads and rebuilds on top of it (:func:`commit` does that loop).

The decision of what a write should do is the pure :func:`plan_write`; the
stores (in-memory here, S3 in :mod:`topocast.aws.s3_store`) only execute it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

from topocast.errors import StaleGenerationError, TopocastError
from topocast.graph import TopologyGraph


class GenerationNotFoundError(TopocastError, LookupError):
    """The requested graph generation does not exist (never written, or expired)."""


@dataclass(frozen=True)
class StoredGraph:
    """One stored generation of a cluster's graph."""

    generation: int
    graph: TopologyGraph
    #: :meth:`TopologyGraph.content_hash` (sha256 of the canonical JSON)
    content_hash: str
    written_at: datetime


@dataclass(frozen=True)
class WriteResult:
    """What :meth:`GraphStore.write_if_changed` did: ``generation`` is the latest after the call."""

    generation: int
    changed: bool


class GraphStore(Protocol):
    """Versioned storage of one cluster's graph."""

    def latest(self) -> StoredGraph | None:
        """The newest generation, or None when nothing was ever written."""
        ...

    def get(self, generation: int) -> StoredGraph:
        """One generation; :class:`GenerationNotFoundError` if absent, InvalidGraphError if corrupt."""
        ...

    def write_if_changed(self, graph: TopologyGraph, *, expected_generation: int | None) -> WriteResult:
        """Store ``graph`` as generation latest+1 unless its content equals the latest.

        ``expected_generation`` is the generation the caller read (None: it saw an
        empty store). Raises :class:`StaleGenerationError` when the store moved on.
        """
        ...


@dataclass(frozen=True)
class WritePlan:
    """Outcome of :func:`plan_write`: exactly one of unchanged / stale / write ``generation``."""

    action: str  # "unchanged" | "stale" | "write"
    generation: int
    reason: str = ""


def plan_write(
    latest_generation: int | None, latest_hash: str | None, new_hash: str, expected_generation: int | None
) -> WritePlan:
    """Decide what a write does, given what is stored now and what the writer read.

    Equal content is never a new generation, even for a stale writer: the store
    already holds what it wanted to write. Otherwise the writer must have based
    its graph on the current latest, or it would silently drop the newer changes.
    """
    if latest_generation is not None and latest_hash == new_hash:
        return WritePlan("unchanged", latest_generation)
    if expected_generation != latest_generation:
        current = "nothing" if latest_generation is None else f"generation {latest_generation}"
        based = "an empty store" if expected_generation is None else f"generation {expected_generation}"
        return WritePlan(
            "stale", latest_generation or 0, f"graph was built on {based} but the store now holds {current}"
        )
    return WritePlan("write", (latest_generation or 0) + 1)


def commit(
    store: GraphStore, build: Callable[[StoredGraph | None], TopologyGraph], *, attempts: int = 5
) -> WriteResult:
    """Read-build-write with retries: ``build`` gets the latest stored graph and returns the new one.

    On :class:`StaleGenerationError` the latest is re-read and ``build`` runs again,
    so incremental updates (one instance changed) are applied on top of the newest
    graph instead of overwriting it.
    """
    last: StaleGenerationError | None = None
    for _ in range(attempts):
        current = store.latest()
        graph = build(current)
        try:
            return store.write_if_changed(graph, expected_generation=current.generation if current else None)
        except StaleGenerationError as exc:
            last = exc
    raise StaleGenerationError(f"gave up after {attempts} attempts, the store kept moving: {last}")


class MemoryGraphStore:
    """In-process :class:`GraphStore` for tests, the CLI and local runs (thread-safe)."""

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
