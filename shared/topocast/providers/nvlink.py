"""Per-node NVLink records: what ``topocast collect nvlink`` uploads and the Azure provider reads.

A GPU host knows its own NVLink domain (``nvidia-smi -q``, each GPU's ``Fabric`` section:
``ClusterUUID`` and ``CliqueId``; the domain is ``<ClusterUUID>.<CliqueId>``, the same convention
as :mod:`topocast.providers.domains` and Topograph's ``topograph.run/cluster-id``) and its
InfiniBand port GUIDs (``ibstat``: ``Port GUID: 0x...``), which tie it to the switches of a
SHARP topology file (:mod:`topocast.providers.sharp`). The cloud API knows neither, so each host
uploads one small JSON record::

    {"kind": "topocast.nvlink/v1", "host": "gpu-001",
     "gpus": [{"gpu": "00000000:18:00.0", "cluster_uuid": "8f1c...", "clique_id": "7"}, ...],
     "port_guids": ["0x155dfffd341acb", ...]}

to ``<prefix>/<host>/nvlink.json`` through the same path, checksum rule and quarantine as
``collect ibnetdiscover`` (:func:`topocast.pipeline.objects.read_good_uploads` with
:func:`check_record`). A GPU whose fabric is ``N/A`` or whose ClusterUUID is all zeros (fabric not
registered yet) has no domain. :func:`host_domains` turns records into one domain per host and sets
aside (with the reason) a host whose GPUs or whose records disagree; it never fails the cluster.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from topocast.errors import ProviderError, TopocastError
from topocast.model.health import SEVERITY, HealthRecord
from topocast.model.names import check_node_name
from topocast.safeio.validation import check_json_depth, validate

__all__ = [
    "RECORD_KIND",
    "RECORD_NAME",
    "GpuFabric",
    "HostDomains",
    "NvlinkRecord",
    "build_record",
    "check_record",
    "fabric_records",
    "host_domains",
    "normalize_guid",
    "parse_ibstat_guids",
    "parse_record",
    "parse_smi_gpus",
]

#: the object each host uploads (beside ``ibnetdiscover.out`` in the same ``<prefix>/<host>/`` layout)
RECORD_NAME = "nvlink.json"
RECORD_KIND: Literal["topocast.nvlink/v1"] = "topocast.nvlink/v1"

_GPU = re.compile(r"^GPU ([0-9A-Fa-f]+:[0-9A-Fa-f]+:[0-9A-Fa-f]+\.[0-9A-Fa-f]+)\s*$")
_UUID = re.compile(r"^\s*ClusterUUID\s*:\s*(\S+)\s*$")
_CLIQUE = re.compile(r"^\s*CliqueId\s*:\s*(\S+)\s*$")
_FABRIC_FIELD = re.compile(r"^\s*(State|Status|Bandwidth)\s*:\s*(.*?)\s*$")
_PORT_GUID = re.compile(r"^\s*Port GUID\s*:\s*(0x[0-9A-Fa-f]+)\s*$")
#: a record is a few KiB; anything this large is not one
MAX_RECORD_BYTES = 1 << 20
_NO_VALUE = {"N/A", "[N/A]", "", "00000000-0000-0000-0000-000000000000"}


class GpuFabric(BaseModel):
    """One GPU's NVLink fabric identity as ``nvidia-smi -q`` prints it."""

    model_config = ConfigDict(extra="forbid")

    gpu: str = Field(max_length=64, description="The GPU's PCI bus ID (nvidia-smi's 'GPU <bus id>' header).")
    cluster_uuid: str = Field(max_length=64)
    clique_id: str = Field(max_length=32)
    #: the Fabric section's ``State`` (``Completed``, ``In Progress``, ``Not Started``, ``N/A``), ``Status``
    #: (``Success`` or the error) and ``Health`` / ``Bandwidth`` (``Full``, ``Degraded``); "" in older records
    state: str = Field("", max_length=64)
    status: str = Field("", max_length=128)
    bandwidth: str = Field("", max_length=64)

    def health(self) -> tuple[str, str]:
        """(state, reason) of this GPU's NVLink fabric: ``ok``, ``unknown`` (not registered yet),
        ``degraded`` (bandwidth degraded) or ``impaired`` (registration failed)."""
        if self.state in _NO_VALUE or self.state == "Not Supported":
            return "ok", ""
        if self.state != "Completed":
            return "unknown", f"GPU {self.gpu} fabric state {self.state}"
        if self.status not in _NO_VALUE and self.status != "Success":
            return "impaired", f"GPU {self.gpu} fabric status {self.status}"
        if self.bandwidth == "Degraded":
            return "degraded", f"GPU {self.gpu} fabric bandwidth Degraded"
        return "ok", ""

    def domain(self) -> str | None:
        if self.cluster_uuid in _NO_VALUE or self.clique_id in _NO_VALUE:
            return None
        return f"{self.cluster_uuid}.{self.clique_id}"


