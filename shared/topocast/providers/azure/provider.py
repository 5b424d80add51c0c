"""Azure: VM scale set / availability set placement from the compute API, NVLink and SHARP from the hosts.

Wire shapes (``azure-mgmt-compute`` 39 models, api-version 2026-04-01; the REST reference
"Virtual Machine Scale Set VMs - List", "Virtual Machine Scale Sets - List", "Virtual Machines -
List"), read through the real SDK client (:mod:`topocast.providers.azure.sdk`):

* ``GET .../resourceGroups/{rg}/providers/Microsoft.Compute/virtualMachineScaleSets`` (every page);
* for each Uniform scale set (``properties.orchestrationMode``)
  ``.../virtualMachineScaleSets/{name}/virtualMachines?$expand=instanceView``: ``name``
  (``<scale set>_<instanceId>``), ``sku.name``, ``zones``, ``properties.osProfile.computerName``,
  ``properties.instanceView.placementGroupId`` and ``.interconnectInstanceView.interconnectSubgroupId``;
* for each Flexible scale set, whose VMs the scale-set VM API does not list (it is Uniform-only),
  ``.../virtualMachines?$filter='virtualMachineScaleSet/id' eq '<id>'&$expand=instanceView``: each VM's
  interconnect subgroup (ARM takes ``$expand=instanceView`` on the VM list only with that filter);
* ``.../virtualMachines`` (no ``$expand``) for VMs outside a Uniform scale set:
  ``properties.availabilitySet.id``, ``properties.hardwareProfile.vmSize``,
  ``properties.virtualMachineScaleSet.id`` and ``properties.networkProfile.interconnectGroupProfile``.

Interconnect Groups and Blocks (ND GB200 / GB300 v6): a VM's interconnect subgroup
(``interconnectSubgroupId``, one NVL72 rack) is its NVLink domain, taken before the ``collect nvlink``
record (a disagreement between the two is kept in the graph's ``notes``); a VM outside a Uniform scale
set with an interconnect group (``interconnectGroupProfile.interconnectGroup``) sits under it, the tier
above the domain. A scale set that cannot be listed (a 403, a throttled call) sets its VMs aside with the
reason (those of the previous graph are kept without topology); it never fails the cluster by itself
(the discover use case does, past the guard's share of nodes set aside).

What becomes of it (the same rule as CycleCloud's ``azslurm topology``: InfiniBand reaches only
within one placement group or availability set):

* the **tree**: a scale-set VM sits under its placement group, under its scale set
  (``[placementGroupId, scaleSet]``, closest first); an availability-set VM under its availability
  set. With a SHARP topology file (``sharp_uri``, :mod:`topocast.providers.sharp`) a host whose
  NVLink record names a port GUID SHARP knows gets SHARP's real switch path instead (its first such
  GUID, i.e. rail 0, as ``azslurm`` reads ``mlx5_ib0``);
* the **blocks**: each host's NVLink domain ``<ClusterUUID>.<CliqueId>`` from its record
  (``topocast collect nvlink``; :mod:`topocast.providers.nvlink`), given through
  ``ProviderInputs.uploads`` (local files in the CLI), or, with ``uploads`` (a bucket prefix), the
  shell's ``sdk_client("nvlink-uploads")`` (the functions' quarantine path: bad records moved aside).

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

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from topocast.errors import ProviderError
from topocast.model.graph import Node, TopologyGraph
from topocast.model.placement import place_nodes, record_label
from topocast.providers.azure.api import AzureComputeApi, NvlinkUploads
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


def _subgroup(item: Mapping[str, Any], view: Mapping[str, Any] | None = None) -> str | None:
    """The VM's interconnect subgroup (its NVLink domain), from its own or the given instance view."""
    found = _get(view or _get(item, "properties", "instanceView") or {}, "interconnectInstanceView",
                 "interconnectSubgroupId")  # fmt: skip
    return str(found) if found else None


