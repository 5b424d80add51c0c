"""Size caps for everything topocast reads from outside, in one place.

Every reader checks its cap *before* it holds the whole input (a declared
length, a ``ContentLength``, a bounded ``read``), so a hostile or broken input
costs at most its cap in memory and ends in one clear line naming the input
and the cap, never a MemoryError. The caps are generous for real clusters
(100,000 nodes fit in every one of them) and small next to a 512 MB function.
"""

from __future__ import annotations

from typing import IO

from topocast.errors import TopocastError

__all__ = [
    "MAX_CREDENTIALS_BYTES",
    "MAX_GRAPH_BYTES",
    "MAX_JSON_DEPTH",
    "MAX_NETQ_RESPONSE_BYTES",
    "MAX_POINTER_BYTES",
    "MAX_PUBLISHED_BYTES",
    "MAX_UPLOAD_BYTES",
    "MAX_YAML_BYTES",
    "MAX_YAML_NODES",
    "check_size",
    "read_capped",
]

MiB = 1024 * 1024
#: a normalized graph (JSON): ~300 bytes a node, so ~200,000 nodes
MAX_GRAPH_BYTES = 64 * MiB
#: an on-prem upload (ibnetdiscover text) in the uploads/ prefix: parsing holds ~6.5x its size
#: (11 MB of output for 8,192 hosts x 4 rails peaks at 73 MB), so 48 MiB stays inside a 512 MB function
MAX_UPLOAD_BYTES = 48 * MiB
#: one NetQ / NMX HTTP response body
MAX_NETQ_RESPONSE_BYTES = 64 * MiB
#: an S3 object an SSM envelope points at (a rendered topology file)
MAX_POINTER_BYTES = 32 * MiB
#: any published file the pull agent fetches (ssm, s3, gcs, file)
MAX_PUBLISHED_BYTES = MAX_POINTER_BYTES
#: a YAML document (model, options, configs, kube objects) as text ...
MAX_YAML_BYTES = 16 * MiB
#: ... and as nodes after every alias is expanded (a 474-byte alias bomb is billions)
MAX_YAML_NODES = 2_000_000
#: a credentials file (NetQ account JSON): a few hundred bytes in practice
MAX_CREDENTIALS_BYTES = 64 * 1024
#: nesting of JSON / YAML values: real inputs nest < 10 deep
MAX_JSON_DEPTH = 64


def check_size(size: int | None, limit: int, what: str, error: type[TopocastError]) -> None:
    """Raise ``error("<what>: <size> bytes exceeds the <limit> byte limit")`` when ``size > limit``."""
    if size is not None and size > limit:
        raise error(f"{what}: {size} bytes exceeds the {limit} byte limit")


def read_capped(stream: IO[bytes], limit: int, what: str, error: type[TopocastError]) -> bytes:
    """Read at most ``limit`` bytes from ``stream``; one byte more is an error (never reads the rest)."""
    data = stream.read(limit + 1)
    if len(data) > limit:
        raise error(f"{what}: larger than the {limit} byte limit")
    return bytes(data)
