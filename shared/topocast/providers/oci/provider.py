"""Oracle Cloud (OCI): where each bare-metal GPU host sits, from the Compute API or from the host itself.

Two sources (option ``source``):

* ``api`` (default): ``ListInstances`` of the cluster's ``compartment`` (``oci.core.models.Instance``:
  ``id``, ``display_name``, ``freeform_tags``, ``lifecycle_state``, ``availability_domain``) for the
  node names, matched by ``instance_id`` to ``ListComputeHosts`` (SDK
  ``oci.core.ComputeClient.list_compute_hosts``; model ``oci.core.models.ComputeHostSummary``: fields
  ``local_block_id``, ``network_block_id``, ``hpc_island_id``, ``gpu_memory_fabric_id``,
  ``instance_id``, ``availability_domain``, ``shape``). Compute hosts are not in the instances'
  compartment: ``ComputeHostSummary.compartment_id`` is documented as "This should always be the root
  compartment", so hosts are listed in ``host_compartment`` (default: the tenancy OCID of the
  credentials, the config file's ``tenancy`` or the instance principal's), with
  ``computeHostInSubtree``, once per availability domain of the kept instances, as Topograph does. Only
  kept instances (not terminating, carrying ``tags``) are matched. For their hosts in a GPU memory
  fabric, ``GetComputeHost`` (``oci.core.models.ComputeHost.additional_data``) gives the rack
  (``locationDetails.rack``, the key Topograph reads) as the sub-domain ``<fabric>.<rack>``.
* ``imds``: the host's own ``rdmaTopologyData`` from the instance metadata service
  (``GET http://169.254.169.254/opc/v2/host/rdmaTopologyData`` with ``Authorization: Bearer Oracle``;
  the OCI "Getting Instance Metadata" page; JSON keys ``customerLocalBlock``,
  ``customerNetworkBlock``, ``customerHPCIslandId``, ``customerGpuMemoryFabric``, as Topograph's
  ``oci-imds`` provider reads them). With ``input`` the file is the ``node: <json>`` lines ``pdsh``
  prints when every node asks its own IMDS (docs/providers.md); without it, this node alone
  (``hostname``, default the short host name; its ID from ``/opc/v2/instance/id``).

Tiers, closest first: local block (the leaf: hosts under one set of leaf switches), network block,
HPC island. The accelerator (NVLink) domain is the GPU memory fabric (GB200/GB300 NVL72 racks:
one fabric per rack). OCIDs are longer than a Slurm switch name may be: a tier ID over 64 characters
becomes ``<tier>-<sha256[:12]>`` (:func:`topocast.providers.cloud_ids.switch_id`) and each node
keeps the full OCIDs in its ``labels``.

Names (``source=api``) follow the one rule of :mod:`topocast.providers.naming`: an instance without its
``name_from`` is named by its OCID; a display name two instances claim stays with the one that had it in
the previous graph, the others are named by their OCID and wait (label ``topocast/wanted-name``).

Degrade per node: a host without one of the three tiers keeps its node without topology, with the
reason (what is missing, the host's OCID) in the graph's ``unplaced``; a name or ID that breaks a
graph rule is set aside by :func:`topocast.model.placement.place_nodes`. Instances the compartment lists
with no compute host (CPU login nodes, VMs) are kept without topology and counted in a warning.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from topocast.errors import ProviderError
from topocast.model.graph import Node, TopologyGraph
from topocast.model.placement import place_nodes, record_label
from topocast.providers.base import DiscoveryResult, FullScanOnly, ProviderInputs
from topocast.providers.cloud_ids import switch_id
from topocast.providers.naming import name_listing
from topocast.providers.oci.api import ImdsGet, OciApi
from topocast.providers.options import provider_options

__all__ = ["IMDS_TOPOLOGY_PATH", "OciProvider", "Options", "graph_from_hosts", "graph_from_imds", "provider"]

IMDS_TOPOLOGY_PATH = "/host/rdmaTopologyData"
IMDS_INSTANCE_PATH = "/instance/id"
#: node label -> (the API's field, the IMDS key) of each place of a host
LABELS = {
    "oci.oraclecloud.com/local-block": ("local_block_id", "customerLocalBlock"),
    "oci.oraclecloud.com/network-block": ("network_block_id", "customerNetworkBlock"),
    "oci.oraclecloud.com/hpc-island": ("hpc_island_id", "customerHPCIslandId"),
    "oci.oraclecloud.com/gpu-memory-fabric": ("gpu_memory_fabric_id", "customerGpuMemoryFabric"),
}
TIERS = (("localblock", 0), ("networkblock", 1), ("hpcisland", 2))  # tier name -> index in LABELS
GONE = {"TERMINATING", "TERMINATED"}


class Options(BaseModel):
    """``--provider oci`` options (``--option KEY=VALUE``, or ``TOPOCAST_PROVIDER_OPTIONS``)."""

    model_config = ConfigDict(extra="forbid")

    source: Literal["api", "imds"] = Field("api", description="api: ListComputeHosts; imds: rdmaTopologyData.")
    compartment: str | None = Field(None, description="api: compartment OCID of the cluster's instances.")
    host_compartment: str | None = Field(
        None,
        description="api: compartment OCID that holds the compute hosts (default: the tenancy, where OCI keeps them).",
    )
    availability_domain: str | None = Field(None, description="api: only this availability domain.")
    region: str | None = Field(None, description="api: region (default: the config file's).")
    auth: Literal["config", "instance_principal"] = Field("config", description="api: how to sign requests.")
    config_file: str | None = Field(None, description="api: OCI config file (default ~/.oci/config).")
    profile: str = Field("DEFAULT", description="api: section of the config file.")
    endpoint: str | None = Field(None, description="api: Core Services endpoint override (private endpoint, tests).")
    attempts: int = Field(4, ge=1, le=10, description="api: tries per call (429, 5xx, connection errors).")
    name_from: str = Field("display_name", description="node name: display_name, instance_id or tag:<freeform key>.")
    tags: dict[str, str] = Field(default_factory=dict, description="api: only instances with these freeform tags.")
    racks: bool = Field(True, description="api: GetComputeHost per GPU-fabric host for the rack (sub-domain).")
    page_size: int = Field(100, ge=1, le=1000, description="api: items per page.")
    imds_url: str = Field("http://169.254.169.254/opc/v2", description="imds: metadata service base URL.")
    input: str | None = Field(None, description="imds: file of 'node: <rdmaTopologyData JSON>' lines (pdsh).")
    hostname: str | None = Field(None, description="imds without input: this node's name (default: short hostname).")

    @model_validator(mode="after")
    def _needs(self) -> Options:
        if self.source == "api" and not self.compartment:
            raise ValueError("source api needs the option compartment (the compartment OCID)")
        if not (self.name_from in ("display_name", "instance_id") or self.name_from.startswith("tag:")):
            raise ValueError(f"name_from must be display_name, instance_id or tag:<key>, got {self.name_from!r}")
        return self


def _node_name(instance: Mapping[str, Any], name_from: str) -> str | None:
    if name_from == "instance_id":
        return instance.get("id")
    if name_from.startswith("tag:"):
        return (instance.get("freeform_tags") or {}).get(name_from[4:])
    return instance.get("display_name")


def _place(name: str, iid: str | None, where: Mapping[str, str | None], what: str, key: int) -> tuple[Node, str | None]:
    """A node from one host's places (label -> ID); the reason when a tier is missing.

    ``key`` picks the field names the reason uses: 0 the API's, 1 the IMDS keys.
    """
    ids = list(LABELS)
    tiers = [where.get(ids[index]) for _, index in TIERS]
    missing = [LABELS[ids[i]][key] for (_, i), v in zip(TIERS, tiers, strict=True) if not v]
    labels = {k: str(v) for k, v in where.items() if v}
    accelerator = where.get("oci.oraclecloud.com/gpu-memory-fabric") or None
    fabric = [] if missing else [switch_id(t, str(v)) for (t, _), v in zip(TIERS, tiers, strict=True)]
    reason = f"{what} reports no {', '.join(missing)}; kept without topology" if missing else None
    return Node(name=name, id=iid, fabric=fabric, accelerator=accelerator, labels=labels), reason


def kept_instances(instances: Iterable[Mapping[str, Any]], options: Options) -> list[Mapping[str, Any]]:
    """The instances that are cluster nodes, by OCID: not terminating, carrying every one of ``tags``."""
    return [
        inst
        for inst in sorted(instances, key=lambda i: str(i.get("id")))
        if inst.get("lifecycle_state") not in GONE
        and not any((inst.get("freeform_tags") or {}).get(k) != v for k, v in options.tags.items())
    ]


def graph_from_hosts(
    cluster: str,
    hosts: Iterable[Mapping[str, Any]],
    instances: Iterable[Mapping[str, Any]],
    options: Options,
    racks: Mapping[str, str] | None = None,
    previous: TopologyGraph | None = None,
) -> DiscoveryResult:
    """Pure: ListComputeHosts + ListInstances records (SDK field names) as a graph; ``previous`` says who
    held a name two instances claim (:func:`topocast.providers.naming.name_listing`)."""
    by_instance: dict[str, Mapping[str, Any]] = {}
    for host in hosts:
        if host.get("instance_id"):
            by_instance[str(host["instance_id"])] = host
    nodes: list[Node] = []
    aside: dict[str, str] = {}
    no_host: list[str] = []
    listed = kept_instances(instances, options)
    claims = [(str(inst.get("id") or ""), _node_name(inst, options.name_from)) for inst in listed]
    naming = name_listing(claims, previous, options.name_from)
    for inst, name, wanted in zip(listed, naming.names, naming.labels, strict=True):
        iid = str(inst.get("id"))
        if not name:
            aside[record_label(iid)] = f"instance {iid} has no {options.name_from}; left out"
            continue
        found = by_instance.get(iid)
        if found is None:
            no_host.append(name)
            nodes.append(Node(name=name, id=iid, instance_type=inst.get("shape"), labels=wanted))
            continue
        host = found
        where = {label: host.get(api) for label, (api, _) in LABELS.items()}
        node, reason = _place(name, iid, where, f"compute host {host.get('id')}", 0)
        rack = (racks or {}).get(str(host.get("id")))
        update: dict[str, Any] = {"zone": host.get("availability_domain"), "instance_type": host.get("shape")}
        if wanted:
            update["labels"] = {**node.labels, **wanted}
        if rack and node.accelerator:
            update["subdomain"] = f"{node.accelerator}.{rack}"
        nodes.append(node.model_copy(update=update))
        if reason:
            aside[name] = reason
    warnings = list(naming.warnings)
    if no_host:
        warnings.append(
            f"{len(no_host)} instance(s) have no compute host in ListComputeHosts (VM or CPU shapes); kept "
            f"without topology: {', '.join(sorted(no_host)[:5])}{' ...' if len(no_host) > 5 else ''}"
        )
    return DiscoveryResult(place_nodes(cluster, "oci", nodes, unplaced=aside), {}, warnings)


def graph_from_imds(
    cluster: str, records: Iterable[tuple[str, str, str | None]], unplaced: Mapping[str, str] | None = None
) -> DiscoveryResult:
    """Pure: ``(node, rdmaTopologyData text, instance id)`` per node as a graph; a bad record is set aside."""
    nodes: list[Node] = []
    aside: dict[str, str] = dict(unplaced or {})
    for name, text, iid in records:
        try:
            data = json.loads(text)
        except ValueError as exc:
            data = None
            why = f"rdmaTopologyData is not JSON ({str(exc)[:80]})"
        else:
            why = "rdmaTopologyData is not a JSON object"
        if not isinstance(data, dict):
            aside[name] = f"{why}; kept without topology"
            nodes.append(Node(name=name, id=iid))
            continue
        where = {label: (str(data[key]) if data.get(key) else None) for label, (_, key) in LABELS.items()}
        node, reason = _place(name, iid, where, "rdmaTopologyData", 1)
        nodes.append(node)
        if reason:
            aside[name] = reason
    return DiscoveryResult(place_nodes(cluster, "oci", nodes, unplaced=aside), {}, [])


def parse_pdsh(text: str, source: str) -> tuple[list[tuple[str, str, str | None]], dict[str, str]]:
    """``node: <json>`` lines (what pdsh prints) as records; a line of another shape is set aside."""
    records: list[tuple[str, str, str | None]] = []
    bad: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        name, sep, rest = line.partition(": ")
        if not sep or not name.strip() or " " in name.strip():
            bad[record_label(line[:60])] = f"{source}:{number}: expected 'node: <rdmaTopologyData JSON>'"
            continue
        records.append((name.strip(), rest.strip(), None))
    return records, bad


#: what the shell supplies as ``sdk_client("oci")``: a reader for these options (topocast.providers.oci.sdk)
Connect = Callable[[Options], OciApi]


@dataclass(frozen=True)
class OciProvider(FullScanOnly):
    """The ``oci`` source: no per-instance read, so every change is a full discovery."""

    inputs: ProviderInputs
    options: Options
    name = "oci"

    def discover_full(self, previous: TopologyGraph | None) -> DiscoveryResult:
        if self.options.source == "imds":
            return self._imds()
        o = self.options
        assert o.compartment is not None  # the model validator requires it for source api
        connect: Connect = self.inputs.sdk_client("oci")
        reader = connect(o)
        instances = reader.instances(o.compartment, o.page_size)
        kept = kept_instances(instances, o)
        host_compartment = o.host_compartment or reader.tenancy
        if not host_compartment:
            raise ProviderError(
                "OCI: the credentials name no tenancy, so the compartment of the compute hosts is unknown; "
                "set the option host_compartment (the tenancy OCID)"
            )
        hosts: list[dict[str, Any]] = []
        for ad in _availability_domains(kept, o.availability_domain):
            hosts += reader.compute_hosts(host_compartment, ad, o.page_size, in_subtree=True)
        racks: dict[str, str] = {}
        no_rack: list[str] = []
        if o.racks:
            wanted = {str(i.get("id")) for i in kept}
            for host in hosts:
                if host.get("gpu_memory_fabric_id") and str(host.get("instance_id")) in wanted:
                    try:  # the rack only refines the domain: a host whose record cannot be read keeps its place
                        rack = _rack(reader.compute_host(str(host["id"])))
                    except ProviderError as exc:
                        no_rack.append(str(exc))
                        continue
                    if rack:
                        racks[str(host["id"])] = rack
        result = graph_from_hosts(self.inputs.cluster, hosts, instances, o, racks, previous)
        result.api_calls.update(reader.calls)
        if no_rack:
            result.warnings.append(f"{len(no_rack)} host(s) without a rack (no sub-domain): {no_rack[0]}")
        return result

    def _imds(self) -> DiscoveryResult:
        o = self.options
        if o.input:
            records, bad = parse_pdsh(self.inputs.read_text(o.input), o.input)
            return graph_from_imds(self.inputs.cluster, records, bad)
        get: ImdsGet = self.inputs.sdk_client("oci-imds")
        base = o.imds_url.rstrip("/")
        name = o.hostname or socket.gethostname().split(".")[0]
        iid = get(base + IMDS_INSTANCE_PATH).strip() or None
        result = graph_from_imds(self.inputs.cluster, [(name, get(base + IMDS_TOPOLOGY_PATH), iid)])
        result.api_calls.update({"imds": 2})
        return result


def _availability_domains(kept: Iterable[Mapping[str, Any]], only: str | None) -> list[str | None]:
    """The availability domains to list compute hosts in: ``only``, else those of the kept instances
    (``[None]``, every domain, when no instance names one)."""
    if only:
        return [only]
    found = sorted({str(i["availability_domain"]) for i in kept if i.get("availability_domain")})
    return list(found) if found else [None]


def _rack(host: Mapping[str, Any]) -> str | None:
    extra = host.get("additional_data") or {}
    location = extra.get("locationDetails") or extra.get("location_details") or {}
    rack = location.get("rack") if isinstance(location, dict) else None
    return str(rack) if rack else None


def provider(inputs: ProviderInputs) -> OciProvider:
    """Registry factory (``oci``): the options validated by :class:`Options`."""
    return OciProvider(inputs, provider_options(Options, inputs.options, "oci"))
