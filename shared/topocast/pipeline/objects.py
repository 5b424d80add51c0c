"""Versioned object storage: the one small interface the S3 and Cloud Storage adapters implement.

Every stateful piece of the pipeline that lives in a bucket (graph
generations and their pointer, rendered files and manifests, the guard's
memory) is written against :class:`ObjectStore`, so its logic exists once and
each cloud supplies only the object I/O (:class:`topocast.aws.s3_objects.S3Objects`,
:class:`topocast.gcp.gcs.GcsObjects`).

Each object carries an opaque **version token** (``generation``: the GCS object
generation, the S3 ETag). A write may be conditioned on it:
``if_generation_match=None`` writes unconditionally, :data:`MUST_NOT_EXIST`
(``0``) only creates, any other token replaces exactly that version. A
condition that does not hold is not an error but the answer ``None`` (the
caller lost a race and re-reads); everything else propagates after the
adapter's bounded retries, so the platform retries the event that caused it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from topocast.errors import TopocastError

#: ``if_generation_match`` value meaning "only if the object does not exist yet"
MUST_NOT_EXIST = 0


@dataclass(frozen=True)
class ObjectInfo:
    key: str
    #: the version token (GCS object generation, S3 ETag)
    generation: Any
    metadata: dict[str, str]
    size: int = 0
    #: when the service says this version was written (None: it did not say)
    updated: datetime | None = None


@dataclass(frozen=True)
class StoredObject:
    key: str
    data: bytes
    #: the version token of exactly these bytes
    generation: Any
    metadata: dict[str, str]
    #: when the service says this version was written (None: it did not say)
    updated: datetime | None = None


class ObjectStore(Protocol):
    """Objects of one bucket (see the module docstring for the token rules)."""

    def uri(self, key: str) -> str:
        """``s3://bucket/key`` / ``gs://bucket/key``, for messages."""
        ...

    def head(self, key: str) -> ObjectInfo | None: ...

    def get(self, key: str) -> StoredObject | None:
        """The object's bytes and their version token, or None when it does not exist."""
        ...

    def put(
        self,
        key: str,
        data: bytes,
        *,
        content_type: str = "application/octet-stream",
        metadata: dict[str, str] | None = None,
        if_generation_match: Any | None = None,
    ) -> Any | None:
        """Write; the new version token, or None when ``if_generation_match`` did not hold."""
        ...

    def delete(self, key: str, *, if_generation_match: Any | None = None) -> bool:
        """Delete; False when ``if_generation_match`` did not hold (or, where the service says so, it was gone)."""
        ...

    def list_prefix(self, prefix: str) -> list[ObjectInfo]:
        """Every object whose key starts with ``prefix`` (all pages), with its token and ``updated``."""
        ...


def cluster_base(prefix: str, cluster: str, part: str) -> str:
    """``<prefix>/<cluster>/<part>`` without empty segments: the same layout in every bucket."""
    return "/".join(p for p in (prefix.strip("/"), cluster, part) if p)


def get_json(objects: ObjectStore, key: str) -> Any | None:
    """The object parsed as JSON, None when absent; a clear error naming the object when it is not JSON."""
    got = objects.get(key)
    if got is None:
        return None
    try:
        return json.loads(got.data)
    except ValueError as exc:
        raise TopocastError(f"{objects.uri(key)}: not valid JSON ({exc})") from None


def put_json(objects: ObjectStore, key: str, data: Any) -> None:
    """Write ``data`` as (indented) JSON, unconditionally."""
    objects.put(key, json.dumps(data, indent=1).encode(), content_type="application/json")


#: the file an on-prem collector uploads per host: ``<prefix>/<cluster>/uploads/<host>/ibnetdiscover.out``
UPLOAD_NAME = "ibnetdiscover.out"


def read_uploads(objects: ObjectStore, prefix: str) -> dict[str, bytes]:
    """Every ``<prefix>/<host>/ibnetdiscover.out`` under ``prefix``, newest first: ``{uri: content}``."""
    prefix = prefix.strip("/")
    depth = prefix.count("/") + 2 if prefix else 1
    found = [
        o for o in objects.list_prefix(f"{prefix}/" if prefix else "")
        if o.key.endswith(f"/{UPLOAD_NAME}") and o.key.count("/") == depth
    ]  # fmt: skip
    found.sort(key=lambda o: (-(o.updated.timestamp() if o.updated else 0.0), o.key))
    out: dict[str, bytes] = {}
    for info in found:
        got = objects.get(info.key)
        if got is not None:
            out[objects.uri(info.key)] = got.data
    return out
