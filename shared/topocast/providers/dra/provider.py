"""DRA: NVLink domains from the GPU DRA driver's ``ResourceSlice`` objects, tiers from node labels.

Kubernetes Dynamic Resource Allocation publishes each node's devices as ``ResourceSlice`` objects
(``resource.k8s.io`` v1, v1beta2 and v1beta1; the shapes of the Kubernetes API reference): a slice
names its ``spec.driver``, its ``spec.nodeName`` (node-local pools) and ``spec.devices[]``, each with
``attributes`` (``{name: {"string"|"int"|"bool"|"version": value}}``; in v1beta1 under
``basic.attributes``). An attribute name without a domain belongs to the driver's domain, so
``cliqueID`` and ``gpu.nvidia.com/cliqueID`` are the same attribute of driver ``gpu.nvidia.com``.

The node's accelerator domain is, in this order:

1. the ``domain_attributes`` of its devices of ``driver`` joined with ``.`` (default
   ``clusterUUID`` + ``cliqueID``, giving ``<ClusterUUID>.<CliqueId>``, the same value as the GPU
   feature discovery label and Topograph's ``topograph.run/cluster-id``). NVIDIA's driver
   (``kubernetes-sigs/dra-driver-nvidia-gpu``, ``cmd/gpu-kubelet-plugin/deviceinfo.go``) publishes
   ``uuid``, ``productName``, ``architecture``, ``pcieRoot``... per GPU but, as of that source, no
   clique attribute: the names are options so a driver (or a fork) that publishes one is read
   directly;
2. else the node label ``label_fallback`` (default ``nvidia.com/gpu.clique``, what Topograph's
   ``dra`` provider reads).

The tiers come from the node labels, through the same schemes as ``k8s-labels``
(:func:`topocast.providers.k8s_labels.provider.fabric_of`). A node whose devices report two domains is kept
without a domain and set aside with the reason; a slice of a node the Node list does not have is
reported, never an error. The I/O is the shell's (``sdk_client("k8s-dra")``:
:mod:`topocast.k8s.resource_slices`); this module is pure.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from topocast.model.graph import Node, TopologyGraph
from topocast.model.placement import place_nodes
from topocast.providers.base import DiscoveryResult, FullScanOnly, ProviderInputs
from topocast.providers.k8s_labels.provider import (
    DEFAULT_SCHEMES,
    GPU_CLIQUE,
    INSTANCE_TYPE,
    ZONE,
    ClusterNodeInfo,
    NodeLabelsConfig,
    Scheme,
    fabric_of,
)
from topocast.providers.options import provider_options

__all__ = ["DraLister", "DraProvider", "Options", "SliceDevices", "graph_from_slices", "provider"]


class Options(BaseModel):
    """``--option KEY=VALUE`` / the functions' provider options for ``dra``."""

    model_config = ConfigDict(extra="forbid")

    driver: str = Field("gpu.nvidia.com", min_length=1, max_length=253, description="The DRA driver's slices.")
    domain_attributes: list[str] = Field(
        default_factory=lambda: ["clusterUUID", "cliqueID"], min_length=1, description="Joined with '.': the domain."
    )
    label_fallback: str | None = Field(GPU_CLIQUE, description="Node label read when the slices name no domain.")
    api_version: Literal["auto", "v1", "v1beta2", "v1beta1"] = Field("auto", description="resource.k8s.io version.")
    schemes: list[Scheme] = Field(
        default_factory=lambda: list(DEFAULT_SCHEMES), min_length=1, description="Tier label schemes, in order."
    )
    fabric_keys: list[str] = Field(default_factory=list, description="custom scheme: tier labels, closest first.")
    node_selector: dict[str, str] | None = Field(None, description="Only nodes with these labels.")
    kubeconfig: str | None = Field(None, description="The CLI's connection (the functions use TOPOCAST_K8S_*).")


@dataclass(frozen=True)
class SliceDevices:
    """One ResourceSlice as plain data: its node (None for a pool not local to one node) and its devices'
    attributes, each ``{name: value as text}``."""

    name: str
    driver: str
    node: str | None
    devices: Sequence[Mapping[str, str]] = field(default_factory=list)


#: what the shell supplies as ``sdk_client("k8s-dra")``: the Nodes and the driver's slices for the options,
#: and the API calls that took
DraLister = Callable[[Options], tuple[list[ClusterNodeInfo], list[SliceDevices], dict[str, int]]]


