"""Cloud Storage implementations of the artifact store and the guard's publish state.

Layout under ``gs://<bucket>/<prefix>/<cluster>/`` (the same as on S3; the
logic is :class:`~topocast.pipeline.artifacts.ObjectArtifactStore` and
:class:`~topocast.pipeline.publish_state.ObjectPublishState`)::

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

from topocast.gcp.gcs import GcsObjects
from topocast.pipeline import guard
from topocast.pipeline.artifacts import ObjectArtifactStore
from topocast.pipeline.objects import cluster_base
from topocast.pipeline.publish_state import ObjectPublishState


class GcsArtifactStore(ObjectArtifactStore):
    """:class:`topocast.ports.protocols.ArtifactStore` in Cloud Storage."""

    objects: GcsObjects  # constructed as GcsArtifactStore(GcsObjects(bucket, client), prefix, cluster)


class GcsPublishState(ObjectPublishState):
    """:class:`topocast.ports.protocols.PublishState` in Cloud Storage, plus the operator override object."""

    def __init__(self, objects: GcsObjects, prefix: str, cluster: str) -> None:
        super().__init__(objects, prefix, cluster)
        self.override_key = f"{cluster_base(prefix, cluster, 'state')}/guard-allow-generation"

    def read_override(self) -> str | None:
        """The operator's allow-generation value (:func:`topocast.pipeline.guard.read_override`: env first),
        then the override object; None if neither is set."""
        return guard.read_override(self._read_object)

    def _read_object(self) -> str | None:
        got = self.objects.get(self.override_key)
        return None if got is None else got.data.decode("utf-8", "replace").strip()
