"""Azure: VM scale set / availability set placement from the compute API, NVLink and SHARP from the hosts.

Wire shapes (``azure-mgmt-compute`` 39 models, api-version 2026-04-01; the REST reference
"Virtual Machine Scale Set VMs - List", "Virtual Machine Scale Sets - List", "Virtual Machines -
List"), read through the real SDK client (:mod:`topocast.providers.azure_sdk`):

* ``GET .../resourceGroups/{rg}/providers/Microsoft.Compute/virtualMachineScaleSets`` (every page);
* for each scale set ``.../virtualMachineScaleSets/{name}/virtualMachines?$expand=instanceView``:
  ``name`` (``<scale set>_<instanceId>``), ``sku.name``, ``zones``, ``properties.osProfile.computerName``
  and ``properties.instanceView.placementGroupId``;
* ``.../virtualMachines?$expand=instanceView`` for VMs outside a uniform scale set:
  ``properties.availabilitySet.id``, ``properties.hardwareProfile.vmSize``.

What becomes of it (the same rule as CycleCloud's ``azslurm topology``: InfiniBand reaches only
within one placement group or availability set):

* the **tree**: a scale-set VM sits under its placement group, under its scale set
  (``[placementGroupId, scaleSet]``, closest first); an availability-set VM under its availability
  set. With a SHARP topology file (``sharp_uri``, :mod:`topocast.providers.sharp`) a host whose
  NVLink record names a port GUID SHARP knows gets SHARP's real switch path instead (its first such
  GUID, i.e. rail 0, as ``azslurm`` reads ``mlx5_ib0``);
* the **blocks**: each host's NVLink domain ``<ClusterUUID>.<CliqueId>`` from its record
  (``topocast collect nvlink``; :mod:`topocast.providers.nvlink`), given through
  ``ProviderInputs.uploads`` (the bucket's quarantine path, or local files in the CLI).

Node name: ``computerName`` (Slurm's NodeName on CycleCloud), or the VM resource name with
``name_from: vm-name``; the node ID is the VM resource name. The one rule of
:mod:`topocast.providers.naming`: a VM without a computerName is named by its resource name; a name two
VMs claim stays with the one that had it in the previous graph, the others are named by their resource
name and wait (label ``topocast/wanted-name``; the NVLink record of a contested host name places
nobody). A VM without a placement group (deallocated) is kept without topology. Degrade per node: a
host whose records disagree, a record that is not one, an unsafe value: set aside with the reason
(:func:`topocast.model.placement.place_nodes`). A SHARP file that cannot be read or parsed is an error
(one line; the last good graph stays published): falling back to the placement groups would
re-shape the whole tree. A port GUID SHARP lists under two switches only costs its host the SHARP
path (it keeps its placement path). No per-node read: every change is a full listing (``incremental = False``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from topocast.errors import ProviderError
from topocast.model.graph import Node, TopologyGraph
from topocast.model.placement import place_nodes
from topocast.providers.base import DiscoveryResult, FullScanOnly, ProviderInputs
from topocast.providers.naming import WANTED_NAME_LABEL, name_listing
from topocast.providers.nvlink import HostDomains, host_domains
from topocast.providers.options import provider_options
from topocast.providers.sharp import SharpTopology, parse_sharp_topology

__all__ = ["AzureProvider", "Options", "graph_from_listing", "provider"]


class Options(BaseModel):
    """``--option KEY=VALUE`` / the functions' provider options for ``azure``."""

    model_config = ConfigDict(extra="forbid")

    subscription_id: str = Field(min_length=1, max_length=64, description="The Azure subscription ID.")
    resource_group: str = Field(min_length=1, max_length=90, description="The resource group of the cluster's VMs.")
    scale_sets: list[str] | None = Field(None, description="Only these scale sets (default: all in the group).")
    include_vms: bool = Field(True, description="Also list VMs outside uniform scale sets (availability sets).")
    sharp_uri: str | None = Field(None, description="`sharp_cmd topology` output, read through read_text.")
    name_from: Literal["computer-name", "vm-name"] = Field("computer-name", description="Node name: hostname or VM.")
    endpoint: str | None = Field(None, description="ARM endpoint (the shell builds the client with it).")
    uploads: str | None = Field(None, description="CLI: s3:// or gs:// prefix of the NVLink records.")


