"""Cloud Storage implementation of :class:`topocast.pipeline.store.GraphStore`.

Layout under ``gs://<bucket>/<prefix>/<cluster>/graphs/`` (same as on S3)::

    000000000001.json   immutable, one per generation; metadata: generation, sha256
    latest.json         small pointer {generation, sha256, key, written_at}

A write, with generation preconditions only (no lock service); :func:`plan_write`
decides, this module executes:

1. Read the pointer and remember its **object generation** ``P``; plan unchanged
   / stale / write generation N+1.
2. Create ``N+1.json`` with ``ifGenerationMatch=0``. This is the commit point:
   exactly one writer can create a generation. A loser whose content differs gets
   :class:`StaleGenerationError` and re-reads; a loser with identical content (or
   our own earlier attempt whose response was lost) treats the object as its own.
3. Move the pointer with ``ifGenerationMatch=P`` (``0`` when there was none), so
   a stale writer can never move it back. Anyone may roll the pointer forward to
   an existing generation object, so a writer that died between 2 and 3 cannot
   wedge the store.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from topocast.errors import InvalidGraphError, StaleGenerationError
from topocast.gcp.gcs import GcsObjects
from topocast.graph import TopologyGraph, dump_graph, graph_from_json
from topocast.pipeline.store import GenerationNotFoundError, StoredGraph, WriteResult, plan_write


def cluster_base(prefix: str, cluster: str, part: str) -> str:
    """``<prefix>/<cluster>/<part>`` without empty segments (the same layout as on S3)."""
    return "/".join(p for p in (prefix.strip("/"), cluster, part) if p)


class GcsGraphStore:
    """Graph generations of one cluster in one bucket (see the module docstring)."""

    def __init__(self, objects: GcsObjects, prefix: str, cluster: str) -> None:
        self.objects = objects
        self.cluster = cluster
        self.base_key = cluster_base(prefix, cluster, "graphs")
        self.pointer_key = f"{self.base_key}/latest.json"

    def generation_key(self, generation: int) -> str:
        return f"{self.base_key}/{generation:012d}.json"

    def generation_of_key(self, key: str) -> int | None:
        """The generation a graph object key names (None for other keys, e.g. the pointer)."""
        name = key.removeprefix(self.base_key + "/")
        if name == key or not name.endswith(".json") or not name[:-5].isdigit():
            return None
        return int(name[:-5])

    # ----- reads --------------------------------------------------------------------
    def _read_pointer(self) -> tuple[dict[str, Any], int] | None:
        """(pointer, its object generation) or None when the store is empty."""
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

    def latest(self) -> StoredGraph | None:
        current = self._read_pointer()
        if current is None:
            return None
        return self._read_generation(current[0]["generation"], current[0]["sha256"])

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
        return StoredGraph(generation, graph, content_hash, datetime.now(UTC))

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
        key = self.generation_key(generation)
        created = self.objects.put(
            key,
            dump_graph(graph).encode(),
            content_type="application/json",
            metadata={"generation": str(generation), "sha256": new_hash},
            if_generation_match=0,
        )
        if created is None:
            theirs = self._object_hash(generation)
            if theirs != new_hash:
                # Someone else committed this generation: make sure the pointer shows it (its
                # writer may have died before moving it), then tell the caller to re-read.
                self._advance_pointer(current, generation, theirs)
                raise StaleGenerationError(
                    f"{self.objects.uri(key)}: another writer stored generation {generation} first; re-read and retry"
                )
        self._advance_pointer(current, generation, new_hash)
        return WriteResult(generation, changed=True)

    def replace_unreadable(self, graph: TopologyGraph) -> WriteResult:
        """Heal a store whose latest generation cannot be read, with a freshly discovered ``graph``.

        If ``graph`` is exactly what the pointer says that generation held (same
        sha256), the damaged object is restored in place (conditioned on its current
        object generation) and nothing needs rendering again; otherwise ``graph``
        becomes the next generation.
        """
        current = self._read_pointer()
        new_hash = graph.content_hash()
        if current is not None and current[0]["sha256"] == new_hash:
            generation = current[0]["generation"]
            key = self.generation_key(generation)
            info = self.objects.head(key)
            restored = self.objects.put(
                key,
                dump_graph(graph).encode(),
                content_type="application/json",
                metadata={"generation": str(generation), "sha256": new_hash},
                if_generation_match=info.generation if info else 0,
            )
            if restored is None:
                raise StaleGenerationError(f"{self.objects.uri(key)} changed while being restored; retry")
            return WriteResult(generation, changed=False)
        return self.write_if_changed(graph, expected_generation=current[0]["generation"] if current else None)

    def _object_hash(self, generation: int) -> str:
        info = self.objects.head(self.generation_key(generation))
        recorded = info.metadata.get("sha256") if info else None
        return recorded or self._read_generation(generation, None).content_hash

    def _advance_pointer(self, current: tuple[dict[str, Any], int] | None, generation: int, sha: str) -> None:
        """Point latest.json at ``generation`` unless someone already moved it there or beyond."""
        body = json.dumps(
            {
                "generation": generation,
                "sha256": sha,
                "key": self.generation_key(generation),
                "written_at": datetime.now(UTC).isoformat(),
            }
        ).encode()
        for _ in range(5):
            done = self.objects.put(
                self.pointer_key,
                body,
                content_type="application/json",
                if_generation_match=current[1] if current else 0,
            )
            if done is not None:
                return
            current = self._read_pointer()
            if current is not None and current[0]["generation"] >= generation:
                return
        raise StaleGenerationError(f"{self.objects.uri(self.pointer_key)}: pointer kept changing; re-read and retry")
