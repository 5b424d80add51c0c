"""Rendered artifacts and their manifest: what render writes and publish reads.

Per generation, the artifact store holds one file per format plus a
``manifest.json``::

    {"generation": 12, "graph_sha256": "…", "rendered_at": "…",
     "artifacts": [{"format": "slurm-tree", "file": "topology.conf", "sha256": "…",
                    "node_count": 512, "media_type": "text/plain", "size": 18234}]}

and a "latest" manifest that only moves forward. Files are written first and the
manifests last, so a reader that finds a manifest always finds its files.

:class:`ObjectArtifactStore` keeps them in a bucket (any
:class:`~topocast.pipeline.objects.ObjectStore`: S3, Cloud Storage) under
``<prefix>/<cluster>/rendered/``::

    000000000012/topology-tree.conf   one object per rendered file (metadata: generation, sha256)
    000000000012/manifest.json        the generation's manifest, written after its files
    latest.json                       copy of the newest manifest, moved only from the version
                                      read, so it never goes back to an older generation
"""

from __future__ import annotations

import hashlib

from topocast.errors import TopocastError
from topocast.pipeline.objects import MUST_NOT_EXIST, ObjectStore, cluster_base
from topocast.ports.records import Manifest

__all__ = ["ArtifactNotFoundError", "ObjectArtifactStore"]


class ArtifactNotFoundError(TopocastError, LookupError):
    """A rendered file or manifest is not in the artifact store."""


class ObjectArtifactStore:
    """:class:`~topocast.ports.protocols.ArtifactStore` of one cluster in a bucket (layout: the module docstring)."""

    def __init__(self, objects: ObjectStore, prefix: str, cluster: str) -> None:
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
                if_generation_match=current.generation if current else MUST_NOT_EXIST,
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
