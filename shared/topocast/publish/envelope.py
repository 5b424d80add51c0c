"""The small JSON envelope a parameter store holds for one rendered file.

Parameter stores have tiny values (SSM: 4096 bytes Standard, 8192 Advanced),
and a topology.conf for a large cluster is far bigger. So the value is an
envelope that either carries the file or points at it::

    {"schema": "topocast.envelope/v1", "generation": 12, "sha256": "<of the decoded file>",
     "size": 18234, "file": "topology.conf", "format": "slurm-tree", "tier": "Standard",
     "encoding": "raw" | "gzip+base64" | "s3", "data": "..." | "uri": "s3://bucket/key"}

:func:`plan_value` picks the cheapest encoding that fits: raw in Standard, else
gzip+base64 in Standard, else gzip+base64 in Advanced (only if allowed), else a
pointer to the file in object storage. Sizes are measured on the whole JSON
value in UTF-8 bytes, so escaping and envelope fields count. :func:`decode`
resolves any encoding and always checks the sha256: a tampered value never
reaches the caller.
"""

from __future__ import annotations

import base64
import binascii
import gzip
import hashlib
import json
import posixpath
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import unquote, urlparse

from topocast.errors import TopocastError
from topocast.safeio.limits import MAX_PUBLISHED_BYTES

SCHEMA = "topocast.envelope/v1"
STANDARD_LIMIT = 4096
ADVANCED_LIMIT = 8192
LIMITS = {"Standard": STANDARD_LIMIT, "Advanced": ADVANCED_LIMIT}
#: what :func:`parse` reads at most: an envelope is a parameter value (8 KB), never more
MAX_ENVELOPE_CHARS = 64 * 1024
#: the largest generation a reader accepts (keys carry it as 12 digits; 10**30 or -1 is damage, not a generation)
MAX_GENERATION = 10**12

Encoding = Literal["raw", "gzip+base64", "s3"]
Tier = Literal["Standard", "Advanced"]


class EnvelopeError(TopocastError):
    """A stored envelope is malformed, points nowhere, or its content fails the sha256 check."""


@dataclass(frozen=True)
class Envelope:
    generation: int
    sha256: str
    size: int
    file: str
    format: str
    encoding: Encoding
    tier: Tier = "Standard"
    data: str | None = None
    uri: str | None = None

    def dumps(self) -> str:
        body: dict[str, Any] = {
            "schema": SCHEMA,
            "generation": self.generation,
            "sha256": self.sha256,
            "size": self.size,
            "file": self.file,
            "format": self.format,
            "tier": self.tier,
            "encoding": self.encoding,
        }
        if self.encoding == "s3":
            body["uri"] = self.uri
        else:
            body["data"] = self.data
        return json.dumps(body, separators=(",", ":"), ensure_ascii=False)


def plan_value(
    content: bytes,
    *,
    generation: int,
    file: str,
    fmt: str,
    s3_uri: str,
    allow_advanced: bool = False,
    min_tier: Tier = "Standard",
) -> Envelope:
    """The envelope to store for ``content`` (``s3_uri``: where to upload it if nothing else fits).

    ``min_tier="Advanced"`` keeps a parameter that is already Advanced there
    (SSM cannot move a parameter back to Standard).
    """
    common: dict[str, Any] = {
        "generation": generation,
        "sha256": hashlib.sha256(content).hexdigest(),
        "size": len(content),
        "file": file,
        "format": fmt,
    }
    if min_tier == "Advanced":
        order: list[tuple[Encoding, Tier]] = [("raw", "Advanced"), ("gzip+base64", "Advanced")]
    else:
        order = [("raw", "Standard"), ("gzip+base64", "Standard")]
        if allow_advanced:
            order.append(("gzip+base64", "Advanced"))
    try:
        text: str | None = content.decode()
    except UnicodeDecodeError:
        text = None  # not text: raw is impossible
    packed = base64.b64encode(gzip.compress(content, mtime=0)).decode()
    for encoding, tier in order:
        if encoding == "raw" and text is None:
            continue
        env = Envelope(**common, encoding=encoding, tier=tier, data=text if encoding == "raw" else packed)
        if len(env.dumps().encode()) <= LIMITS[tier]:
            return env
    return Envelope(**common, encoding="s3", tier=min_tier, uri=s3_uri)


