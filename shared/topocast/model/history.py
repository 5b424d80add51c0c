"""The map's history: per stored generation, when it was written and which nodes joined, left or moved.

The history index (``graphs/index.json``, written by :mod:`topocast.pipeline.history` when a generation is
committed) holds one entry per generation, oldest first::

    {"schema": "topocast.history-index/v1", "cluster": "c1",
     "generations": [{"generation": 1, "written_at": "2026-12-01T10:00:00+00:00", "sha256": "…", "nodes": 2,
                      "joined": {"gpu-1": {"f": ["leaf-1", "spine-1"], "a": "nvl-1"}, "gpu-2": {…}},
                      "moved": {}, "left": []}, …]}

A *place* is ``{"f": fabric closest-first, "a": accelerator, "s": sub-domain}`` (empty parts left out). So
"where was node X at time T" is answered from the index alone, by replaying X's changes up to T: one read of
one object however many generations there are, never one read per generation. The index is derived data:
the generations stay the truth (their sha256 is in each entry, and :mod:`topocast.pipeline.history` checks a
generation it loads against it).

Pure: plain data in, plain data out.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from topocast.errors import TopocastError
from topocast.model.graph import Node, TopologyGraph

__all__ = [
    "INDEX_SCHEMA",
    "HistoryIndex",
    "NodeEvent",
    "index_entry",
    "place_of",
]

INDEX_SCHEMA = "topocast.history-index/v1"

Place = dict[str, Any]


class HistoryIndexError(TopocastError):
    """A history index that cannot be read (not JSON, another schema, entries out of order)."""


def place_of(node: Node) -> Place:
    """The compact place of a node: fabric, accelerator domain and sub-domain (empty parts left out)."""
    place: Place = {}
    if node.fabric:
        place["f"] = list(node.fabric)
    if node.accelerator is not None:
        place["a"] = node.accelerator
    if node.subdomain is not None:
        place["s"] = node.subdomain
    return place


def index_entry(
    generation: int,
    written_at: datetime,
    sha256: str,
    previous: TopologyGraph | Mapping[str, Place] | None,
    graph: TopologyGraph | Mapping[str, Place],
) -> dict[str, Any]:
    """The entry of ``generation`` (``graph``), its changes counted against ``previous`` (None: the first).

    Either side may be given as its places (node -> place, :meth:`HistoryIndex.places`): an entry after a gap
    in the index is counted against the places the index ends with.
    """
    before = _places(previous) if previous is not None else {}
    after = _places(graph)
    return {
        "generation": generation,
        "written_at": written_at.isoformat(),
        "sha256": sha256,
        "nodes": len(after),
        "joined": {k: after[k] for k in sorted(after.keys() - before.keys())},
        "moved": {k: after[k] for k in sorted(after.keys() & before.keys()) if after[k] != before[k]},
        "left": sorted(before.keys() - after.keys()),
    }


def _places(graph: TopologyGraph | Mapping[str, Place]) -> Mapping[str, Place]:
    return {n.name: place_of(n) for n in graph.nodes} if isinstance(graph, TopologyGraph) else graph


@dataclass(frozen=True)
class NodeEvent:
    """One change of one node: ``kind`` joined / moved / left, in ``generation`` written at ``at``."""

    generation: int
    at: datetime
    kind: str
    place: Place | None

    def to_json(self) -> dict[str, Any]:
        return {"generation": self.generation, "at": self.at.isoformat(), "kind": self.kind, "place": self.place}


@dataclass
class HistoryIndex:
    cluster: str
    entries: list[dict[str, Any]] = field(default_factory=list)
    _times: list[datetime] = field(default_factory=list, repr=False)
    _events: dict[str, list[NodeEvent]] | None = field(default=None, repr=False)

    @classmethod
    def from_data(cls, data: Any, where: str) -> HistoryIndex:
        if not isinstance(data, dict) or data.get("schema") != INDEX_SCHEMA:
            raise HistoryIndexError(f"{where}: not a history index (expected schema {INDEX_SCHEMA!r})")
        index = cls(str(data.get("cluster", "")))
        for entry in data.get("generations", []):
            index.append(entry, where)
        return index

    def to_data(self) -> dict[str, Any]:
        return {"schema": INDEX_SCHEMA, "cluster": self.cluster, "generations": self.entries}

    @property
    def last_generation(self) -> int:
        return self.entries[-1]["generation"] if self.entries else 0

    def append(self, entry: dict[str, Any], where: str = "history index") -> None:
        """Add the next generation's entry (generations strictly increasing, times not decreasing)."""
        try:
            generation = int(entry["generation"])
            at = datetime.fromisoformat(entry["written_at"])
            if not isinstance(entry["sha256"], str) or not isinstance(entry["joined"], dict):
                raise TypeError("sha256 / joined")
            if not isinstance(entry["moved"], dict) or not isinstance(entry["left"], list):
                raise TypeError("moved / left")
        except (KeyError, TypeError, ValueError) as exc:
            raise HistoryIndexError(f"{where}: a generation entry is malformed ({exc})") from None
        if at.tzinfo is None:
            raise HistoryIndexError(f"{where}: generation {generation}: written_at has no time zone")
        if generation <= self.last_generation:
            raise HistoryIndexError(f"{where}: generation {generation} after {self.last_generation} (out of order)")
        if self._times and at < self._times[-1]:
            at = self._times[-1]  # clocks of two writers may disagree a little: order by generation
        self.entries.append(entry)
        self._times.append(at)
        self._events = None

    def time_of(self, i: int) -> datetime:
        return self._times[i]

    def entry_at(self, at: datetime) -> dict[str, Any] | None:
        """The generation live at ``at``: the last one written at or before it (None: before the first)."""
        i = bisect_right(self._times, at)
        return self.entries[i - 1] if i else None

    def events(self, node: str) -> list[NodeEvent]:
        """Every change of ``node``, oldest first."""
        if self._events is None:
            self._events = self._build_events()
        return self._events.get(node, [])

    def _build_events(self) -> dict[str, list[NodeEvent]]:
        out: dict[str, list[NodeEvent]] = {}
        for entry, at in zip(self.entries, self._times, strict=True):
            g = entry["generation"]
            for name, place in entry["joined"].items():
                out.setdefault(name, []).append(NodeEvent(g, at, "joined", place))
            for name, place in entry["moved"].items():
                out.setdefault(name, []).append(NodeEvent(g, at, "moved", place))
            for name in entry["left"]:
                out.setdefault(name, []).append(NodeEvent(g, at, "left", None))
        return out

    def places(self, upto: int | None = None) -> dict[str, Place]:
        """Every node's place after the entries up to generation ``upto`` (default: all), by replaying them."""
        out: dict[str, Place] = {}
        for entry in self.entries:
            if upto is not None and entry["generation"] > upto:
                break
            out.update(entry["joined"])
            out.update(entry["moved"])
            for name in entry["left"]:
                out.pop(name, None)
        return out

    def place_at(self, node: str, at: datetime) -> tuple[NodeEvent | None, Place | None]:
        """Where ``node`` was at ``at``: its last change by then and its place (None: not in the graph)."""
        last: NodeEvent | None = None
        for event in self.events(node):
            if event.at > at:
                break
            last = event
        return last, (last.place if last is not None else None)
