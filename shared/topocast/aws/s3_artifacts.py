"""Rendered files and manifests in S3: :class:`topocast.pipeline.artifacts.ObjectArtifactStore` over S3.

Layout under ``s3://<bucket>/<prefix>/<cluster>/rendered/`` (see
:mod:`topocast.pipeline.artifacts`); ``latest.json`` moves with ``If-Match``,
so it never goes back. Transient S3 failures are retried (bounded), then propagate.
"""

from __future__ import annotations

from topocast.aws.s3_objects import S3Backed
from topocast.pipeline.artifacts import ObjectArtifactStore


class S3ArtifactStore(S3Backed, ObjectArtifactStore):
    """Rendered files and manifests of one cluster in S3: ``S3ArtifactStore(bucket, prefix, cluster, s3)``."""
