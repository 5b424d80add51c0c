"""S3 implementation of :class:`topocast.pipeline.artifacts.ArtifactStore`.

Layout under ``s3://<bucket>/<prefix>/<cluster>/rendered/``::

    000000000012/topology.conf     one object per rendered file (metadata: generation, sha256)
    000000000012/manifest.json     the generation's manifest, written after its files
    latest.json                    copy of the newest manifest; moved with If-Match so it never goes back

Transient S3 failures are retried (bounded), then propagate.
"""

from __future__ import annotations

import hashlib
from typing import Any

from topocast.aws.retry import error_code, with_retries
from topocast.pipeline.artifacts import ArtifactNotFoundError, Manifest

_MISSING = {"NoSuchKey", "404", "NotFound"}


class S3ArtifactStore:
    """Rendered files and manifests of one cluster in one S3 bucket (see module docstring)."""

    def __init__(
        self, bucket: str, prefix: str, cluster: str, s3_client: Any, *, attempts: int = 4, base_delay: float = 0.1
    ) -> None:
        self.bucket = bucket
        self.cluster = cluster
        self.s3 = s3_client
        self._attempts = attempts
        self._base_delay = base_delay
        self.base_key = "/".join(p for p in (prefix.strip("/"), cluster, "rendered") if p)
        self.latest_key = f"{self.base_key}/latest.json"

    def key(self, generation: int, filename: str) -> str:
        return f"{self.base_key}/{generation:012d}/{filename}"

    def artifact_uri(self, generation: int, filename: str) -> str:
        return f"s3://{self.bucket}/{self.key(generation, filename)}"

    def _call(self, what: str, fn: Any, **kwargs: Any) -> Any:
        return with_retries(lambda: fn(**kwargs), what=what, attempts=self._attempts, base_delay=self._base_delay)

    def _get(self, key: str) -> tuple[bytes, str] | None:
        try:
            resp = self._call(f"read s3://{self.bucket}/{key}", self.s3.get_object, Bucket=self.bucket, Key=key)
        except Exception as exc:
            if error_code(exc) in _MISSING:
                return None
            raise
        return resp["Body"].read(), resp["ETag"]

    # ----- files -------------------------------------------------------------------
    def put_artifact(self, generation: int, filename: str, content: bytes, media_type: str) -> str:
        key = self.key(generation, filename)
        self._call(
            f"write s3://{self.bucket}/{key}",
            self.s3.put_object,
            Bucket=self.bucket,
            Key=key,
            Body=content,
            ContentType=media_type,
            Metadata={"generation": str(generation), "sha256": hashlib.sha256(content).hexdigest()},
        )
        return f"s3://{self.bucket}/{key}"

    def get_artifact(self, generation: int, filename: str) -> bytes:
        got = self._get(self.key(generation, filename))
        if got is None:
            raise ArtifactNotFoundError(f"{self.artifact_uri(generation, filename)} not found")
        return got[0]

    # ----- manifests ----------------------------------------------------------------
    def put_manifest(self, manifest: Manifest) -> bool:
        body = manifest.dumps()
        key = self.key(manifest.generation, "manifest.json")
        self._call(
            f"write s3://{self.bucket}/{key}",
            self.s3.put_object,
            Bucket=self.bucket,
            Key=key,
            Body=body,
            ContentType="application/json",
        )
        for _ in range(10):
            current = self._get(self.latest_key)
            if current is not None:
                latest = Manifest.loads(current[0], f"s3://{self.bucket}/{self.latest_key}")
                if latest.generation > manifest.generation:
                    return False
            condition = {"IfMatch": current[1]} if current else {"IfNoneMatch": "*"}
            try:
                self._call(
                    f"write s3://{self.bucket}/{self.latest_key}",
                    self.s3.put_object,
                    Bucket=self.bucket,
                    Key=self.latest_key,
                    Body=body,
                    ContentType="application/json",
                    **condition,
                )
                return True
            except Exception as exc:
                if error_code(exc) != "PreconditionFailed":
                    raise
        return False

    def get_manifest(self, generation: int) -> Manifest:
        key = self.key(generation, "manifest.json")
        got = self._get(key)
        if got is None:
            raise ArtifactNotFoundError(f"s3://{self.bucket}/{key} not found")
        return Manifest.loads(got[0], f"s3://{self.bucket}/{key}")

    def latest_manifest(self) -> Manifest | None:
        got = self._get(self.latest_key)
        return None if got is None else Manifest.loads(got[0], f"s3://{self.bucket}/{self.latest_key}")
