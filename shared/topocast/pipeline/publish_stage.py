"""The publish stage: blast-radius guard, then every configured publisher, then bookkeeping.

:func:`publish_manifest` compares the manifest's graph with the last
*published* one (the :class:`PublishedRecord`, which keeps the node names so
the comparison never depends on old generations still existing), holds the
publish when the guard says so (recording a :class:`HoldRecord`), and records
the new published state only when every publisher succeeded.

:func:`confirm_on_reconcile` is for the reconcile (full discovery) path: if
it still sees the held nodes gone, the hold is confirmed and the next
:func:`publish_manifest` lets that loss through.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from topocast.errors import TopocastError
from topocast.model.graph import TopologyGraph
from topocast.pipeline.artifacts import ArtifactStore, Manifest
from topocast.pipeline.guard import (
    DEFAULT_MAX_LOSS_FRACTION,
    GuardDecision,
    HoldRecord,
    check,
    confirm,
    hold_covers,
    override_allows,
    reconcile_confirms,
)
from topocast.pipeline.objects import ObjectStore, cluster_base, get_json, put_json
from topocast.pipeline.publisher import Publisher, PublishResult
from topocast.pipeline.store import GraphStore


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


class PublishState(Protocol):
    """Where the guard's memory lives (:class:`ObjectPublishState` in a bucket)."""

    def load_published(self) -> PublishedRecord | None: ...
    def save_published(self, record: PublishedRecord) -> None: ...
    def load_hold(self) -> HoldRecord | None: ...
    def save_hold(self, hold: HoldRecord) -> None: ...
    def clear_hold(self) -> None: ...


class ObjectPublishState:
    """:class:`PublishState` as two small JSON objects in a bucket, under ``<prefix>/<cluster>/state/``::

    published.json    {generation, graph_sha256, nodes[], published_at, publishers[]}
    guard-hold.json   {generation, lost[], previous_generation, reason, held_at, confirmed, confirmed_at}
    """

    def __init__(self, objects: ObjectStore, prefix: str, cluster: str) -> None:
        self.objects = objects
        self.cluster = cluster
        base = cluster_base(prefix, cluster, "state")
        self.published_key = f"{base}/published.json"
        self.hold_key = f"{base}/guard-hold.json"

    def load_published(self) -> PublishedRecord | None:
        data = get_json(self.objects, self.published_key)
        if data is None:
            return None
        try:
            return PublishedRecord.from_json(data, self.objects.uri(self.published_key))
        except ValueError as exc:
            raise TopocastError(str(exc)) from None

    def save_published(self, record: PublishedRecord) -> None:
        put_json(self.objects, self.published_key, record.to_json())

    def load_hold(self) -> HoldRecord | None:
        data = get_json(self.objects, self.hold_key)
        if data is None:
            return None
        try:
            return HoldRecord.from_json(data, self.objects.uri(self.hold_key))
        except ValueError as exc:
            raise TopocastError(str(exc)) from None

    def save_hold(self, hold: HoldRecord) -> None:
        put_json(self.objects, self.hold_key, hold.to_json())

    def clear_hold(self) -> None:
        self.objects.delete(self.hold_key)


@dataclass(frozen=True)
class PublishOutcome:
    #: every publisher now serves this manifest
    published: bool
    #: the guard held it (nothing was pushed)
    held: bool
    guard: GuardDecision
    results: dict[str, PublishResult]
    detail: str


def load_files(artifacts: ArtifactStore, manifest: Manifest) -> dict[str, bytes]:
    """The bytes of every file a manifest lists (for publishing a manifest rendered earlier)."""
    return {a.file: artifacts.get_artifact(manifest.generation, a.file) for a in manifest.artifacts}


def publish_manifest(
    manifest: Manifest,
    files: Mapping[str, bytes],
    publishers: Sequence[Publisher],
    *,
    graphs: GraphStore,
    state: PublishState,
    max_loss_fraction: float = DEFAULT_MAX_LOSS_FRACTION,
    override: str | None = None,
) -> PublishOutcome:
    """Guard, publish, record. ``override``: the operator's allow-generation value, if any."""
    new_nodes = set(graphs.get(manifest.generation).graph.node_names())
    last = state.load_published()
    previous = set(last.nodes) if last is not None else None
    hold = state.load_hold()
    lost = sorted((previous or set()) - new_nodes)
    decision = check(
        previous,
        new_nodes,
        max_loss_fraction,
        confirmed_by_reconcile=hold_covers(hold, lost),
        override=override_allows(override, manifest.generation),
    )
    if not decision.allow:
        if hold is None or (hold.generation, hold.lost) != (manifest.generation, decision.lost):
            state.save_hold(
                HoldRecord(manifest.generation, decision.lost, last.generation if last else None, decision.reason)
            )
        return PublishOutcome(False, True, decision, {}, decision.reason)
    results = {p.name: p.publish(manifest, files) for p in publishers}
    done = all(r.published for r in results.values())
    if done:
        state.save_published(
            PublishedRecord(manifest.generation, manifest.graph_sha256, sorted(new_nodes), publishers=list(results))
        )
        if hold is not None:
            state.clear_hold()
    summary = "; ".join(f"{name}: {r.detail}" for name, r in results.items()) or "no publishers configured"
    return PublishOutcome(done, False, decision, results, f"{decision.reason}. {summary}")


def confirm_on_reconcile(state: PublishState, reconcile_graph: TopologyGraph) -> HoldRecord | None:
    """After a full discovery: confirm a pending hold if the held nodes are still gone.

    Returns the confirmed hold (the caller then re-runs :func:`publish_manifest`
    on the latest manifest), or None when there is nothing to confirm.
    """
    hold = state.load_hold()
    if hold is None or hold.confirmed or not reconcile_confirms(hold, set(reconcile_graph.node_names())):
        return None
    confirmed = confirm(hold)
    state.save_hold(confirmed)
    return confirmed
