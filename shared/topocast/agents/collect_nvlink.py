"""``topocast collect nvlink``: one GPU host's NVLink domain and IB port GUIDs, uploaded for discovery.

::

    topocast collect nvlink --upload s3://bucket/<prefix>/<cluster>/uploads   # or gs://..., on every GPU host

Runs ``nvidia-smi -q`` (each GPU's ``Fabric`` ClusterUUID / CliqueId) and ``ibstat`` (``Port GUID``)
on this host, or reads ``--input`` / ``--ibstat`` files, and uploads one record
(:mod:`topocast.providers.nvlink`) to ``<prefix>/<host>/nvlink.json``: the same layout, object
metadata, "unchanged uploads nothing" rule and reader-side quarantine as ``collect ibnetdiscover``
(:mod:`topocast.agents.collect`). The record is checked as discovery will read it before it is uploaded; a
host whose GPUs report two NVLink domains is uploaded anyway (discovery sets that host aside with the
reason) and warned about here. A host without ``ibstat`` uploads its record without GUIDs.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from topocast.agents.collect import (
    CollectError,
    CollectResult,
    _objects,
    object_key,
    run_command,
    short_hostname,
    upload_if_changed,
)
from topocast.agents.collect import split_uri as _split_uri
from topocast.errors import ProviderError
from topocast.model.names import check_upload_name
from topocast.providers.nvlink import RECORD_NAME, build_record, check_record

__all__ = ["collect_nvlink"]


def _text(path: str | Path | None, command: str | None, what: str, timeout: float) -> str | None:
    if path is not None:
        try:
            return Path(path).read_text("utf-8")
        except OSError as exc:
            raise CollectError(f"{path}: cannot read ({exc.strerror})") from None
        except UnicodeDecodeError:
            raise CollectError(f"{path}: not UTF-8 text") from None
    if command is None:
        return None
    try:
        return run_command(command, timeout).decode("utf-8", "replace")
    except CollectError as exc:
        if what == "ibstat" and "not found" in str(exc):
            return None  # no InfiniBand tools: the record goes up without port GUIDs
        raise


def collect_nvlink(
    input_file: str | Path | None,
    upload_uri: str,
    *,
    command: str = "nvidia-smi -q",
    ibstat_file: str | Path | None = None,
    ibstat_command: str | None = "ibstat",
    host: str | None = None,
    timeout: float = 120.0,
    s3_client: Any = None,
    gcs_client: Any = None,
    warn: Callable[[str], None] | None = None,
) -> CollectResult:
    """Build this host's record, check it, upload it unless the stored one is the same."""
    scheme, bucket, prefix = _split_uri(upload_uri)
    host = check_upload_name(host or short_hostname(), "the collecting host (--host)")
    smi = _text(input_file, command, "nvidia-smi", timeout) or ""
    ibstat = _text(ibstat_file, ibstat_command, "ibstat", timeout)
    try:
        record = build_record(host, smi, ibstat)
    except ProviderError as exc:
        raise CollectError(f"not uploading: {exc}") from None
    data = (json.dumps(record.model_dump(), indent=1, sort_keys=True) + "\n").encode()
    check_record(data, "the record")  # what discovery's quarantine check will run
    domains = {g.domain() for g in record.gpus} - {None}
    if warn is not None:
        if len(domains) > 1:
            warn(f"GPUs of {host} report {len(domains)} NVLink domains: discovery sets this host aside")
        elif not domains:
            warn(f"no GPU of {host} reports an NVLink domain (fabric N/A or not registered yet)")
        if ibstat is None:
            warn("ibstat not found: no port GUIDs (the SHARP tree cannot place this host)")
    digest = hashlib.sha256(data).hexdigest()  # the record has no timestamp: same content, same topology
    key = object_key(prefix, host, RECORD_NAME)
    uploaded = upload_if_changed(_objects(scheme, bucket, s3_client, gcs_client), key, data, digest, host)
    return CollectResult(f"{scheme}://{bucket}/{key}", digest, digest, len(data), uploaded, host)
