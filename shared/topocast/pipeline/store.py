"""Graph generations: the versioned store every stage reads and discover writes.

Discover writes each *different* graph as a new, immutable generation
(1, 2, 3, ...); render and publish name what they worked on by generation.
Writers use optimistic concurrency: a writer says which generation it based its
graph on (``expected_generation``), and if another writer has stored a newer one
in the meantime the write is refused with :class:`StaleGenerationError` so the
caller re-reads and rebuilds on top of it (:func:`commit` does that loop).

The decision of what a write should do is the pure :func:`plan_write`;
:class:`ObjectGraphStore` (the :class:`~topocast.ports.protocols.GraphStore` port) executes it in a
bucket over any :class:`~topocast.pipeline.objects.ObjectStore` (S3 in
:mod:`topocast.aws.s3_store`, Cloud Storage in :mod:`topocast.gcp.gcs_store`).

Bucket layout under ``<prefix>/<cluster>/graphs/``::

    000000000001.json   immutable, one per generation (the graph's pretty JSON, readable
    000000000002.json   by ``topocast render --graph``); metadata: generation, sha256
    latest.json         small pointer {generation, sha256, key, written_at}
    index.json          the history index: per generation its time, sha256 and the nodes that
                        joined, moved or left (:mod:`topocast.pipeline.history`, after step 3)

How a bucket write stays correct with concurrent writers and retries, using
conditional writes only (no lock service):

1. Read the pointer and its version token; :func:`plan_write` decides
   unchanged / stale / write generation N+1.
2. Create ``N+1.json`` only if it does not exist. This is the commit point:
   exactly one writer can create a generation. A loser whose content differs gets
   :class:`StaleGenerationError` and re-reads; a loser with identical content (or
   our own earlier attempt whose response was lost) treats the object as its own.
3. Move the pointer conditioned on the token read in 1, so a stale writer can
   never move it back. Anyone may roll the pointer forward to an existing
   generation object, so a writer that died between 2 and 3 cannot wedge the store.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from topocast.errors import InvalidGraphError, StaleGenerationError, TopocastError
from topocast.model.graph import TopologyGraph, dump_graph, graph_from_json
from topocast.pipeline.objects import MUST_NOT_EXIST, ObjectStore, cluster_base
from topocast.ports.protocols import GraphStore
from topocast.ports.records import StoredGraph, WriteResult

__all__ = ["GenerationNotFoundError", "ObjectGraphStore", "WritePlan", "commit", "plan_write"]


class GenerationNotFoundError(TopocastError, LookupError):
    """The requested graph generation does not exist (never written, or expired)."""


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


def _utc_now() -> datetime:
    return datetime.now(UTC)


class ObjectGraphStore:
    """Graph generations of one cluster in a bucket (layout and write protocol: the module docstring)."""

    def __init__(self, objects: ObjectStore, prefix: str, cluster: str) -> None:
        self.objects = objects
        self.cluster = cluster
        self.base_key = cluster_base(prefix, cluster, "graphs")
        self.pointer_key = f"{self.base_key}/latest.json"
        #: the generation :meth:`latest` read last: the previous graph of the next commit's history entry
        self._last_read: StoredGraph | None = None
        #: the time a commit records (pointer ``written_at``, history index); tests set a simulated clock
        self.clock: Callable[[], datetime] = _utc_now

    def generation_key(self, generation: int) -> str:
        return f"{self.base_key}/{generation:012d}.json"

    def generation_of_key(self, key: str) -> int | None:
        """The generation a graph object key names (None for other keys, e.g. the pointer)."""
        name = key.removeprefix(self.base_key + "/")
        if name == key or not name.endswith(".json") or not name[:-5].isdigit():
            return None
        return int(name[:-5])

    # ----- reads --------------------------------------------------------------------
    def _read_pointer(self) -> tuple[dict[str, Any], Any] | None:
        """(pointer, its version token) or None when the store is empty."""
        got = self.objects.get(self.pointer_key)
        if got is None:
            return None
        try:
            pointer = json.loads(got.data)
            generation = pointer["generation"]
            if not isinstance(generation, int) or generation < 1 or not isinstance(pointer["sha256"], str):
                raise ValueError(f"bad generation/sha256 {generation!r}")
        except (ValueError, KeyError, TypeError) as exc:
            where = self.objects.uri(self.pointer_key)
            raise InvalidGraphError(f"{where}: corrupt latest-generation pointer ({exc})") from None
        return pointer, got.generation

    def pointer(self) -> dict[str, Any] | None:
        """The latest-generation pointer ``{generation, sha256, key, written_at}`` (None: an empty store)."""
        current = self._read_pointer()
        return current[0] if current else None

    def latest(self) -> StoredGraph | None:
        current = self._read_pointer()
        if current is None:
            return None
        try:
            self._last_read = self._read_generation(current[0]["generation"], current[0]["sha256"])
        except GenerationNotFoundError as exc:
            # the pointer names a generation that is gone (a lifecycle rule, generation_retention_days, expired
            # it while nothing changed; or a hand deletion): damaged like an unreadable one, so discover heals it
            raise InvalidGraphError(f"{exc}, but latest.json points at it (expired or deleted)") from None
        return self._last_read

    def get(self, generation: int) -> StoredGraph:
        return self._read_generation(generation, None)

    def _read_generation(self, generation: int, expected_hash: str | None) -> StoredGraph:
        key = self.generation_key(generation)
        where = self.objects.uri(key)
        got = self.objects.get(key)
        if got is None:
            raise GenerationNotFoundError(f"{where}: graph generation {generation} not found")
        graph = graph_from_json(got.data, source=where)
        if graph.cluster != self.cluster:
            raise InvalidGraphError(f"{where}: graph is for cluster {graph.cluster!r}, expected {self.cluster!r}")
        content_hash = graph.content_hash()
        recorded = expected_hash or got.metadata.get("sha256")
        if recorded and recorded != content_hash:
            raise InvalidGraphError(
                f"{where}: content sha256 {content_hash[:12]}… does not match the recorded {recorded[:12]}… "
                "(object altered or corrupt)"
            )
        return StoredGraph(generation, graph, content_hash, got.updated or datetime.now(UTC))

    # ----- writes -------------------------------------------------------------------
    def write_if_changed(self, graph: TopologyGraph, *, expected_generation: int | None) -> WriteResult:
        if graph.cluster != self.cluster:
            raise InvalidGraphError(f"graph is for cluster {graph.cluster!r} but this store holds {self.cluster!r}")
        new_hash = graph.content_hash()
        current = self._read_pointer()
        pointer = current[0] if current else None
        plan = plan_write(
            pointer["generation"] if pointer else None,
            pointer["sha256"] if pointer else None,
            new_hash,
            expected_generation,
        )
        if plan.action == "unchanged":
            return WriteResult(plan.generation, changed=False)
        if plan.action == "stale":
            raise StaleGenerationError(f"{self.objects.uri(self.pointer_key)}: {plan.reason}")
        generation = plan.generation
        if self._put_generation(generation, graph, new_hash, MUST_NOT_EXIST) is None:
            theirs = self._object_hash(generation)
            if theirs != new_hash:
                # Someone else committed this generation: make sure the pointer shows it (its
                # writer may have died before moving it), then tell the caller to re-read.
                self._advance_pointer(current, generation, theirs)
                raise StaleGenerationError(
                    f"{self.objects.uri(self.generation_key(generation))}: another writer stored generation "
                    f"{generation} first; re-read and retry"
                )
        self._advance_pointer(current, generation, new_hash)
        from topocast.pipeline import history  # after the commit point; never raises

        previous = self._last_read if self._last_read and self._last_read.generation == generation - 1 else None
        history.record(self, StoredGraph(generation, graph, new_hash, self.clock()), previous)
        return WriteResult(generation, changed=True)

    def replace_unreadable(self, graph: TopologyGraph) -> WriteResult:
        """Heal a store whose latest generation cannot be read, with a freshly discovered ``graph``.

        If ``graph`` is exactly what the pointer says that generation held (same
        sha256), the damaged object is restored in place (conditioned on its current
        version) and nothing needs rendering again; otherwise ``graph`` becomes the
        next generation.
        """
        current = self._read_pointer()
        new_hash = graph.content_hash()
        if current is not None and current[0]["sha256"] == new_hash:
            generation = current[0]["generation"]
            info = self.objects.head(self.generation_key(generation))
            token = info.generation if info else MUST_NOT_EXIST
            if self._put_generation(generation, graph, new_hash, token) is None:
                where = self.objects.uri(self.generation_key(generation))
                raise StaleGenerationError(f"{where} changed while being restored; retry")
            return WriteResult(generation, changed=False)
        return self.write_if_changed(graph, expected_generation=current[0]["generation"] if current else None)

    def _put_generation(self, generation: int, graph: TopologyGraph, content_hash: str, condition: Any) -> Any:
        return self.objects.put(
            self.generation_key(generation),
            dump_graph(graph).encode(),
            content_type="application/json",
            metadata={"generation": str(generation), "sha256": content_hash},
            if_generation_match=condition,
        )

    def _object_hash(self, generation: int) -> str:
        """Content hash of an existing generation (metadata first; fall back to reading it)."""
        info = self.objects.head(self.generation_key(generation))
        recorded = info.metadata.get("sha256") if info else None
        return recorded or self._read_generation(generation, None).content_hash

    def _advance_pointer(self, current: tuple[dict[str, Any], Any] | None, generation: int, sha: str) -> None:
        """Point latest.json at ``generation`` unless someone already moved it there or beyond."""
        body = json.dumps(
            {
                "generation": generation,
                "sha256": sha,
                "key": self.generation_key(generation),
                "written_at": self.clock().isoformat(),
            }
        ).encode()
        for _ in range(5):
            done = self.objects.put(
                self.pointer_key,
                body,
                content_type="application/json",
                if_generation_match=current[1] if current else MUST_NOT_EXIST,
            )
            if done is not None:
                return
            current = self._read_pointer()
            if current is not None and current[0]["generation"] >= generation:
                return
        raise StaleGenerationError(f"{self.objects.uri(self.pointer_key)}: pointer kept changing; re-read and retry")
