"""Guard memory on AWS: the published record and the hold record as small S3 objects.

Layout under ``s3://<bucket>/<prefix>/<cluster>/state/``::

    published.json    {generation, graph_sha256, nodes[], published_at, publishers[]}
    guard-hold.json   {generation, lost[], previous_generation, reason, held_at, confirmed, confirmed_at}

S3 (not the debounce DynamoDB item) because the node list can be large and the
render/publish functions already have access to the bucket. The operator
override is read from env ``TOPOCAST_GUARD_ALLOW_GENERATION`` or an SSM
parameter (default ``/topocast/<cluster>/guard/allow-generation``) holding the
generation number to let through, e.g.::

    aws ssm put-parameter --name /topocast/c1/guard/allow-generation --value 42 --type String --overwrite
"""

from __future__ import annotations

import json
import os
from typing import Any

from topocast.aws.retry import error_code, with_retries
from topocast.errors import TopocastError
from topocast.pipeline.guard import OVERRIDE_ENV, HoldRecord
from topocast.pipeline.publish_stage import PublishedRecord

_MISSING = {"NoSuchKey", "404", "NotFound"}


class S3PublishState:
    """:class:`topocast.pipeline.publish_stage.PublishState` in S3."""

    def __init__(self, bucket: str, prefix: str, cluster: str, s3_client: Any) -> None:
        self.bucket = bucket
        self.cluster = cluster
        self.s3 = s3_client
        base = "/".join(p for p in (prefix.strip("/"), cluster, "state") if p)
        self.published_key = f"{base}/published.json"
        self.hold_key = f"{base}/guard-hold.json"

    def _get(self, key: str) -> Any | None:
        try:
            resp = with_retries(lambda: self.s3.get_object(Bucket=self.bucket, Key=key), what=f"read {key}")
        except Exception as exc:
            if error_code(exc) in _MISSING:
                return None
            raise
        try:
            return json.loads(resp["Body"].read())
        except ValueError as exc:
            raise TopocastError(f"s3://{self.bucket}/{key}: not valid JSON ({exc})") from None

    def _put(self, key: str, data: dict[str, Any]) -> None:
        body = json.dumps(data, indent=1).encode()
        with_retries(
            lambda: self.s3.put_object(Bucket=self.bucket, Key=key, Body=body, ContentType="application/json"),
            what=f"write s3://{self.bucket}/{key}",
        )

    def load_published(self) -> PublishedRecord | None:
        data = self._get(self.published_key)
        if data is None:
            return None
        try:
            return PublishedRecord.from_json(data, f"s3://{self.bucket}/{self.published_key}")
        except ValueError as exc:
            raise TopocastError(str(exc)) from None

    def save_published(self, record: PublishedRecord) -> None:
        self._put(self.published_key, record.to_json())

    def load_hold(self) -> HoldRecord | None:
        data = self._get(self.hold_key)
        if data is None:
            return None
        try:
            return HoldRecord.from_json(data, f"s3://{self.bucket}/{self.hold_key}")
        except ValueError as exc:
            raise TopocastError(str(exc)) from None

    def save_hold(self, hold: HoldRecord) -> None:
        self._put(self.hold_key, hold.to_json())

    def clear_hold(self) -> None:
        with_retries(
            lambda: self.s3.delete_object(Bucket=self.bucket, Key=self.hold_key), what=f"delete {self.hold_key}"
        )


def read_override(cluster: str, ssm: Any | None = None, parameter: str | None = None) -> str | None:
    """The operator's allow-generation value: env first, then the SSM parameter (None if unset)."""
    value = os.environ.get(OVERRIDE_ENV)
    if value:
        return value
    if ssm is None:
        return None
    name = parameter or f"/topocast/{cluster}/guard/allow-generation"
    try:
        resp = with_retries(lambda: ssm.get_parameter(Name=name), what=f"read SSM parameter {name}")
    except Exception as exc:
        if error_code(exc) == "ParameterNotFound":
            return None
        raise
    return str(resp["Parameter"]["Value"])
