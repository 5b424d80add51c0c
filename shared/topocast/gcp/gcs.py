"""Cloud Storage object I/O: read, conditional write, delete and list objects of one bucket.

Every stateful piece on GCP (graph generations, manifests, guard records,
debounce state, the Slurm files) is an object written with a **generation
precondition** (``ifGenerationMatch``): ``0`` means "create, must not exist",
``N`` means "replace exactly generation N". A failed precondition (HTTP 412)
is not an error here but the answer ``None`` / ``False``: the caller lost a race
and re-reads. Everything else from the SDK propagates unchanged (after
google-cloud-storage's own retries of 429/5xx), so the platform retries the
event that caused it.

Reads are two calls: the metadata (generation, custom metadata) and then the
bytes *of that generation* (``ifGenerationMatch`` on the download), retried if
the object changed in between, so data and generation always belong together.
"""

from __future__ import annotations

from typing import Any

from topocast.errors import InvalidGraphError, ProviderError
from topocast.pipeline.objects import ObjectInfo, StoredObject
from topocast.safeio.limits import MAX_GRAPH_BYTES, check_size

__all__ = ["GcsObjects", "ObjectInfo", "StoredObject"]


class GcsObjects:
    """:class:`topocast.pipeline.objects.ObjectStore` over a ``google.cloud.storage.Client``; token = generation."""

    def __init__(self, bucket: str, client: Any, *, read_attempts: int = 5) -> None:
        self.bucket_name = bucket
        self.client = client
        self.bucket = client.bucket(bucket)
        self.read_attempts = read_attempts

    def uri(self, key: str) -> str:
        return f"gs://{self.bucket_name}/{key}"

    @staticmethod
    def _retry() -> Any:
        from google.cloud.storage.retry import DEFAULT_RETRY

        return DEFAULT_RETRY

    def head(self, key: str) -> ObjectInfo | None:
        blob = self.bucket.get_blob(key, retry=self._retry())
        if blob is None:
            return None
        return ObjectInfo(key, int(blob.generation), dict(blob.metadata or {}), int(blob.size or 0))

    def get(self, key: str, *, limit: int | None = None) -> StoredObject | None:
        """The object's bytes and generation, or None when it does not exist."""
        from google.api_core import exceptions as gexc

        for _ in range(self.read_attempts):
            blob = self.bucket.get_blob(key, retry=self._retry())
            if blob is None:
                return None
            generation, metadata = int(blob.generation), dict(blob.metadata or {})
            # every object topocast stores is at most a graph (uploads: ``limit``); a bigger one is
            # refused by its size, unread
            cap, error = (MAX_GRAPH_BYTES, InvalidGraphError) if limit is None else (limit, ProviderError)
            check_size(blob.size, cap, self.uri(key), error)
            try:
                data = blob.download_as_bytes(if_generation_match=generation, retry=self._retry())
            except (gexc.PreconditionFailed, gexc.NotFound):
                continue  # replaced or deleted between the two calls: read again
            return StoredObject(key, data, generation, metadata, blob.updated)
        raise RuntimeError(f"{self.uri(key)} kept changing while being read ({self.read_attempts} attempts)")

    def put(
        self,
        key: str,
        data: bytes,
        *,
        content_type: str = "application/octet-stream",
        metadata: dict[str, str] | None = None,
        if_generation_match: int | None = None,
    ) -> int | None:
        """Write; returns the new generation, or None when ``if_generation_match`` did not hold."""
        from google.api_core import exceptions as gexc

        blob = self.bucket.blob(key)
        if metadata:
            blob.metadata = metadata
        try:
            blob.upload_from_string(
                data, content_type=content_type, if_generation_match=if_generation_match, retry=self._retry()
            )
        except gexc.PreconditionFailed:
            return None
        return int(blob.generation) if blob.generation is not None else 0

    def delete(self, key: str, *, if_generation_match: int | None = None) -> bool:
        """Delete; False when it was already gone or ``if_generation_match`` did not hold."""
        from google.api_core import exceptions as gexc

        try:
            self.bucket.blob(key).delete(if_generation_match=if_generation_match, retry=self._retry())
        except (gexc.PreconditionFailed, gexc.NotFound):
            return False
        return True

    def list_prefix(self, prefix: str) -> list[ObjectInfo]:
        return [
            ObjectInfo(b.name, int(b.generation), dict(b.metadata or {}), int(b.size or 0), b.updated)
            for b in self.client.list_blobs(self.bucket_name, prefix=prefix, retry=self._retry())
        ]

    def copy(self, key: str, to: str, *, metadata: dict[str, str]) -> None:
        """A server-side copy, then the copy's metadata set to ``metadata`` (replacing the source's)."""
        copied = self.bucket.copy_blob(self.bucket.blob(key), self.bucket, to, retry=self._retry())
        copied.metadata = {**dict.fromkeys(copied.metadata or {}), **metadata}  # None removes a key
        copied.patch(retry=self._retry())