def graph_from_listing(
    cluster: str,
    scale_sets: Mapping[str, Sequence[Mapping[str, Any]]],
    vms: Sequence[Mapping[str, Any]],
    options: Options,
    records: HostDomains,
    sharp: SharpTopology | None,
    previous: TopologyGraph | None = None,
    *,
    views: Mapping[str, Mapping[str, Any]] | None = None,
    failed: Mapping[str, str] | None = None,
) -> DiscoveryResult:
    """Pure: the listed VMs, their hosts' records and the SHARP tree as a graph (see the module doc);
    ``previous`` says who held a name two VMs claim (:func:`topocast.providers.naming.name_listing`).

    ``views``: VM resource name -> instance view, for the VMs of Flexible scale sets; ``failed``: scale
    set -> why it could not be listed (its VMs of ``previous`` are kept without topology, set aside)."""
    machines: list[_Vm] = []
    subgroups: dict[str, str] = {}  # VM resource name -> interconnect subgroup
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
                if sub := _subgroup(item):
                    subgroups[vm.resource] = sub
    listed = {m.resource for m in machines}
    flexible = 0
    for item in vms:
        if item.get("name") in listed:
            continue
        avset = _last(_get(item, "properties", "availabilitySet", "id"))
        interconnect = _last(_get(item, "properties", "networkProfile", "interconnectGroupProfile",
                                  "interconnectGroup", "id"))  # fmt: skip
        place = [interconnect] if interconnect else [avset] if avset else []
        # a VM of a flexible-orchestration scale set (uniform ones are not in this listing) has no placement
        # group to read: without an interconnect group it is kept without topology, and counted
        flexible += bool(_get(item, "properties", "virtualMachineScaleSet", "id")) and not place
        vm = _vm(item, place, options, _get(item, "properties", "hardwareProfile", "vmSize"))
        if vm is not None:
            machines.append(vm)
            if sub := _subgroup(item, (views or {}).get(vm.resource)):
                subgroups[vm.resource] = sub
    if flexible:
        warnings.append(f"{flexible} VM(s) of flexible scale sets have no placement group to read: no topology")
    if unplaced_vms:
        warnings.append(f"{unplaced_vms} scale set VM(s) have no placement group (deallocated?): kept without topology")
    aside_sets = _failed_scale_sets(failed or {}, previous, {m.resource for m in machines})
    if failed:
        warnings.append(
            f"{len(failed)} scale set(s) could not be listed, their VMs set aside: "
            + "; ".join(f"{k}: {v}" for k, v in sorted(failed.items())[:3])
        )
    machines += [m for m, _ in aside_sets]
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
    failed_reason = {m.resource: why for m, why in aside_sets}
    for scale_set, why in sorted((failed or {}).items()):  # none of its VMs known yet: the scale set itself
        if not any(r.startswith(f"scale set {scale_set}:") for r in failed_reason.values()):
            aside[record_label(f"scale set {scale_set}")] = f"scale set {scale_set}: {why}"
    nodes: list[Node] = []
    notes: dict[str, str] = {}
    from_sharp = 0
    by_subgroup = _domains_per_subgroup(machines, names, subgroups, records)
    for m, name, wanted in zip(machines, names, naming.labels, strict=True):
        path = m.placement
        if m.resource in failed_reason:
            aside[name] = failed_reason[m.resource]
        if sharp is not None:
            guid = next((g for g in records.guids.get(name, []) if g in sharp.paths), None)
            if guid is not None:
                path, from_sharp = sharp.paths[guid], from_sharp + 1
        domain = records.domains.get(name)
        sub = subgroups.get(m.resource)
        if sub is not None and domain is not None and len(by_subgroup.get(sub, ())) > 1:
            notes[name] = (
                f"interconnect subgroup {sub} (used as its NVLink domain) holds hosts of "
                f"{len(by_subgroup[sub])} NVLink record domains; this host's record says {domain}"
            )
        nodes.append(
            Node(
                name=name,
                id=m.resource or name,
                fabric=path,
                accelerator=sub or domain,
                zone=m.zone,
                instance_type=m.size,
                labels=wanted,
            )
        )
    if sharp is not None:
        warnings.append(f"SHARP topology placed {from_sharp} of {len(nodes)} node(s); the rest by placement group")
    return DiscoveryResult(place_nodes(cluster, "azure", nodes, unplaced=aside, notes=notes), {}, warnings)


