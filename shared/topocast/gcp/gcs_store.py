"""Graph generations in Cloud Storage: :class:`topocast.pipeline.store.ObjectGraphStore` over :class:`.GcsObjects`.

Layout under ``gs://<bucket>/<prefix>/<cluster>/graphs/`` (the same as on S3)
and the write protocol (create-only generation objects, a pointer moved only
from the version read) are described in :mod:`topocast.pipeline.store`; Cloud
Storage supplies the generation preconditions (``ifGenerationMatch=0`` to
create, ``=P`` to replace exactly generation P).
"""

from __future__ import annotations

from topocast.gcp.gcs import GcsObjects
from topocast.pipeline.store import ObjectGraphStore

__all__ = ["GcsGraphStore"]


class GcsGraphStore(ObjectGraphStore):
    """Graph generations of one cluster in one bucket."""

    objects: GcsObjects  # constructed as GcsGraphStore(GcsObjects(bucket, client), prefix, cluster)
