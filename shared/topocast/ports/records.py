"""The values the ports speak: what the stores hold and what a publish did.

These records sit below :mod:`topocast.pipeline` (which stores them in a bucket) and
:mod:`topocast.app` (whose use cases pass them through :mod:`topocast.ports.protocols`), so the
ports and their bucket implementations both import them from here and never each other.
:func:`already_published` is the one rule that compares the published record with a manifest.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from topocast.errors import TopocastError
from topocast.model.graph import TopologyGraph

__all__ = [
    "HoldRecord",
    "Manifest",
    "ManifestEntry",
    "ManifestError",
    "PublishResult",
    "PublishedRecord",
    "StoredGraph",
    "WriteResult",
    "already_published",
]


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
    """What :meth:`topocast.ports.protocols.GraphStore.write_if_changed` did: the latest ``generation`` after
    the call, and whether it wrote one."""

    generation: int
    changed: bool


class ManifestError(TopocastError):
    """A stored manifest is missing fields or is not JSON."""


@dataclass(frozen=True)
class ManifestEntry:
    format: str
    file: str
    sha256: str
    node_count: int
    media_type: str = "text/plain"
    size: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "format": self.format,
            "file": self.file,
            "sha256": self.sha256,
            "node_count": self.node_count,
            "media_type": self.media_type,
            "size": self.size,
        }


@dataclass(frozen=True)
class Manifest:
    generation: int
    graph_sha256: str
    artifacts: tuple[ManifestEntry, ...]
    rendered_at: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "generation": self.generation,
            "graph_sha256": self.graph_sha256,
            "rendered_at": self.rendered_at,
            "artifacts": [a.to_json() for a in self.artifacts],
        }

    def dumps(self) -> bytes:
        return (json.dumps(self.to_json(), indent=2) + "\n").encode()

    @classmethod
    def from_json(cls, data: Any, source: str = "manifest") -> Manifest:
        try:
            entries = tuple(
                ManifestEntry(
                    format=str(a["format"]),
                    file=str(a["file"]),
                    sha256=str(a["sha256"]),
                    node_count=int(a["node_count"]),
                    media_type=str(a.get("media_type", "text/plain")),
                    size=int(a.get("size", 0)),
                )
                for a in data["artifacts"]
            )
            return cls(int(data["generation"]), str(data["graph_sha256"]), entries, str(data.get("rendered_at", "")))
        except (KeyError, TypeError, ValueError) as exc:
            raise ManifestError(f"{source}: malformed manifest ({exc!r})") from None

    @classmethod
    def loads(cls, raw: bytes | str, source: str = "manifest") -> Manifest:
        try:
            data = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ManifestError(f"{source}: manifest is not valid JSON ({exc})") from None
        return cls.from_json(data, source)

    def fingerprint(self) -> frozenset[tuple[str, str, str]]:
        """What the scheduler would see: equal fingerprints need no publish."""
        return frozenset((a.format, a.file, a.sha256) for a in self.artifacts)

    def entry(self, fmt: str) -> ManifestEntry | None:
        return next((a for a in self.artifacts if a.format == fmt), None)


@dataclass(frozen=True)
class PublishedRecord:
    """What the schedulers were last given."""

    generation: int
    graph_sha256: str
    nodes: list[str]
    published_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat())
    publishers: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "generation": self.generation,
            "graph_sha256": self.graph_sha256,
            "nodes": self.nodes,
            "published_at": self.published_at,
            "publishers": self.publishers,
        }

    @classmethod
    def from_json(cls, data: Any, source: str = "published record") -> PublishedRecord:
        try:
            return cls(
                int(data["generation"]),
                str(data["graph_sha256"]),
                [str(n) for n in data["nodes"]],
                str(data.get("published_at", "")),
                [str(p) for p in data.get("publishers", [])],
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{source}: malformed published record ({exc!r})") from None


@dataclass(frozen=True)
class HoldRecord:
    """A publish the guard held, waiting for confirmation."""

    generation: int
    lost: list[str]
    previous_generation: int | None
    reason: str
    held_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat())
    #: the held nodes a later full read saw gone too (sorted); they no longer count against the limit
    confirmed_gone: list[str] = field(default_factory=list)
    confirmed_at: str | None = None

    @property
    def confirmed(self) -> bool:
        """Has a full read confirmed every node of the loss?"""
        return bool(self.lost) and set(self.lost) <= set(self.confirmed_gone)

    def to_json(self) -> dict[str, Any]:
        return {
            "generation": self.generation,
            "lost": self.lost,
            "previous_generation": self.previous_generation,
            "reason": self.reason,
            "held_at": self.held_at,
            "confirmed": self.confirmed,
            "confirmed_gone": self.confirmed_gone,
            "confirmed_at": self.confirmed_at,
        }

    @classmethod
    def from_json(cls, data: Any, source: str = "hold record") -> HoldRecord:
        try:
            lost = [str(n) for n in data["lost"]]
            # a record written before node-by-node confirmation: "confirmed" covered the whole loss
            gone = data.get("confirmed_gone", lost if data.get("confirmed") else [])
            return cls(
                generation=int(data["generation"]),
                lost=lost,
                previous_generation=data.get("previous_generation"),
                reason=str(data.get("reason", "")),
                held_at=str(data.get("held_at", "")),
                confirmed_gone=sorted(str(n) for n in gone),
                confirmed_at=data.get("confirmed_at"),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{source}: malformed guard hold record ({exc!r})") from None


@dataclass(frozen=True)
class PublishResult:
    """What one :meth:`Publisher.publish` did."""

    #: True when the target now serves this manifest's content (written now or already there)
    published: bool
    detail: str
    #: targets written by this call (parameter names, object names...)
    written: list[str] = field(default_factory=list)
    #: targets left alone, each with the reason (already current, newer generation present...)
    skipped: list[str] = field(default_factory=list)


def already_published(last: PublishedRecord | None, manifest: Manifest) -> bool:
    """Is ``manifest`` what the schedulers were last given? Generation and graph sha256 both equal
    (not only the files: a publish that failed or was held is caught up even when the files match)."""
    return last is not None and (last.generation, last.graph_sha256) == (manifest.generation, manifest.graph_sha256)