def _get(obj: Mapping[str, Any], *path: str) -> Any:
    cur: Any = obj
    for key in path:
        if not isinstance(cur, Mapping):
            return None
        cur = cur.get(key)
    return cur


def _last(resource_id: str | None) -> str | None:
    return resource_id.rstrip("/").rsplit("/", 1)[-1] if resource_id else None


@dataclass(frozen=True)
class _Vm:
    claim: str  #: the name its source gives ("" when none)
    resource: str  #: the VM resource name ("" when none): the node ID, and the name when it claims none
    placement: list[str]
    zone: str | None
    size: str | None


def _vm(item: Mapping[str, Any], placement: list[str], options: Options, size: str | None) -> _Vm | None:
    resource = str(item.get("name") or "")
    computer = _get(item, "properties", "osProfile", "computerName") or _get(
        item, "properties", "instanceView", "computerName"
    )
    claim = resource if options.name_from == "vm-name" else str(computer or "")
    if not (claim or resource):
        return None
    zones = item.get("zones") or []
    location = item.get("location")
    zone = f"{location}-{zones[0]}" if zones and location else None
    return _Vm(claim, resource, placement, zone, size)


def graph_from_listing(
    cluster: str,
    scale_sets: Mapping[str, Sequence[Mapping[str, Any]]],
    vms: Sequence[Mapping[str, Any]],
    options: Options,
    records: HostDomains,
    sharp: SharpTopology | None,
    previous: TopologyGraph | None = None,
) -> DiscoveryResult:
    """Pure: the listed VMs, their hosts' records and the SHARP tree as a graph (see the module doc);
    ``previous`` says who held a name two VMs claim (:func:`topocast.providers.naming.name_listing`)."""
    machines: list[_Vm] = []
    warnings: list[str] = []
    unplaced_vms = 0
    for scale_set, items in sorted(scale_sets.items()):
        for item in items:
            group = _get(item, "properties", "instanceView", "placementGroupId")
            unplaced_vms += not group
            size = _get(item, "sku", "name")
            vm = _vm(item, [str(group), scale_set] if group else [], options, size)
            if vm is not None:
                machines.append(vm)
    listed = {m.resource for m in machines}
    flexible = 0
    for item in vms:
        if item.get("name") in listed:
            continue
        avset = _last(_get(item, "properties", "availabilitySet", "id"))
        # a VM of a flexible-orchestration scale set (uniform ones are not in this listing) has no placement
        # group to read: kept without topology, and counted
        flexible += bool(_get(item, "properties", "virtualMachineScaleSet", "id")) and not avset
        vm = _vm(item, [avset] if avset else [], options, _get(item, "properties", "hardwareProfile", "vmSize"))
        if vm is not None:
            machines.append(vm)
    if flexible:
        warnings.append(f"{flexible} VM(s) of flexible scale sets have no placement group to read: no topology")
    if unplaced_vms:
        warnings.append(f"{unplaced_vms} scale set VM(s) have no placement group (deallocated?): kept without topology")
    naming = name_listing(
        [(m.resource, m.claim) for m in machines],
        previous,
        options.name_from,
        noun="VM(s)",
        problem="have no computerName",
    )
    # a VM without a name and without a safe resource name keeps its resource name: place_nodes says why not
    names = [name or m.resource or m.claim for name, m in zip(naming.names, machines, strict=True)]
    warnings += naming.warnings
    known = set(names)
    reported = set(records.domains) | set(records.guids) | {k for k in records.set_aside if not k.startswith("record ")}
    # a contested name's records cannot tell its claimants apart: they are no strangers, and place nobody
    contested = {label[WANTED_NAME_LABEL] for label in naming.labels if label}
    strangers = sorted(reported - known - contested)
    if strangers:
        warnings.append(
            f"{len(strangers)} NVLink record(s) for hosts the compute API does not list: {', '.join(strangers[:5])}"
            f"{' ...' if len(strangers) > 5 else ''}"
        )
    aside = {k: v for k, v in records.set_aside.items() if k in known or k.startswith("record ")}
    nodes: list[Node] = []
    from_sharp = 0
    for m, name, wanted in zip(machines, names, naming.labels, strict=True):
        path = m.placement
        if sharp is not None:
            guid = next((g for g in records.guids.get(name, []) if g in sharp.paths), None)
            if guid is not None:
                path, from_sharp = sharp.paths[guid], from_sharp + 1
        nodes.append(
            Node(
                name=name,
                id=m.resource or name,
                fabric=path,
                accelerator=records.domains.get(name),
                zone=m.zone,
                instance_type=m.size,
                labels=wanted,
            )
        )
    if sharp is not None:
        warnings.append(f"SHARP topology placed {from_sharp} of {len(nodes)} node(s); the rest by placement group")
    return DiscoveryResult(place_nodes(cluster, "azure", nodes, unplaced=aside), {}, warnings)


