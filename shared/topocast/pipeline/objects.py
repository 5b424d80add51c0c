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

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from topocast.errors import ProviderError, TopocastError
from topocast.model.names import check_upload_name
from topocast.safeio.limits import MAX_UPLOAD_BYTES, check_size

__all__ = [
    "MUST_NOT_EXIST",
    "UPLOAD_MEDIA_TYPE",
    "UPLOAD_NAME",
    "ObjectInfo",
    "ObjectStore",
    "StoredObject",
    "UploadSet",
    "cluster_base",
    "get_json",
    "put_json",
    "read_good_uploads",
    "read_uploads",
]

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

    def get(self, key: str, *, limit: int | None = None) -> StoredObject | None:
        """The object's bytes and their version token, or None when it does not exist.

        An object over ``limit`` bytes (default: the largest graph, ``MAX_GRAPH_BYTES``) is refused by
        its stored size before its bytes are read (a :class:`TopocastError` naming it)."""
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
        """Every object whose key starts with ``prefix`` (all pages), with its token, size and ``updated``."""
        ...

    def copy(self, key: str, to: str, *, metadata: dict[str, str]) -> None:
        """Copy ``key`` to ``to`` (same bucket) with ``metadata`` replacing the source's (ASCII on S3)."""
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
UPLOAD_MEDIA_TYPE = "text/plain; charset=utf-8"


def _upload_infos(objects: ObjectStore, prefix: str, name: str = UPLOAD_NAME) -> list[ObjectInfo]:
    """Every ``<prefix>/<host>/<name>`` under ``prefix`` (listed, with sizes), newest first."""
    prefix = prefix.strip("/")
    depth = prefix.count("/") + 2 if prefix else 1
    found = [
        o for o in objects.list_prefix(f"{prefix}/" if prefix else "")
        if o.key.endswith(f"/{name}") and o.key.count("/") == depth
    ]  # fmt: skip
    found.sort(key=lambda o: (-(o.updated.timestamp() if o.updated else 0.0), o.key))
    return found


def read_uploads(
    objects: ObjectStore, prefix: str, *, limit: int = MAX_UPLOAD_BYTES, name: str = UPLOAD_NAME
) -> dict[str, bytes]:
    """Every ``<prefix>/<host>/ibnetdiscover.out`` under ``prefix``, newest first: ``{uri: content}``.

    Feed it to ``ibnetdiscover.discover(texts=...)``, which merges them (first wins on conflicts).
    """
    out: dict[str, bytes] = {}
    for info in _upload_infos(objects, prefix, name):
        got = objects.get(info.key, limit=limit)
        if got is not None:
            out[objects.uri(info.key)] = got.data
    return out


@dataclass
class UploadSet:
    """What discovery may use: each host's upload, or its last good one when the upload is bad."""

    #: source uri -> content, newest first (a fallback is named by its last-good/ uri)
    texts: dict[str, bytes]
    #: (upload uri, reason) of every upload moved to quarantine/ by this read
    quarantined: list[tuple[str, str]]
    #: hosts whose last good upload stands in for a bad one
    fallbacks: list[str]


def read_good_uploads(
    objects: ObjectStore,
    prefix: str,
    check: Callable[[bytes, str], object],
    *,
    limit: int = MAX_UPLOAD_BYTES,
    name: str = UPLOAD_NAME,
) -> UploadSet:
    """The uploads under ``prefix`` that ``check(content, uri)`` accepts; bad ones are quarantined.

    ``<base>/uploads/<host>/ibnetdiscover.out`` is good when it is at most
    ``limit`` bytes (checked by its listed size, before reading) and ``check``
    does not raise. A good upload is copied to ``<base>/last-good/<host>/`` (when
    it changed); a bad one is moved to ``<base>/quarantine/<host>/<time>-ibnetdiscover.out``
    with its reason in the object's metadata, and the host's last good copy
    is used instead. So one writer leaving garbage in ``uploads/`` neither blocks
    discovery nor loses that host's fabric. The same code runs in both clouds'
    discover functions and in ``topocast collect``'s reader; ``name`` selects the
    upload kind (``ibnetdiscover.out``, or ``nvlink.json`` of ``collect nvlink``).
    """
    prefix = prefix.strip("/")
    base = prefix.rsplit("/", 1)[0] if "/" in prefix else ""

    def sibling(area: str, host: str, file: str = name) -> str:
        return "/".join(p for p in (base, area, host, file) if p)

    out = UploadSet({}, [], [])
    for info in _upload_infos(objects, prefix, name):
        uri = objects.uri(info.key)
        host = info.key.rsplit("/", 2)[-2]
        try:
            check_upload_name(host, f"upload {uri}: host")
        except TopocastError as exc:
            # never followed (``..`` resolves into another cluster's uploads in a normalising store) and
            # never used as a path part: set aside under a name derived from the key, with its reason
            reason = str(exc)[:500]
            stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
            digest = hashlib.sha256(info.key.encode()).hexdigest()[:16]
            objects.copy(info.key, sibling("quarantine", "_bad-host-name", f"{stamp}-{digest}-{name}"),
                         metadata={"reason": reason})  # fmt: skip
            objects.delete(info.key)
            out.quarantined.append((uri, reason))
            continue
        good_key = sibling("last-good", host)
        try:
            check_size(info.size, limit, uri, ProviderError)
            got = objects.get(info.key, limit=limit)
            if got is None:  # deleted since the listing: nothing to use or to quarantine
                continue
            check(got.data, uri)
        except (TopocastError, UnicodeDecodeError, ValueError) as exc:
            reason = " ".join(str(exc).split())[:500]
            stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
            objects.copy(info.key, sibling("quarantine", host, f"{stamp}-{name}"), metadata={"reason": reason})
            objects.delete(info.key)  # moved, not copied: the next discovery does not see it again
            out.quarantined.append((uri, reason))
            good = objects.get(good_key, limit=limit)
            if good is not None:
                out.texts[objects.uri(good_key)] = good.data
                out.fallbacks.append(host)
            continue
        digest = hashlib.sha256(got.data).hexdigest()
        stored = objects.head(good_key)
        if stored is None or stored.metadata.get("content-sha256") != digest:
            objects.put(good_key, got.data, content_type=UPLOAD_MEDIA_TYPE,
                        metadata={"content-sha256": digest, "source": info.key})  # fmt: skip
        out.texts[uri] = got.data
    return out
