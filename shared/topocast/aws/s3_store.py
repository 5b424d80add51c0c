"""Graph generations in S3: :class:`topocast.pipeline.store.ObjectGraphStore` over :class:`.S3Objects`.

Layout under ``s3://<bucket>/<prefix>/<cluster>/graphs/`` and the write protocol
(create-only generation objects, a pointer moved with ``If-Match``) are
described in :mod:`topocast.pipeline.store`; S3 supplies the conditional
writes (``If-None-Match: *`` / ``If-Match: <etag>``). Transient S3 failures are
retried a bounded number of times (:mod:`.retry`); after that the error
propagates and the caller's input is retried by the platform.
"""

from __future__ import annotations

from topocast.aws.s3_objects import S3Backed
from topocast.pipeline.store import ObjectGraphStore


class S3GraphStore(S3Backed, ObjectGraphStore):
    """Graph generations for one cluster in one S3 bucket: ``S3GraphStore(bucket, prefix, cluster, s3_client)``."""
