"""S3 as a :class:`topocast.pipeline.objects.ObjectStore`: the object I/O of every S3-backed store.

:class:`S3Backed` turns a bucket-neutral store (graph generations, artifacts,
guard memory) into its S3 flavour with the ``(bucket, prefix, cluster, s3_client)``
constructor the AWS runtime uses.

The version token is the object's ETag. Conditions map to S3 conditional
writes: :data:`~topocast.pipeline.objects.MUST_NOT_EXIST` is ``If-None-Match: *``
(create only), an ETag is ``If-Match`` (replace exactly that version); a
condition that does not hold (``PreconditionFailed``) is the answer ``None``.
Transient failures are retried a bounded number of times (:mod:`.retry`), then
propagate unchanged.
"""

from __future__ import annotations

from typing import Any

from topocast.aws.retry import error_code, with_retries
from topocast.errors import InvalidGraphError, ProviderError
from topocast.pipeline.objects import MUST_NOT_EXIST, ObjectInfo, StoredObject
from topocast.safeio.limits import MAX_GRAPH_BYTES, check_size, read_capped

_MISSING = {"NoSuchKey", "404", "NotFound"}
_LOST_RACE = {"PreconditionFailed"}


class S3Objects:
    """Objects of one S3 bucket through a boto3 S3 client."""

    def __init__(self, bucket: str, s3_client: Any, *, attempts: int | None = None, base_delay: float = 0.1) -> None:
        self.bucket = bucket
        self.s3 = s3_client
        self.attempts = attempts
        self.base_delay = base_delay

    def uri(self, key: str) -> str:
        return f"s3://{self.bucket}/{key}"

    def _call(self, what: str, fn: Any, **kwargs: Any) -> Any:
        return with_retries(lambda: fn(**kwargs), what=what, attempts=self.attempts, base_delay=self.base_delay)

    def head(self, key: str) -> ObjectInfo | None:
        try:
            resp = self._call(f"head {self.uri(key)}", self.s3.head_object, Bucket=self.bucket, Key=key)
        except Exception as exc:
            if error_code(exc) in _MISSING:
                return None
            raise
        return ObjectInfo(key, resp["ETag"], dict(resp.get("Metadata") or {}), int(resp.get("ContentLength") or 0))

    def get(self, key: str, *, limit: int | None = None) -> StoredObject | None:
        try:
            resp = self._call(f"read {self.uri(key)}", self.s3.get_object, Bucket=self.bucket, Key=key)
        except Exception as exc:
            if error_code(exc) in _MISSING:
                return None
            raise
        # every object topocast stores is at most a graph (uploads: ``limit``); a bigger one is refused
        # by its length, unread
        cap, error = (MAX_GRAPH_BYTES, InvalidGraphError) if limit is None else (limit, ProviderError)
        try:
            check_size(resp.get("ContentLength"), cap, self.uri(key), error)
            data = read_capped(resp["Body"], cap, self.uri(key), error)
        finally:
            resp["Body"].close()
        return StoredObject(key, data, resp["ETag"], dict(resp.get("Metadata") or {}), resp.get("LastModified"))

    def put(
        self,
        key: str,
        data: bytes,
        *,
        content_type: str = "application/octet-stream",
        metadata: dict[str, str] | None = None,
        if_generation_match: Any | None = None,
    ) -> Any | None:
        extra: dict[str, Any] = {"Metadata": metadata} if metadata else {}
        if if_generation_match == MUST_NOT_EXIST:
            extra["IfNoneMatch"] = "*"
        elif if_generation_match is not None:
            extra["IfMatch"] = if_generation_match
        try:
            resp = self._call(
                f"write {self.uri(key)}",
                self.s3.put_object,
                Bucket=self.bucket,
                Key=key,
                Body=data,
                ContentType=content_type,
                **extra,
            )
        except Exception as exc:
            if if_generation_match is not None and error_code(exc) in _LOST_RACE:
                return None
            raise
        return resp.get("ETag", "")

    def delete(self, key: str, *, if_generation_match: Any | None = None) -> bool:
        """Delete (S3 does not say whether the object existed: True unless the condition failed)."""
        extra = {"IfMatch": if_generation_match} if if_generation_match is not None else {}
        try:
            self._call(f"delete {self.uri(key)}", self.s3.delete_object, Bucket=self.bucket, Key=key, **extra)
        except Exception as exc:
            if if_generation_match is not None and error_code(exc) in _LOST_RACE:
                return False
            raise
        return True

    def list_prefix(self, prefix: str) -> list[ObjectInfo]:
        out: list[ObjectInfo] = []
        pages = self.s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix)
        for page in self._call(f"list {self.uri(prefix)}", lambda: list(pages)):
            out += [
                ObjectInfo(o["Key"], o.get("ETag"), {}, int(o.get("Size") or 0), o.get("LastModified"))
                for o in page.get("Contents", [])
            ]
        return out

    def copy(self, key: str, to: str, *, metadata: dict[str, str]) -> None:
        """CopyObject with the metadata replaced (user metadata travels in HTTP headers: ASCII only)."""
        self._call(
            f"copy {self.uri(key)} to {self.uri(to)}",
            self.s3.copy_object,
            Bucket=self.bucket,
            Key=to,
            CopySource={"Bucket": self.bucket, "Key": key},
            Metadata={k: v.encode("ascii", "replace").decode() for k, v in metadata.items()},
            MetadataDirective="REPLACE",
        )


class S3Backed:
    """Mixin: ``Store(bucket, prefix, cluster, s3_client)`` for a store built on ``(objects, prefix, cluster)``."""

    def __init__(
        self,
        bucket: str,
        prefix: str,
        cluster: str,
        s3_client: Any,
        *,
        attempts: int | None = None,
        base_delay: float = 0.1,
    ) -> None:
        objects = S3Objects(bucket, s3_client, attempts=attempts, base_delay=base_delay)
        super().__init__(objects, prefix, cluster)  # type: ignore[call-arg]  # the store class after this mixin
        self.bucket = bucket
        self.s3 = s3_client
