"""The history index of a graph store: written when a generation is committed, read by ``topocast history``.

``<prefix>/<cluster>/graphs/index.json`` (:mod:`topocast.model.history` describes it) gains one entry per
generation, right after :class:`~topocast.pipeline.store.ObjectGraphStore` moved ``latest.json`` to it:

* **after the commit point**: the generation object and the pointer are the truth; the index is derived
  from them. A process that dies before the index write leaves the index one generation short: the next
  commit fills the missing generations first (reading them, at most :data:`MAX_CATCH_UP`), and a reader
  fills them too (:func:`load`).
* **idempotent**: an entry for a generation already indexed is not written again; the write is conditioned on
  the index's version token (a concurrent writer's entry is re-read, not lost) and retried a few times.
* **never fails the commit**: the generation is committed already; an index write that fails is logged, and
  the next commit (or reader) catches up.

Reading (:func:`load`) costs one read of the pointer and one of the index, plus one read per generation the
index lacks (none in steady state); without any index it reads every generation (the fallback).
"""

from __future__ import annotations

import json
import logging
from datetime import datetime
from typing import Any, Protocol

from topocast.errors import InvalidGraphError, TopocastError
from topocast.model.graph import TopologyGraph
from topocast.model.history import HistoryIndex, index_entry
from topocast.pipeline.objects import ObjectStore
from topocast.ports.records import StoredGraph
from topocast.safeio.limits import MAX_GRAPH_BYTES

__all__ = ["INDEX_NAME", "graph_at", "load", "record"]

log = logging.getLogger(__name__)


class ObjectGraphStore(Protocol):
    """What the history reads and writes of a graph store in a bucket
    (:class:`topocast.pipeline.store.ObjectGraphStore`, which calls :func:`record` on every commit)."""

    cluster: str
    objects: ObjectStore
    base_key: str
    pointer_key: str

    def generation_key(self, generation: int) -> str: ...
    def pointer(self) -> dict[str, Any] | None: ...
    def get(self, generation: int) -> StoredGraph: ...


INDEX_NAME = "index.json"
#: an index of 1,000 generations of 10k nodes is a few MB; a bigger one is refused by its size
MAX_INDEX_BYTES = 4 * MAX_GRAPH_BYTES
_ATTEMPTS = 4
#: the most missing generations a commit reads to catch the index up (a commit must stay quick); past it the
#: new entry is counted against the places the index ends with, and the skipped generations are left to readers
MAX_CATCH_UP = 16


def index_key(store: ObjectGraphStore) -> str:
    return f"{store.base_key}/{INDEX_NAME}"


def _read(store: ObjectGraphStore) -> tuple[HistoryIndex | None, Any]:
    """(the index, its version token), or (None, None) when there is none."""
    key = index_key(store)
    got = store.objects.get(key, limit=MAX_INDEX_BYTES)
    if got is None:
        return None, None
    where = store.objects.uri(key)
    try:
        data = json.loads(got.data)
    except ValueError as exc:
        raise InvalidGraphError(f"{where}: not valid JSON ({exc})") from None
    index = HistoryIndex.from_data(data, where)
    if index.cluster != store.cluster:
        raise InvalidGraphError(f"{where}: history of cluster {index.cluster!r}, expected {store.cluster!r}")
    return index, got.generation


def _fill(store: ObjectGraphStore, index: HistoryIndex, upto: int, cache: dict[int, StoredGraph]) -> None:
    """Append the entries of generations ``index.last_generation + 1 .. upto``, reading them from the store.

    A generation that is gone (expired by a lifecycle rule) is skipped: the next one's changes are counted
    against the last one found.
    """
    previous: TopologyGraph | None = None
    start = index.last_generation + 1
    if 1 < start <= upto:
        try:
            previous = _stored(store, start - 1, cache).graph
        except LookupError:  # GenerationNotFoundError (not imported: the store imports this module)
            previous = None
    for generation in range(start, upto + 1):
        try:
            stored = _stored(store, generation, cache)
        except LookupError:  # GenerationNotFoundError (not imported: the store imports this module)
            continue
        index.append(index_entry(generation, stored.written_at, stored.content_hash, previous, stored.graph))
        previous = stored.graph


def _stored(store: ObjectGraphStore, generation: int, cache: dict[int, StoredGraph]) -> StoredGraph:
    hit = cache.get(generation)
    return hit if hit is not None else store.get(generation)


