"""Cloud Storage implementations of the artifact store and the guard's publish state.

Layout under ``gs://<bucket>/<prefix>/<cluster>/`` (the same as on S3)::

    rendered/000000000012/topology-tree.conf   one object per rendered file (metadata: generation, sha256)
    rendered/000000000012/manifest.json        the generation's manifest, written after its files
    rendered/latest.json                        copy of the newest manifest; moved with ifGenerationMatch,
                                                so it never goes back to an older generation
    state/published.json                        what the schedulers were last given (guard memory)
    state/guard-hold.json                       a publish the guard held
    state/guard-allow-generation                optional, written by an operator: the generation to let through

The operator override is ``TOPOCAST_GUARD_ALLOW_GENERATION`` or that object::

    echo 42 | gcloud storage cp - gs://BUCKET/topocast/c1/state/guard-allow-generation
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any

from topocast.errors import TopocastError
from topocast.gcp.gcs import GcsObjects
from topocast.gcp.gcs_store import cluster_base
from topocast.pipeline.artifacts import ArtifactNotFoundError, Manifest
from topocast.pipeline.guard import OVERRIDE_ENV, HoldRecord
from topocast.pipeline.publish_stage import PublishedRecord


class GcsArtifactStore:
    """:class:`topocast.pipeline.artifacts.ArtifactStore` in Cloud Storage."""

    def __init__(self, objects: GcsObjects, prefix: str, cluster: str) -> None:
        self.objects = objects
        self.cluster = cluster
        self.base_key = cluster_base(prefix, cluster, "rendered")
        self.latest_key = f"{self.base_key}/latest.json"

    def key(self, generation: int, filename: str) -> str:
        return f"{self.base_key}/{generation:012d}/{filename}"

    def artifact_uri(self, generation: int, filename: str) -> str:
        return self.objects.uri(self.key(generation, filename))

    def put_artifact(self, generation: int, filename: str, content: bytes, media_type: str) -> str:
        meta = {"generation": str(generation), "sha256": hashlib.sha256(content).hexdigest()}
        self.objects.put(self.key(generation, filename), content, content_type=media_type, metadata=meta)
        return self.artifact_uri(generation, filename)

    def get_artifact(self, generation: int, filename: str) -> bytes:
        got = self.objects.get(self.key(generation, filename))
        if got is None:
            raise ArtifactNotFoundError(f"{self.artifact_uri(generation, filename)} not found")
        return got.data

    def put_manifest(self, manifest: Manifest) -> bool:
        body = manifest.dumps()
        self.objects.put(self.key(manifest.generation, "manifest.json"), body, content_type="application/json")
        for _ in range(10):
            current = self.objects.get(self.latest_key)
            if current is not None:
                latest = Manifest.loads(current.data, self.objects.uri(self.latest_key))
                if latest.generation > manifest.generation:
                    return False
            moved = self.objects.put(
                self.latest_key,
                body,
                content_type="application/json",
                if_generation_match=current.generation if current else 0,
            )
            if moved is not None:
                return True
        return False

    def get_manifest(self, generation: int) -> Manifest:
        key = self.key(generation, "manifest.json")
        got = self.objects.get(key)
        if got is None:
            raise ArtifactNotFoundError(f"{self.objects.uri(key)} not found")
        return Manifest.loads(got.data, self.objects.uri(key))

    def latest_manifest(self) -> Manifest | None:
        got = self.objects.get(self.latest_key)
        return None if got is None else Manifest.loads(got.data, self.objects.uri(self.latest_key))


class GcsPublishState:
    """:class:`topocast.pipeline.publish_stage.PublishState` in Cloud Storage."""

    def __init__(self, objects: GcsObjects, prefix: str, cluster: str) -> None:
        self.objects = objects
        self.cluster = cluster
        base = cluster_base(prefix, cluster, "state")
        self.published_key = f"{base}/published.json"
        self.hold_key = f"{base}/guard-hold.json"
        self.override_key = f"{base}/guard-allow-generation"

    def _get(self, key: str) -> Any | None:
        got = self.objects.get(key)
        if got is None:
            return None
        try:
            return json.loads(got.data)
        except ValueError as exc:
            raise TopocastError(f"{self.objects.uri(key)}: not valid JSON ({exc})") from None

    def _put(self, key: str, data: dict[str, Any]) -> None:
        self.objects.put(key, json.dumps(data, indent=1).encode(), content_type="application/json")

    def load_published(self) -> PublishedRecord | None:
        data = self._get(self.published_key)
        if data is None:
            return None
        try:
            return PublishedRecord.from_json(data, self.objects.uri(self.published_key))
        except ValueError as exc:
            raise TopocastError(str(exc)) from None

    def save_published(self, record: PublishedRecord) -> None:
        self._put(self.published_key, record.to_json())

    def load_hold(self) -> HoldRecord | None:
        data = self._get(self.hold_key)
        if data is None:
            return None
        try:
            return HoldRecord.from_json(data, self.objects.uri(self.hold_key))
        except ValueError as exc:
            raise TopocastError(str(exc)) from None

    def save_hold(self, hold: HoldRecord) -> None:
        self._put(self.hold_key, hold.to_json())

    def clear_hold(self) -> None:
        self.objects.delete(self.hold_key)

    def read_override(self) -> str | None:
        """The operator's allow-generation value: env first, then the override object (None if unset)."""
        value = os.environ.get(OVERRIDE_ENV)
        if value:
            return value
        got = self.objects.get(self.override_key)
        return None if got is None else got.data.decode("utf-8", "replace").strip()