def _domains_per_subgroup(
    machines: Sequence[_Vm], names: Sequence[str], subgroups: Mapping[str, str], records: HostDomains
) -> dict[str, set[str]]:
    """Interconnect subgroup -> the NVLink record domains of its hosts (more than one: the two disagree)."""
    out: dict[str, set[str]] = {}
    for m, name in zip(machines, names, strict=True):
        sub, domain = subgroups.get(m.resource), records.domains.get(name)
        if sub is not None and domain is not None:
            out.setdefault(sub, set()).add(domain)
    return out


def _failed_scale_sets(
    failed: Mapping[str, str], previous: TopologyGraph | None, listed: set[str]
) -> list[tuple[_Vm, str]]:
    """The previous graph's VMs of each scale set that could not be listed, kept without topology, with why.

    A Uniform scale set's VM resource names are ``<scale set>_<instance id>``."""
    out: list[tuple[_Vm, str]] = []
    for node in previous.nodes if previous is not None and failed else ():
        resource = node.id or ""
        scale_set = resource.rpartition("_")[0]
        if scale_set in failed and resource not in listed:
            vm = _Vm(node.name, resource, [], node.zone, node.instance_type)
            out.append((vm, f"scale set {scale_set}: {failed[scale_set]}; kept without topology"))
    return out


#: what the shell supplies as ``sdk_client("azure-compute")``: the client for these options
Connect = Callable[["Options"], AzureComputeApi]


@dataclass(frozen=True)
class AzureProvider(FullScanOnly):
    inputs: ProviderInputs
    options: Options
    name = "azure"

    def discover_full(self, previous: TopologyGraph | None) -> DiscoveryResult:
        o = self.options
        connect: Connect = self.inputs.sdk_client("azure-compute")
        compute = connect(o)
        every = {str(s["name"]): s for s in compute.scale_sets(o.resource_group)}
        chosen = o.scale_sets if o.scale_sets is not None else sorted(every)
        scale_sets: dict[str, list[dict[str, Any]]] = {}
        views: dict[str, Mapping[str, Any]] = {}
        flexible: set[str] = set()
        failed: dict[str, str] = {}
        for name in chosen:
            found = every.get(name)
            if found is None:
                failed[name] = f"not in resource group {o.resource_group}"
                continue
            # one scale set that cannot be read sets its own VMs aside: the rest of the cluster is placed
            try:
                if _get(found, "properties", "orchestrationMode") == "Flexible":
                    flexible.add(name)
                    members = compute.scale_set_members(o.resource_group, str(found["id"]))
                    views.update({str(v["name"]): _get(v, "properties", "instanceView") or {} for v in members})
                else:
                    scale_sets[name] = compute.scale_set_vms(o.resource_group, name)
            except ProviderError as exc:
                failed[name] = str(exc)
        listed = compute.virtual_machines(o.resource_group) if (o.include_vms or flexible) else []
        vms = [vm for vm in listed if _keep_vm(vm, o.include_vms, flexible)]
        try:
            if o.uploads:
                read: NvlinkUploads = self.inputs.sdk_client("nvlink-uploads")
                uploads = dict(read(o.uploads))
            else:
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
        result = graph_from_listing(self.inputs.cluster, scale_sets, vms, o, records, sharp, previous,
                                    views=views, failed=failed)  # fmt: skip
        result.graph = _with_fabric_health(result.graph, records, previous)
        result.warnings[:0] = warnings
        result.api_calls.update(compute.calls)
        return result


def _keep_vm(vm: Mapping[str, Any], include_vms: bool, flexible: set[str]) -> bool:
    """A VM of the plain listing: one of a chosen Flexible scale set, or (``include_vms``) one of no scale set."""
    scale_set = _last(_get(vm, "properties", "virtualMachineScaleSet", "id"))
    return scale_set in flexible if scale_set else include_vms


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
    :class:`~topocast.providers.azure.sdk.AzureCompute` (:func:`topocast.providers.azure.sdk.connect`)."""
    return AzureProvider(inputs, provider_options(Options, inputs.options, "azure"))
