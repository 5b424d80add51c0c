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
no generation is made. Before upload the output goes through the same parse and
build as discovery (:func:`topocast.providers.onprem.ibnetdiscover.check_upload`), so a
truncated or garbage run fails here, on the host, instead of reaching the pipeline,
and the records discovery would set aside are reported as warnings first.

boto3 / google-cloud-storage are imported only when used.
"""

from __future__ import annotations

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
from typing import Any

from topocast import __version__
from topocast.errors import ProviderError, TopocastError
from topocast.model.names import check_upload_name
from topocast.pipeline.objects import UPLOAD_MEDIA_TYPE, UPLOAD_NAME, ObjectStore, UploadSet
from topocast.pipeline.objects import read_good_uploads as objects_read_good_uploads
from topocast.pipeline.objects import read_uploads as objects_read_uploads
from topocast.providers.onprem.ibnetdiscover import Fabric, check_upload, parse
from topocast.safeio.limits import MAX_UPLOAD_BYTES

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
    #: records discovery will set aside (``label: reason``), reported before the upload
    set_aside: tuple[str, ...] = ()


def split_uri(uri: str) -> tuple[str, str, str]:
    """``s3://bucket/a/b/`` -> ``("s3", "bucket", "a/b")``."""
    scheme, sep, rest = uri.partition("://")
    bucket, _, prefix = rest.partition("/")
    if not sep or scheme not in ("s3", "gs") or not bucket:
        raise CollectError(f"upload location {uri!r} must be s3://BUCKET[/PREFIX] or gs://BUCKET[/PREFIX]")
    prefix = prefix.strip("/")
    # a path-normalising store or reader would follow '..' (or fold '.', '//') into another cluster's uploads
    if prefix and any(part in ("", ".", "..") for part in prefix.split("/")):
        raise CollectError(f"upload location {uri[:200]!r}: a prefix part is empty, '.' or '..'")
    return scheme, bucket, prefix


def object_key(prefix: str, host: str, name: str = UPLOAD_NAME) -> str:
    return f"{prefix}/{host}/{name}" if prefix else f"{host}/{name}"


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
    host_regex: str | None = None,
    warn: Callable[[str], None] | None = None,
    ca: str | None = None,
    ca_port: int | None = None,
) -> CollectResult:
    """Run ``command`` (or read ``input_file``), check it as discovery will, upload it unless unchanged.

    ``ca``/``ca_port``: the HCA (and port) ibnetdiscover discovers through (``-C``/``-P``): on a host
    with a compute and a storage HCA, the default (the first HCA) may see the storage fabric only.

    ``warn`` is called, before anything is uploaded, once per record discovery will set aside.
    """
    scheme, bucket, prefix = split_uri(upload_uri)
    host = check_upload_name(host or short_hostname(), "the collecting host (--host)")
    if input_file is not None:
        try:
            data = Path(input_file).read_bytes()
        except OSError as exc:
            raise CollectError(f"{input_file}: cannot read ({exc.strerror})") from None
        source = str(input_file)
    else:
        argv = shlex.split(command) if isinstance(command, str) else list(command)
        argv += ["-C", ca] if ca else []
        argv += ["-P", str(ca_port)] if ca_port is not None else []
        command = shlex.join(argv) if isinstance(command, str) else argv
        data = run_command(command, timeout)
        source = command if isinstance(command, str) else shlex.join(command)
    try:
        set_aside = tuple(check_upload(data, source, host_regex=host_regex))
        digest = fabric_digest(parse(data, source))
    except ProviderError as exc:
        raise CollectError(f"not uploading: {exc}") from None
    if set_aside and warn is not None:
        warn(f"{len(set_aside)} record(s) will be set aside by discovery (the rest is used):")
        for line in set_aside:
            warn(f"  {line}")
    key = object_key(prefix, host)
    uploaded = upload_if_changed(_objects(scheme, bucket, s3_client, gcs_client), key, data, digest, host)
    return CollectResult(
        f"{scheme}://{bucket}/{key}", digest, hashlib.sha256(data).hexdigest(), len(data), uploaded, host, set_aside
    )


def upload_if_changed(objects: ObjectStore, key: str, data: bytes, digest: str, host: str) -> bool:
    """Upload ``data`` under ``key`` unless the stored object already carries ``digest`` (what the
    collector saw, not the bytes' hash: an unchanged fabric uploads nothing); True when it uploaded."""
    metadata = {
        SHA_KEY: digest,
        "content-sha256": hashlib.sha256(data).hexdigest(),
        "host": host,
        "collected-at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "topocast-version": __version__,
    }
    uri = objects.uri(key)
    try:
        stored = objects.head(key)
    except Exception as exc:  # boto / google-api-core errors: the message names the cause
        raise CollectError(f"{uri}: cannot read ({exc})") from None
    if stored is not None and stored.metadata.get(SHA_KEY) == digest:
        return False
    try:
        objects.put(key, data, content_type=UPLOAD_MEDIA_TYPE, metadata=metadata)
    except Exception as exc:
        raise CollectError(f"{uri}: upload failed ({exc})") from None
    return True


def _objects(scheme: str, bucket: str, s3_client: Any = None, gcs_client: Any = None) -> ObjectStore:
    """The pipeline's :class:`ObjectStore` adapter for the upload bucket (clients from the default chain)."""
    if scheme == "s3":
        from topocast.aws.clients import s3_client as default_s3
        from topocast.aws.s3_objects import S3Objects

        return S3Objects(bucket, s3_client if s3_client is not None else default_s3())
    from topocast.gcp.gcs import GcsObjects

    if gcs_client is None:
        from google.cloud import storage  # type: ignore[attr-defined]

        gcs_client = storage.Client()
    return GcsObjects(bucket, gcs_client)


def read_uploads(prefix_uri: str, *, s3_client: Any = None, gcs_client: Any = None) -> dict[str, bytes]:
    """Every ``<prefix>/<host>/ibnetdiscover.out`` under ``prefix_uri``, newest first: ``{uri: content}``
    (:func:`topocast.pipeline.objects.read_uploads` on the bucket the URI names)."""
    scheme, bucket, prefix = split_uri(prefix_uri)
    return objects_read_uploads(_objects(scheme, bucket, s3_client, gcs_client), prefix)


def read_good_uploads(
    prefix_uri: str,
    check: Callable[[bytes, str], object],
    *,
    s3_client: Any = None,
    gcs_client: Any = None,
    limit: int = MAX_UPLOAD_BYTES,
    name: str = UPLOAD_NAME,
) -> UploadSet:
    """:func:`topocast.pipeline.objects.read_good_uploads` (the functions' quarantine) on the bucket
    ``prefix_uri`` names: good uploads, bad ones moved to ``quarantine/``, last good ones standing in."""
    scheme, bucket, prefix = split_uri(prefix_uri)
    store = _objects(scheme, bucket, s3_client, gcs_client)
    return objects_read_good_uploads(store, prefix, check, limit=limit, name=name)


def uploads_reader(
    warn: Callable[[str], None],
) -> Callable[[str, Callable[[bytes, str], object], str], dict[str, bytes]]:
    """A shell's ``ShellMeans.read_uploads`` (``topocast discover``, the controller): good uploads of a
    bucket prefix through :func:`read_good_uploads`, each quarantined one named through ``warn``."""

    def read(prefix_uri: str, check: Callable[[bytes, str], object], name: str) -> dict[str, bytes]:
        got = read_good_uploads(prefix_uri, check, name=name)
        for uri, reason in got.quarantined:
            warn(f"{uri}: quarantined ({reason})")
        return got.texts

    return read