class NvlinkRecord(BaseModel):
    """One host's upload (see the module doc)."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["topocast.nvlink/v1"] = RECORD_KIND
    host: str = Field(min_length=1, max_length=253)
    gpus: list[GpuFabric] = Field(default_factory=list, max_length=64)
    port_guids: list[str] = Field(default_factory=list, max_length=64)


def parse_smi_gpus(text: str, source: str = "nvidia-smi -q") -> list[GpuFabric]:
    """Each GPU section's ``ClusterUUID`` / ``CliqueId`` from one host's ``nvidia-smi -q`` output."""
    sections: list[dict[str, str]] = []
    fabric_indent: int | None = None  # the indentation of the GPU's "Fabric" header while inside it
    for number, line in enumerate(text.splitlines(), 1):
        if m := _GPU.match(line.strip()):
            sections.append({"gpu": m.group(1), "cluster_uuid": "N/A", "clique_id": "N/A"})
            fabric_indent = None
            continue
        indent = len(line) - len(line.lstrip())
        if fabric_indent is not None and line.strip() and indent <= fabric_indent:
            fabric_indent = None
        if line.strip() == "Fabric" and sections:
            fabric_indent = indent
            continue
        if fabric_indent is not None and (m := _FABRIC_FIELD.match(line)):
            sections[-1][m.group(1).lower()] = m.group(2)[:64]
            continue
        for key, pattern in (("cluster_uuid", _UUID), ("clique_id", _CLIQUE)):
            if m := pattern.match(line):
                if not sections:
                    raise ProviderError(f"{source}:{number}: fabric line before any 'GPU <bus id>' section")
                sections[-1][key] = m.group(1)
    if not sections:
        raise ProviderError(f"{source}: no 'GPU <bus id>' section (is this nvidia-smi -q output?)")
    return [validate(GpuFabric, g, f"{source}: GPU {g['gpu']}", ProviderError) for g in sections]


def normalize_guid(guid: str) -> str:
    """``0x0099...`` (ibstat) and ``0x99...`` (sharp_cmd) are the same port: lower-case hex, no leading zeros."""
    try:
        return f"0x{int(guid, 16):x}"
    except ValueError:
        raise ProviderError(f"{guid!r} is not a hexadecimal port GUID") from None


def parse_ibstat_guids(text: str) -> list[str]:
    """Every ``Port GUID:`` of ``ibstat`` output, normalized, in device order (rail 0 first)."""
    out: list[str] = []
    for line in text.splitlines():
        if m := _PORT_GUID.match(line):
            guid = normalize_guid(m.group(1))
            if guid not in out:
                out.append(guid)
    return out


def build_record(host: str, smi_text: str, ibstat_text: str | None = None) -> NvlinkRecord:
    """The record a host uploads, from its ``nvidia-smi -q`` (and optional ``ibstat``) output."""
    check_node_name(host, "the collecting host")
    guids = parse_ibstat_guids(ibstat_text) if ibstat_text else []
    return NvlinkRecord(host=host, gpus=parse_smi_gpus(smi_text), port_guids=guids)


def parse_record(data: str | bytes, source: str) -> NvlinkRecord:
    """One upload as a record; a :class:`ProviderError` naming ``source`` when it is not one."""
    if len(data) > MAX_RECORD_BYTES:
        raise ProviderError(f"{source}: {len(data)} bytes, more than an NVLink record may have")
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
        check_json_depth(text, source, ProviderError)
        raw = json.loads(text)
    except UnicodeDecodeError as exc:
        raise ProviderError(f"{source}: not UTF-8 text (byte {exc.start})") from None
    except ValueError as exc:
        raise ProviderError(f"{source}: not JSON ({exc})") from None
    record = validate(NvlinkRecord, raw, source, ProviderError, keep_class=False)
    try:
        check_node_name(record.host, f"{source}: host")
        record.port_guids = [normalize_guid(g) for g in record.port_guids]
    except TopocastError as exc:
        raise ProviderError(f"{source}: {exc}") from None
    return record


def check_record(data: bytes, uri: str) -> NvlinkRecord:
    """The quarantine check of an upload (``read_good_uploads``): raises when discovery could not use it."""
    return parse_record(data, uri)


@dataclass
class HostDomains:
    """What the records say, per host: its NVLink domain, its port GUIDs, and what was set aside."""

    domains: dict[str, str] = field(default_factory=dict)
    guids: dict[str, list[str]] = field(default_factory=dict)
    #: host (or ``record '<uri>'``) -> reason; the host stays in the cluster without a domain
    set_aside: dict[str, str] = field(default_factory=dict)
    #: host -> (state, reason) of its NVLink fabric when not ok: the worst of its GPUs (newest record)
    fabric: dict[str, tuple[str, str]] = field(default_factory=dict)


def host_domains(uploads: Mapping[str, bytes]) -> HostDomains:
    """Records ``{uri: bytes}`` (newest first) as one domain per host; disagreements are set aside."""
    from topocast.model.placement import record_label

    out = HostDomains()
    seen: dict[str, tuple[str | None, str]] = {}  # host -> (domain, uri) of its first record
    for uri, data in uploads.items():
        try:
            record = parse_record(data, uri)
        except ProviderError as exc:
            out.set_aside[record_label(uri)] = f"{exc}; not used"
            continue
        domains = {g.domain() for g in record.gpus} - {None}
        out.guids.setdefault(record.host, record.port_guids)  # the newest record's ports place the host
        if record.host not in seen:  # the newest record says how the fabric is now
            worst = max((g.health() for g in record.gpus), key=lambda h: SEVERITY[h[0]], default=("ok", ""))
            if worst[0] != "ok":
                out.fabric[record.host] = worst
        if len(domains) > 1:
            out.set_aside[record.host] = (
                f"{uri}: GPUs of {record.host!r} are in {len(domains)} NVLink domains "
                f"({', '.join(sorted(d for d in domains if d))}); kept without a domain"
            )
            out.domains.pop(record.host, None)
            seen[record.host] = (None, uri)
            continue
        domain = next(iter(domains), None)
        if record.host in seen:
            first, first_uri = seen[record.host]
            if first != domain and record.host not in out.set_aside:
                out.set_aside[record.host] = (
                    f"records disagree: {first_uri} says {first!r}, {uri} says {domain!r}; kept without a domain"
                )
                out.domains.pop(record.host, None)
            continue
        seen[record.host] = (domain, uri)
        if domain is not None:
            out.domains[record.host] = domain
    return out


def fabric_records(
    fabric: Mapping[str, tuple[str, str]], domain_of: Mapping[str, str | None], now: datetime
) -> list[HealthRecord]:
    """One ``link`` record per host whose NVLink fabric is not ok: the host's attachment to its NVLink domain
    (``id`` = the host, ``peer`` = its domain), so only that host is in the blast radius. Hosts without a
    domain in the graph have no NVLink link to blame and get no record."""
    out = []
    for host, (state, reason) in sorted(fabric.items()):
        domain = domain_of.get(host)
        if domain is not None:
            out.append(HealthRecord(kind="link", id=host, peer=domain, state=state, source="nvlink",  # type: ignore[arg-type]
                                    reason=reason, observed_at=now))  # fmt: skip
    return out