def record(store: ObjectGraphStore, stored: StoredGraph, previous: StoredGraph | None) -> None:
    """Add ``stored`` (just committed) to the index, with any generation the index lacks before it.

    ``previous`` is the generation before it when the caller has it at hand (saves a read). Never raises:
    a failure is logged and repaired by the next commit or reader.
    """
    cache = {s.generation: s for s in (stored, previous) if s is not None}
    try:
        for _ in range(_ATTEMPTS):
            try:
                index, token = _read(store)
            except TopocastError as exc:  # damaged: rebuilt from the generations, replacing exactly that object
                log.warning("%s; rebuilding the history index from the generations", exc)
                info = store.objects.head(index_key(store))
                index, token = None, info.generation if info else None
            if index is None:
                index = HistoryIndex(store.cluster)
            if index.last_generation >= stored.generation:
                return  # indexed already (a retried commit, or another writer)
            missing = stored.generation - index.last_generation - 1
            if missing > MAX_CATCH_UP:
                log.warning("history index %s lacks %d generations before %d: not read now (readers read them "
                            "when asked about that time)", index_key(store), missing, stored.generation)  # fmt: skip
                index.append(index_entry(stored.generation, stored.written_at, stored.content_hash, index.places(),
                                         stored.graph))  # fmt: skip
            else:
                _fill(store, index, stored.generation, cache)
            body = json.dumps(index.to_data(), separators=(",", ":")).encode()
            condition = token if token is not None else 0  # MUST_NOT_EXIST for the first index
            if store.objects.put(index_key(store), body, content_type="application/json",
                                 if_generation_match=condition) is not None:  # fmt: skip
                return
        log.warning("history index %s: kept changing; left for the next commit", index_key(store))
    except Exception as exc:  # derived data: whatever went wrong, the committed generation stands
        log.warning("history index %s not updated (%s); the next commit or reader catches up", index_key(store), exc)


def load(store: ObjectGraphStore, *, since: datetime | None = None, complete: bool = False) -> HistoryIndex:
    """The history up to the latest generation: the index, plus what it lacks read from the store.

    An index that cannot be read (corrupt, another cluster's) is set aside with a warning and the history is
    rebuilt from the generations, as for a store written before the index existed. Generations the index
    skipped (it started, or resumed after a gap, past :data:`MAX_CATCH_UP` missing ones) are read only when
    the question needs them: ``complete`` (every change), or a time ``since`` before the entry that follows them.
    """
    latest = store.pointer()
    if latest is None:
        raise TopocastError(f"{store.objects.uri(store.pointer_key)}: no graph generations stored")
    upto = int(latest["generation"])
    try:
        index, _ = _read(store)
    except TopocastError as exc:
        log.warning("%s; reading the generations instead", exc)
        index = None
    if index is None:
        index = HistoryIndex(store.cluster)
    elif index.last_generation > upto:  # the pointer was rolled back by hand: history ends where it points
        kept = HistoryIndex(store.cluster)
        for entry in index.entries:
            if entry["generation"] <= upto:
                kept.append(entry)
        index = kept
    if index.last_generation == upto and index.entries[-1]["sha256"] != latest["sha256"]:
        log.warning("%s: its last entry disagrees with latest.json; reading the generations", index_key(store))
        index = HistoryIndex(store.cluster)
    _fill(store, index, upto, {})
    if complete or since is not None:
        index = _fill_skipped(store, index, since, complete)
    return index


def _fill_skipped(store: ObjectGraphStore, index: HistoryIndex, since: datetime | None, complete: bool) -> HistoryIndex:
    """The index with the generations it skipped read in, where the question reaches back to them."""
    out = HistoryIndex(index.cluster)
    previous = 0
    for i, entry in enumerate(index.entries):
        generation = entry["generation"]
        # a gap matters to a time inside it; before it or after it, the entries' net changes answer alike
        inside = since is not None and since < index.time_of(i) and (i == 0 or since >= index.time_of(i - 1))
        needed = complete or inside
        if generation > previous + 1 and needed:
            _fill(store, out, generation - 1, {})  # the skipped ones, read and checked
            entry = index_entry(generation, index.time_of(i), entry["sha256"], out.places(),
                                index.places(upto=generation))  # fmt: skip
        out.append(entry)
        previous = generation
    return out


def graph_at(store: ObjectGraphStore, index: HistoryIndex, at: datetime) -> tuple[dict[str, Any], TopologyGraph]:
    """The generation live at ``at`` (its index entry) and its graph, checked against the entry's sha256."""
    entry = index.entry_at(at)
    if entry is None:
        first = index.time_of(0).isoformat() if index.entries else "never"
        raise TopocastError(f"no generation was live at {at.isoformat()} (the first was written {first})")
    stored = store.get(entry["generation"])
    if stored.content_hash != entry["sha256"]:
        where = store.objects.uri(store.generation_key(entry["generation"]))
        raise InvalidGraphError(
            f"{where}: content sha256 {stored.content_hash[:12]}… does not match the history's {entry['sha256'][:12]}…"
        )
    return entry, stored.graph
