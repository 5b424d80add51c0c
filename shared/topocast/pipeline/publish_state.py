"""The guard's memory: what the schedulers were last given and a publish the guard held, in a bucket.

:class:`PublishedRecord` keeps the node names of the last *published* graph, so the blast-radius
guard (:mod:`topocast.pipeline.guard`) never depends on old generations still existing;
:class:`ObjectPublishState` stores it and the :class:`~topocast.pipeline.guard.HoldRecord` as two
small JSON objects (S3 in :mod:`topocast.aws.publish_state`, Cloud Storage in
:mod:`topocast.gcp.gcs_artifacts`).
"""

from __future__ import annotations

from topocast.errors import TopocastError
from topocast.pipeline.objects import ObjectStore, cluster_base, get_json, put_json
from topocast.ports.records import HoldRecord, PublishedRecord

__all__ = ["ObjectPublishState"]


class ObjectPublishState:
    """:class:`~topocast.ports.protocols.PublishState` as two small JSON objects under ``<prefix>/<cluster>/state/``::

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