def parse(value: str, source: str) -> Envelope:
    """Read an envelope; errors name ``source`` (e.g. the parameter name)."""
    if len(value) > MAX_ENVELOPE_CHARS:
        raise EnvelopeError(f"{source}: value is {len(value)} characters, not a topocast envelope")
    try:
        data = json.loads(value)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise EnvelopeError(f"{source}: value is not a topocast envelope (not JSON: {exc})") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise EnvelopeError(f"{source}: value is not a topocast envelope (schema {SCHEMA!r} expected)")
    try:
        env = Envelope(
            generation=int(data["generation"]),
            sha256=str(data["sha256"]).lower(),
            size=int(data["size"]),
            file=str(data["file"]),
            format=str(data.get("format", "")),
            encoding=data["encoding"],
            tier=data.get("tier", "Standard"),
            data=data.get("data"),
            uri=data.get("uri"),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise EnvelopeError(f"{source}: malformed envelope ({exc!r})") from None
    if type(data["generation"]) is not int or not 0 <= env.generation <= MAX_GENERATION:
        raise EnvelopeError(f"{source}: generation {data['generation']!r} is outside 0..{MAX_GENERATION}; refusing it")
    if not 0 <= env.size <= MAX_PUBLISHED_BYTES:
        raise EnvelopeError(f"{source}: size {env.size} is outside 0..{MAX_PUBLISHED_BYTES} bytes")
    if env.encoding not in ("raw", "gzip+base64", "s3"):
        raise EnvelopeError(f"{source}: unknown encoding {env.encoding!r}")
    if env.encoding == "s3" and not (env.uri or "").startswith("s3://"):
        raise EnvelopeError(f"{source}: encoding s3 without an s3:// uri")
    if env.encoding != "s3" and not isinstance(env.data, str):
        raise EnvelopeError(f"{source}: encoding {env.encoding} without data")
    return env


def check_pointer(env: Envelope, source: str, bucket: str | None = None, prefix: str | None = None) -> tuple[str, str]:
    """The (bucket, key) an ``s3`` envelope points at, if it is where this reader expects.

    The publisher writes ``s3://<bucket>/<prefix>/<generation:012d>/<file>``. The
    key must end with the envelope's own generation and file (so a value cannot
    point at another object of the bucket), must not climb out of its prefix,
    and, when the reader is configured with them, must be in ``bucket`` under
    ``prefix``.
    """
    parsed = urlparse(env.uri or "")
    key = unquote(parsed.path.lstrip("/"))
    where = f"{source} -> {env.uri}"
    if parsed.scheme != "s3" or not parsed.netloc or not key:
        raise EnvelopeError(f"{where}: not an s3://bucket/key pointer")
    if posixpath.normpath("/" + key) != "/" + key or "//" in key:
        raise EnvelopeError(f"{where}: the key is not a plain path (., .. or empty segments)")
    if not key.endswith(f"{env.generation:012d}/{env.file}"):
        raise EnvelopeError(f"{where}: the key does not name generation {env.generation} file {env.file!r}")
    if bucket is not None and parsed.netloc != bucket:
        raise EnvelopeError(f"{where}: bucket {parsed.netloc!r} is not the configured {bucket!r}")
    if prefix and not key.startswith(prefix.strip("/") + "/"):
        raise EnvelopeError(f"{where}: key is not under the configured prefix {prefix.strip('/')!r}/")
    return parsed.netloc, key


def _gunzip(data: str, size: int, source: str) -> bytes:
    """Decompress at most ``size + 1`` bytes: a gzip bomb costs no more than the envelope declares."""
    try:
        d = zlib.decompressobj(wbits=31)
        content = d.decompress(base64.b64decode(data, validate=True), size + 1)
    except (binascii.Error, zlib.error) as exc:
        raise EnvelopeError(f"{source}: gzip+base64 data does not decode ({exc})") from None
    return content


def decode(env: Envelope, source: str, fetch_uri: Callable[[str], bytes]) -> bytes:
    """The file the envelope describes, verified against its size and sha256.

    ``fetch_uri`` is called only for ``s3`` envelopes; it should read at most
    ``env.size`` bytes (the pull agent checks ``ContentLength`` first).
    """
    if env.encoding == "raw":
        content = (env.data or "").encode()
    elif env.encoding == "gzip+base64":
        content = _gunzip(env.data or "", env.size, source)
    else:
        content = fetch_uri(env.uri or "")
    where = f"{source} -> {env.uri}" if env.encoding == "s3" else source
    if len(content) != env.size:
        raise EnvelopeError(
            f"{where}: content is {f'more than {env.size}' if len(content) > env.size else len(content)} bytes, "
            f"the envelope says {env.size} (generation {env.generation}); refusing it"
        )
    digest = hashlib.sha256(content).hexdigest()
    if digest != env.sha256:
        raise EnvelopeError(
            f"{where}: content sha256 {digest} does not match the envelope's {env.sha256} "
            f"(generation {env.generation}); refusing it"
        )
    return content
