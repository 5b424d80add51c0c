"""Publish Slurm files as Cloud Storage objects for the head node's pull agent (``topocast pull --source gs://...``).

One object per Slurm artifact, named like the SSM parameters on AWS:
``gs://<bucket>/<prefix>/<cluster>/slurm/topology-tree.conf``, ``topology-block.conf``
and ``topology.yaml``, so the head node picks the plugin it runs by the object it
pulls; custom metadata ``generation``, ``sha256`` and ``format``. Why an object and not
Parameter Manager: the file already lives in the bucket, objects have no size
limit that a large cluster's topology.conf could hit, a reader gets bytes and
metadata of one generation atomically, and writes take **generation
preconditions**, which Parameter Manager versions do not offer. The pull agent
needs only ``storage.objects.get`` on one object.

Never regress: the current object's metadata is read first; if it already
holds a newer topocast generation the file is skipped (a slow, older publish
lost the race). The write itself is conditioned on the object generation just
read (``ifGenerationMatch``), so two publishers racing cannot interleave: the
loser re-reads and decides again. The same generation with the same sha256 is
a no-op.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from typing import Any

from topocast.errors import TopocastError
from topocast.gcp.gcs import GcsObjects
from topocast.pipeline.objects import MUST_NOT_EXIST
from topocast.ports.records import ManifestEntry
from topocast.publish.base import FileOutcome, FilePublisher

log = logging.getLogger(__name__)

SLURM_FORMATS = ("slurm-tree", "slurm-block", "slurm-yaml")


class GcsSlurmPublisher(FilePublisher):
    """:class:`topocast.publish.base.Publisher` writing Slurm files to Cloud Storage objects."""

    name = "gcs"
    nothing_detail = "no Slurm artifact in the manifest"

    def __init__(self, objects: GcsObjects, prefix: str, *, formats: Collection[str] = SLURM_FORMATS) -> None:
        self.objects = objects
        self.prefix = prefix.strip("/")
        self.formats = set(formats)
        unknown = self.formats - set(SLURM_FORMATS)
        if unknown:
            raise ValueError(f"GCS Slurm publisher: formats {sorted(unknown)} are not Slurm formats")

    def key(self, installed: str) -> str:
        return f"{self.prefix}/{installed}" if self.prefix else installed

    def uri(self, installed: str) -> str:
        return self.objects.uri(self.key(installed))

    def wants(self, entry: ManifestEntry) -> bool:
        return entry.format in self.formats

    def target(self, entry: ManifestEntry) -> str:
        return self.uri(entry.file)

    def publish_one(self, generation: int, entry: ManifestEntry, content: bytes) -> tuple[FileOutcome, str]:
        key, uri = self.key(entry.file), self.target(entry)
        for _ in range(5):
            current = self.objects.head(key)
            meta = current.metadata if current else {}
            theirs = int(meta["generation"]) if meta.get("generation", "").isdigit() else None
            if theirs is not None and theirs > generation:
                log.warning("%s holds generation %d, not publishing older %d", uri, theirs, generation)
                return "older", f"{uri} holds generation {theirs}"
            if theirs == generation and meta.get("sha256") == entry.sha256:
                return "current", f"{uri} already holds generation {generation}"
            done = self.objects.put(
                key,
                content,
                content_type=entry.media_type,
                metadata={"generation": str(generation), "sha256": entry.sha256, "format": entry.format},
                if_generation_match=current.generation if current else MUST_NOT_EXIST,
            )
            if done is not None:
                log.info("%s <- generation %d", uri, generation)
                return "written", uri
        raise TopocastError(f"{uri}: the object kept changing while publishing generation {generation}; retry")


def from_inputs(inputs: Any) -> GcsSlurmPublisher:
    """Registry factory (``gcs``, registered by :mod:`topocast.gcp.root`): one object per Slurm format under
    ``<prefix>/<cluster>/slurm/``."""
    from topocast.pipeline.objects import cluster_base

    s = inputs.settings
    if inputs.objects is None:
        raise TopocastError("the gcs publisher needs the pipeline's bucket")
    formats = [f for f in s.formats if f in SLURM_FORMATS]
    return GcsSlurmPublisher(inputs.objects, cluster_base(s.prefix, s.cluster, "slurm"), formats=formats)