@dataclass(frozen=True)
class AzureProvider(FullScanOnly):
    inputs: ProviderInputs
    options: Options
    name = "azure"

    def discover_full(self, previous: TopologyGraph | None) -> DiscoveryResult:
        o = self.options
        compute = self.inputs.sdk_client("azure-compute")(o)
        listed = (
            o.scale_sets if o.scale_sets is not None else [str(s["name"]) for s in compute.scale_sets(o.resource_group)]
        )
        scale_sets = {name: compute.scale_set_vms(o.resource_group, name) for name in listed}
        vms = compute.virtual_machines(o.resource_group) if o.include_vms else []
        try:
            uploads = dict(self.inputs.uploads())
        except ProviderError as exc:
            if "no upload location" not in str(exc):
                raise
            uploads = {}
        records = host_domains(uploads)
        warnings: list[str] = []
        if not uploads:
            warnings.append("no NVLink records (topocast collect nvlink): no accelerator domains, no blocks")
        sharp = None
        if o.sharp_uri:
            # a broken cluster-wide file fails the discovery (one line, nothing written): falling back to the
            # placement groups would re-shape the whole tree, so the last good graph stays published instead
            sharp = parse_sharp_topology(self.inputs.read_text(o.sharp_uri), o.sharp_uri)
            warnings += [f"SHARP: {why}" for why in list(sharp.ambiguous.values())[:5]]
        result = graph_from_listing(self.inputs.cluster, scale_sets, vms, o, records, sharp, previous)
        result.graph = _with_fabric_health(result.graph, records, previous)
        result.warnings[:0] = warnings
        result.api_calls.update(compute.calls)
        return result


def _with_fabric_health(graph: TopologyGraph, records: HostDomains, previous: TopologyGraph | None) -> TopologyGraph:
    """The hosts' NVLink fabric state (``collect nvlink``) as health records, each keeping the time it was
    first seen in its state (docs/health.md)."""
    from datetime import UTC, datetime

    from topocast.model.health import carry_forward
    from topocast.providers.nvlink import fabric_records

    before = [r for r in (previous.health if previous else []) if r.source == "nvlink"]
    found = fabric_records(records.fabric, {n.name: n.accelerator for n in graph.nodes}, datetime.now(UTC))
    if not found and not before:
        return graph
    health = [r for r in graph.health if r.source != "nvlink"] + carry_forward(before, found)
    return TopologyGraph.model_validate({**graph.model_dump(), "health": [r.model_dump() for r in health]})


def provider(inputs: ProviderInputs) -> AzureProvider:
    """Registry factory (``azure``); the shell supplies ``sdk_client("azure-compute")``: options -> an
    :class:`~topocast.providers.azure_sdk.AzureCompute` (:func:`topocast.providers.azure_sdk.connect`)."""
    return AzureProvider(inputs, provider_options(Options, inputs.options, "azure"))
