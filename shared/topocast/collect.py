"""Collection agent for on-prem fabrics: run ``ibnetdiscover`` on a fabric-attached host, upload the output.

::

    topocast collect ibnetdiscover --upload s3://bucket/prefix     # or gs://bucket/prefix, or --input FILE

The output lands at ``<prefix>/<host>/ibnetdiscover.out`` with object metadata
``sha256`` (the *fabric* digest, see below), ``content-sha256`` (the bytes),
``host`` and ``collected-at``. The bucket's object-created event triggers
discover, so the serverless pipeline stays as it is.

A no-change run uploads nothing: ``sha256`` is computed over the parsed fabric
(node IDs, kinds, descriptions and who is cabled to whom), not over the bytes,
because ``ibnetdiscover`` stamps the time into a comment and LIDs move after a
subnet-manager restart; neither changes the topology. When the stored object
already carries the same ``sha256`` the upload is skipped, no event fires and
no generation is made. The output is parsed before upload, so a truncated or
garbage run fails here, on the host, instead of reaching the pipeline.

boto3 / google-cloud-storage are imported only when used.
"""

from __future__ import annotations

import base64
import hashlib
import json
import shlex
import socket
import subprocess
import urllib.parse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from topocast import __version__
from topocast.errors import ProviderError, TopocastError
from topocast.limits import MAX_UPLOAD_BYTES, check_size, read_capped
from topocast.names import check_node_name
from topocast.pipeline.objects import UPLOAD_NAME
from topocast.providers.ibnetdiscover import Fabric, parse

#: metadata key holding the fabric digest that decides "changed or not"
SHA_KEY = "sha256"


class CollectError(TopocastError):
    """The collector could not run ibnetdiscover or upload its output."""


@dataclass(frozen=True)
class CollectResult:
    """What a collection did: where the output is, its digest, and whether it was uploaded."""

    uri: str
    sha256: str
    content_sha256: str
    size: int
    #: False when the stored object already had this fabric digest (nothing written, no event)
    uploaded: bool
    host: str


def split_uri(uri: str) -> tuple[str, str, str]:
    """``s3://bucket/a/b/`` -> ``("s3", "bucket", "a/b")``."""
    scheme, sep, rest = uri.partition("://")
    bucket, _, prefix = rest.partition("/")
    if not sep or scheme not in ("s3", "gs") or not bucket:
        raise CollectError(f"upload location {uri!r} must be s3://BUCKET[/PREFIX] or gs://BUCKET[/PREFIX]")
    return scheme, bucket, prefix.strip("/")


def object_key(prefix: str, host: str) -> str:
    return f"{prefix}/{host}/{UPLOAD_NAME}" if prefix else f"{host}/{UPLOAD_NAME}"


def upload_prefix(event_key: str) -> str | None:
    """The upload prefix of an object-created event's key, or None if the key is not an upload.

    Keys in S3 event notifications are URL-encoded (``fabric%2Fufm-01%2Fibnetdiscover.out``).
    """
    key = urllib.parse.unquote_plus(event_key)
    parts = key.split("/")
    if len(parts) < 2 or parts[-1] != UPLOAD_NAME or not parts[-2]:
        return None
    return "/".join(parts[:-2])