def _attribute(device: Mapping[str, str], name: str, driver: str) -> str | None:
    if "/" in name:
        domain, _, short = name.partition("/")
        return device.get(name) or (device.get(short) if domain == driver else None)
    return device.get(name) or device.get(f"{driver}/{name}")


def _device_domain(device: Mapping[str, str], options: Options) -> str | None:
    values = [_attribute(device, a, options.driver) for a in options.domain_attributes]
    return ".".join(v for v in values if v) if all(values) else None


def graph_from_slices(
    cluster: str, nodes: Iterable[ClusterNodeInfo], slices: Iterable[SliceDevices], options: Options
) -> DiscoveryResult:
    """Pure: the Nodes with their slices' domains and their labels' tiers (see the module doc)."""
    by_node: dict[str, set[str]] = {}
    shared = 0
    for s in slices:
        if s.driver != options.driver:
            continue
        if s.node is None:
            shared += 1
            continue
        found = by_node.setdefault(s.node, set())
        found.update(d for d in (_device_domain(dev, options) for dev in s.devices) if d)
    labels_config = NodeLabelsConfig(schemes=options.schemes, fabric_keys=options.fabric_keys)
    rows: list[Node] = []
    aside: dict[str, str] = {}
    from_slices = from_labels = 0
    disagree: list[str] = []
    listed = set()
    for info in sorted(nodes, key=lambda n: n.name):
        listed.add(info.name)
        labels = info.labels
        domains = by_node.get(info.name, set())
        label = labels.get(options.label_fallback) if options.label_fallback else None
        domain: str | None = None
        if len(domains) > 1:
            aside[info.name] = (
                f"devices of driver {options.driver} report {len(domains)} NVLink domains "
                f"({', '.join(sorted(domains)[:3])}); kept without a domain"
            )
        elif domains:
            domain = next(iter(domains))
            from_slices += 1
            if label and label != domain:
                disagree.append(f"{info.name} ({domain} in its slices, {label} in {options.label_fallback})")
        elif label:
            domain = label
            from_labels += 1
        path: list[str] = []
        for scheme in options.schemes:
            if scheme == "custom" and not options.fabric_keys:
                continue
            path = fabric_of(labels, scheme, labels_config)
            if path:
                break
        provider_id = info.provider_id or ""
        ident = [p for p in provider_id.split("://", 1)[-1].split("/") if p]
        rows.append(
            Node(
                name=info.name,
                id=ident[-1] if ident else None,
                fabric=path,
                accelerator=domain,
                zone=labels.get(ZONE),
                instance_type=labels.get(INSTANCE_TYPE),
            )
        )
    warnings = []
    if from_labels:  # a mixed source is worth a note; all from the slices is the expected case
        warnings.append(f"{from_slices} node(s) took their NVLink domain from ResourceSlices, {from_labels} from "
                        f"the {options.label_fallback} label")  # fmt: skip
    strangers = sorted(set(by_node) - listed)
    if strangers:
        warnings.append(f"{len(strangers)} ResourceSlice node(s) not in the Node list: {', '.join(strangers[:5])}")
    if shared:
        warnings.append(f"{shared} {options.driver} slice(s) not local to one node (no domain read from them)")
    if disagree:
        warnings.append(f"{len(disagree)} node(s) whose slices and label disagree (slices win): {disagree[0]}")
    return DiscoveryResult(place_nodes(cluster, "dra", rows, unplaced=aside), {}, warnings)


@dataclass(frozen=True)
class DraProvider(FullScanOnly):
    inputs: ProviderInputs
    options: Options
    name = "dra"

    def discover_full(self, previous: TopologyGraph | None) -> DiscoveryResult:
        lister: DraLister = self.inputs.sdk_client("k8s-dra")
        nodes, slices, calls = lister(self.options)
        result = graph_from_slices(self.inputs.cluster, nodes, slices, self.options)
        result.api_calls.update(calls)
        return result


def provider(inputs: ProviderInputs) -> DraProvider:
    """Registry factory (``dra``); the shell supplies ``sdk_client("k8s-dra")`` (a :data:`DraLister`)."""
    return DraProvider(inputs, provider_options(Options, inputs.options, "dra"))