def fabric_digest(fabric: Fabric) -> str:
    """sha256 of what the topology depends on: nodes (kind, description) and cables, order-free."""
    canon = {
        node.id: [node.kind, node.desc, sorted(p.remote for p in node.ports.values())]
        for node in sorted(fabric.nodes.values(), key=lambda n: n.id)
    }
    return hashlib.sha256(json.dumps(canon, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def run_command(command: str | Sequence[str], timeout: float) -> bytes:
    argv = shlex.split(command) if isinstance(command, str) else list(command)
    try:
        proc = subprocess.run(argv, capture_output=True, timeout=timeout, check=False)
    except FileNotFoundError:
        raise CollectError(f"{argv[0]}: not found (install infiniband-diags, or pass --input FILE)") from None
    except subprocess.TimeoutExpired:
        raise CollectError(f"{shlex.join(argv)} did not finish within {timeout:g} s") from None
    if proc.returncode != 0:
        tail = proc.stderr.decode("utf-8", "replace").strip().splitlines()[-3:]
        why = " / ".join(tail) or "no output"
        raise CollectError(f"{shlex.join(argv)} exited with status {proc.returncode}: {why}")
    return proc.stdout


def short_hostname() -> str:
    return socket.gethostname().split(".", 1)[0]


def collect_ibnetdiscover(
    input_file: str | Path | None,
    upload_uri: str,
    *,
    command: str | Sequence[str] = "ibnetdiscover",
    host: str | None = None,
    timeout: float = 300.0,
    s3_client: Any = None,
    gcs_client: Any = None,
) -> CollectResult:
    """Run ``command`` (or read ``input_file``), check the output parses, upload it unless unchanged."""
    scheme, bucket, prefix = split_uri(upload_uri)
    host = check_node_name(host or short_hostname(), "the collecting host")
    if input_file is not None:
        try:
            data = Path(input_file).read_bytes()
        except OSError as exc:
            raise CollectError(f"{input_file}: cannot read ({exc.strerror})") from None
        source = str(input_file)
    else:
        data = run_command(command, timeout)
        source = command if isinstance(command, str) else shlex.join(command)
    try:
        digest = fabric_digest(parse(data, source))
    except ProviderError as exc:
        raise CollectError(f"not uploading: {exc}") from None
    key = object_key(prefix, host)
    metadata = {
        SHA_KEY: digest,
        "content-sha256": hashlib.sha256(data).hexdigest(),
        "host": host,
        "collected-at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "topocast-version": __version__,
    }
    store = _S3(s3_client) if scheme == "s3" else _Gcs(gcs_client)
    uploaded = store.stored_digest(bucket, key) != digest
    if uploaded:
        store.put(bucket, key, data, metadata)
    return CollectResult(f"{scheme}://{bucket}/{key}", digest, metadata["content-sha256"], len(data), uploaded, host)


def read_uploads(prefix_uri: str, *, s3_client: Any = None, gcs_client: Any = None) -> dict[str, bytes]:
    """Every ``<prefix>/<host>/ibnetdiscover.out`` under ``prefix_uri``, newest first: ``{uri: content}``.

    Feed it to ``ibnetdiscover.discover(texts=...)``, which merges them (first wins on conflicts).
    """
    scheme, bucket, prefix = split_uri(prefix_uri)
    store = _S3(s3_client) if scheme == "s3" else _Gcs(gcs_client)
    return {f"{scheme}://{bucket}/{key}": store.get(bucket, key) for key, _ in _upload_keys(store, bucket, prefix)}


def _upload_keys(store: _Store, bucket: str, prefix: str) -> list[tuple[str, int | None]]:
    """(key, size) of every upload under ``prefix``, newest first."""
    found = [
        (when, key, size)
        for key, when, size in store.list_sized(bucket, f"{prefix}/" if prefix else "")
        if key.endswith(f"/{UPLOAD_NAME}") and key.count("/") == (prefix.count("/") + 2 if prefix else 1)
    ]
    found.sort(key=lambda item: (-item[0].timestamp(), item[1]))
    return [(key, size) for _, key, size in found]


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
    prefix_uri: str,
    check: Callable[[bytes, str], object],
    *,
    s3_client: Any = None,
    gcs_client: Any = None,
    limit: int = MAX_UPLOAD_BYTES,
) -> UploadSet:
    """The uploads under ``prefix_uri`` that ``check(content, uri)`` accepts; bad ones are quarantined.

    ``<base>/uploads/<host>/ibnetdiscover.out`` is good when it is at most
    ``limit`` bytes (checked by its listed size, before reading) and ``check``
    does not raise. A good upload is copied to ``<base>/last-good/<host>/`` (when
    it changed); a bad one is moved to ``<base>/quarantine/<host>/<time>-ibnetdiscover.out``
    with its reason in the object's metadata, and the host's last good copy
    is used instead. So one writer leaving garbage in ``uploads/`` neither blocks
    discovery nor loses that host's fabric.
    """
    scheme, bucket, prefix = split_uri(prefix_uri)
    store: _Store = _S3(s3_client) if scheme == "s3" else _Gcs(gcs_client)
    base = prefix.rsplit("/", 1)[0] if "/" in prefix else ""

    def sibling(area: str, host: str, name: str = UPLOAD_NAME) -> str:
        return "/".join(p for p in (base, area, host, name) if p)

    out = UploadSet({}, [], [])
    for key, size in _upload_keys(store, bucket, prefix):
        uri = f"{scheme}://{bucket}/{key}"
        host = key.rsplit("/", 2)[-2]
        try:
            check_size(size, limit, uri, ProviderError)
            content = store.get(bucket, key, limit)
            check(content, uri)
        except (TopocastError, UnicodeDecodeError, ValueError) as exc:
            reason = " ".join(str(exc).split())[:500]
            stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
            store.move(bucket, key, sibling("quarantine", host, f"{stamp}-{UPLOAD_NAME}"), {"reason": reason})
            out.quarantined.append((uri, reason))
            good_key = sibling("last-good", host)
            good = store.get_if_exists(bucket, good_key, limit)
            if good is not None:
                out.texts[f"{scheme}://{bucket}/{good_key}"] = good
                out.fallbacks.append(host)
            continue
        digest = hashlib.sha256(content).hexdigest()
        good_key = sibling("last-good", host)
        if store.stored_content_digest(bucket, good_key) != digest:
            store.put(bucket, good_key, content, {"content-sha256": digest, "source": key})
        out.texts[uri] = content
    return out


class _Store(Protocol):
    def stored_digest(self, bucket: str, key: str) -> str | None: ...
    def stored_content_digest(self, bucket: str, key: str) -> str | None: ...
    def put(self, bucket: str, key: str, data: bytes, metadata: dict[str, str]) -> None: ...
    def list_sized(self, bucket: str, prefix: str) -> list[tuple[str, datetime, int | None]]: ...
    def get(self, bucket: str, key: str, limit: int = MAX_UPLOAD_BYTES) -> bytes: ...
    def get_if_exists(self, bucket: str, key: str, limit: int = MAX_UPLOAD_BYTES) -> bytes | None: ...
    def move(self, bucket: str, key: str, to: str, metadata: dict[str, str]) -> None: ...


class _S3:
    def __init__(self, client: Any) -> None:
        if client is None:
            from topocast.aws.clients import s3_client

            client = s3_client()
        self.c = client

    def stored_digest(self, bucket: str, key: str) -> str | None:
        from botocore.exceptions import ClientError

        try:
            head = self.c.head_object(Bucket=bucket, Key=key)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return None
            raise CollectError(f"s3://{bucket}/{key}: cannot read ({exc})") from None
        return head.get("Metadata", {}).get(SHA_KEY)

    def put(self, bucket: str, key: str, data: bytes, metadata: dict[str, str]) -> None:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            self.c.put_object(
                Bucket=bucket,
                Key=key,
                Body=data,
                ContentType="text/plain; charset=utf-8",
                Metadata=metadata,
                ChecksumSHA256=base64.b64encode(hashlib.sha256(data).digest()).decode(),
            )
        except (BotoCoreError, ClientError) as exc:
            raise CollectError(f"s3://{bucket}/{key}: upload failed ({exc})") from None

    def list_sized(self, bucket: str, prefix: str) -> list[tuple[str, datetime, int | None]]:
        out = []
        for page in self.c.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            out += [(o["Key"], o["LastModified"], o.get("Size")) for o in page.get("Contents", [])]
        return out

    def get(self, bucket: str, key: str, limit: int = MAX_UPLOAD_BYTES) -> bytes:
        resp = self.c.get_object(Bucket=bucket, Key=key)
        uri = f"s3://{bucket}/{key}"
        try:  # ContentLength before reading: an oversized upload costs no memory
            check_size(resp.get("ContentLength"), limit, uri, ProviderError)
            return read_capped(resp["Body"], limit, uri, ProviderError)
        finally:
            resp["Body"].close()

    def get_if_exists(self, bucket: str, key: str, limit: int = MAX_UPLOAD_BYTES) -> bytes | None:
        from botocore.exceptions import ClientError

        try:
            return self.get(bucket, key, limit)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return None
            raise

    def stored_content_digest(self, bucket: str, key: str) -> str | None:
        from botocore.exceptions import ClientError

        try:
            head = self.c.head_object(Bucket=bucket, Key=key)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return None
            raise
        return head.get("Metadata", {}).get("content-sha256")

    def move(self, bucket: str, key: str, to: str, metadata: dict[str, str]) -> None:
        """Copy to ``to`` with ``metadata`` (the reason), then delete: S3 has no rename."""
        self.c.copy_object(
            Bucket=bucket,
            Key=to,
            CopySource={"Bucket": bucket, "Key": key},
            Metadata={k: _ascii(v) for k, v in metadata.items()},
            MetadataDirective="REPLACE",
        )
        self.c.delete_object(Bucket=bucket, Key=key)


class _Gcs:
    def __init__(self, client: Any) -> None:
        if client is None:
            from google.cloud import storage  # type: ignore[attr-defined]

            client = storage.Client()
        self.c = client

    def stored_digest(self, bucket: str, key: str) -> str | None:
        blob = self.c.bucket(bucket).get_blob(key)
        return None if blob is None else (blob.metadata or {}).get(SHA_KEY)

    def put(self, bucket: str, key: str, data: bytes, metadata: dict[str, str]) -> None:
        blob = self.c.bucket(bucket).blob(key)
        blob.metadata = metadata
        try:
            blob.upload_from_string(data, content_type="text/plain; charset=utf-8")
        except Exception as exc:  # google.api_core exceptions; the message names the cause
            raise CollectError(f"gs://{bucket}/{key}: upload failed ({exc})") from None

    def list_sized(self, bucket: str, prefix: str) -> list[tuple[str, datetime, int | None]]:
        return [(b.name, b.updated, b.size) for b in self.c.list_blobs(bucket, prefix=prefix)]

    def get(self, bucket: str, key: str, limit: int = MAX_UPLOAD_BYTES) -> bytes:
        data = bytes(self.c.bucket(bucket).blob(key).download_as_bytes(end=limit))  # end is inclusive: limit + 1
        check_size(len(data), limit, f"gs://{bucket}/{key}", ProviderError)
        return data

    def get_if_exists(self, bucket: str, key: str, limit: int = MAX_UPLOAD_BYTES) -> bytes | None:
        blob = self.c.bucket(bucket).get_blob(key)
        return None if blob is None else self.get(bucket, key, limit)

    def stored_content_digest(self, bucket: str, key: str) -> str | None:
        blob = self.c.bucket(bucket).get_blob(key)
        return None if blob is None else (blob.metadata or {}).get("content-sha256")

    def move(self, bucket: str, key: str, to: str, metadata: dict[str, str]) -> None:
        b = self.c.bucket(bucket)
        copy = b.copy_blob(b.blob(key), b, to)
        copy.metadata = metadata
        copy.patch()
        b.delete_blob(key)


def _ascii(text: str) -> str:
    """S3 user metadata travels in HTTP headers: ASCII only."""
    return text.encode("ascii", "replace").decode()
