"""Topology from the labels the cloud (or another tool) already put on the Kubernetes Nodes.

No cloud API access at all: one LIST of Nodes (done by :mod:`topocast.k8s.node_source`,
passed in here as plain data) is turned into a graph. For each node the first
scheme whose fabric keys it carries wins, in ``schemes`` order:

* ``custom``: the configured ``fabric_keys``, closest switch first;
* ``topograph``: ``fabric.topograph.run/tier-0``, ``-1``, ... (tier 0 = closest),
  accelerator ``accelerator.topograph.run/domain``;
* ``eks``: ``topology.k8s.aws/network-node-layer-N`` down to ``-1`` (layer 1 is
  the top; the highest N present is the closest switch: 3 on most instance
  types, 4 on p6-b200/p6-b300);
* ``gke``: ``cloud.google.com/gce-topology-subblock`` then ``-block`` (there is
  no cluster-level label; ``gce-topology-host`` is one physical host, not a
  switch, and is kept in the node's ``labels``); the sub-block is also the
  accelerator domain (the NVLink domain on A4X), as the GCP provider does.

``preset`` names the label set a cloud writes (:data:`PRESETS`: ``coreweave``, ``crusoe``, ``nebius``,
and ``eks``/``gke``/``topograph`` for one built-in scheme); it fills only the fields left unset.
``qualify`` makes each tier's ID the path from the top (``fabricA/2/3`` for leaf group 3 of superpod 2),
for labels that number a tier within the one above it.

The accelerator domain is, in this order: the configured ``accelerator_key``,
``nvidia.com/gpu.clique`` (set by the NVIDIA GPU operator's feature discovery on
NVLink-connected systems, ``<cluster UUID>.<clique ID>``), the scheme's own key.
A sub-domain comes from ``accelerator.topograph.run/sub-domain`` (or the
configured ``subdomain_key``).

Each node's ID is the last segment of ``spec.providerID`` (the EC2 instance ID,
the GCE instance name), so the Kubernetes publisher matches nodes by it. Zone and
instance type come from the well-known ``topology.kubernetes.io/zone`` and
``node.kubernetes.io/instance-type``. Nodes with none of the keys are kept
without topology and reported. A node whose labels break the graph's rules (a path contradicting
the other nodes', an unsafe value: its kubelet can set them) is set aside with the reason
(:func:`topocast.model.placement.place_nodes`); the others are placed. The slurm-operator
``nodeset.slinky.slurm.net/hostname-override`` annotation is copied into the
node's ``labels`` so the Slinky renderer's ``hostname-override`` mode finds it.

The EKS layer values are the network node IDs of ``DescribeInstanceTopology``, so
a graph from labels equals the AWS provider's graph (Topograph reads the same
``topology.k8s.aws`` keys in its Kubernetes-labels mode).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from topocast.errors import ProviderError
from topocast.model.graph import Node, TopologyGraph
from topocast.model.placement import place_nodes
from topocast.providers.base import DiscoveryResult, FullScanOnly, ProviderInputs
from topocast.providers.options import OptionSpec
from topocast.safeio.validation import validate

Scheme = Literal["custom", "topograph", "eks", "gke"]
DEFAULT_SCHEMES: tuple[Scheme, ...] = ("custom", "topograph", "eks", "gke")

EKS_LAYER = re.compile(r"^topology\.k8s\.aws/network-node-layer-([1-9][0-9]*)$")
GKE_BLOCK = "cloud.google.com/gce-topology-block"
GKE_SUBBLOCK = "cloud.google.com/gce-topology-subblock"
GKE_HOST = "cloud.google.com/gce-topology-host"
GPU_CLIQUE = "nvidia.com/gpu.clique"
TOPOGRAPH_TIER = re.compile(r"^fabric\.topograph\.run/tier-([0-9]+)$")
TOPOGRAPH_DOMAIN = "accelerator.topograph.run/domain"
TOPOGRAPH_SUBDOMAIN = "accelerator.topograph.run/sub-domain"
ZONE = "topology.kubernetes.io/zone"
INSTANCE_TYPE = "node.kubernetes.io/instance-type"
HOSTNAME_OVERRIDE = "nodeset.slinky.slurm.net/hostname-override"
#: the node annotations worth reading (the node source asks only for these)
ANNOTATIONS = (HOSTNAME_OVERRIDE,)

#: Named label sets (``preset``): the keys a cloud's control plane writes on GPU nodes. A preset only
#: fills the fields the configuration leaves unset, so any of them can be overridden.
PRESETS: dict[str, dict[str, object]] = {
    # docs.coreweave.com/docs/products/networking/reference/infiniband-labels: ib.coreweave.cloud/fabric
    # ("the name of the InfiniBand fabric"), /superpod and /leafgroup ("the number identifying" the superpod
    # / leaf group), and ds.coreweave.com/nvlink.domain on GB200 NVL72. The numbers repeat across superpods
    # and fabrics, so each tier's ID is qualified by the tiers above it (``qualify``).
    "coreweave": {
        "fabric_keys": ["ib.coreweave.cloud/leafgroup", "ib.coreweave.cloud/superpod", "ib.coreweave.cloud/fabric"],
        "accelerator_key": "ds.coreweave.com/nvlink.domain",
        "qualify": True,
    },
    # docs.nvidia.com/topograph/providers/crusoe: tier 0 crusoe.ai/pod.id (rail-optimized pod: a shared set
    # of leaf switches), tier 1 crusoe.ai/ib.partition.id (the InfiniBand partition); nvidia.com/gpu.clique
    # for the accelerator domain (read by default).
    "crusoe": {"fabric_keys": ["crusoe.ai/pod.id", "crusoe.ai/ib.partition.id"]},
    # docs.nebius.com/kubernetes/gpu/topology-aware-scheduling: topology.nebius.com/tier-1 (rack-level
    # switches, a block), tier-2 (spine-level), gpu-cluster-id (one connected high-speed network domain);
    # tier-0 is the accelerator interconnect (multi-node NVLink), set only on nodes that have it.
    "nebius": {
        "fabric_keys": [f"topology.nebius.com/{k}" for k in ("tier-1", "tier-2", "gpu-cluster-id")],
        "accelerator_key": "topology.nebius.com/tier-0",
    },
    # the schemes read without a preset, one at a time
    "eks": {"schemes": ["eks"]},
    "gke": {"schemes": ["gke"]},
    "topograph": {"schemes": ["topograph"]},
}


def _selector_from_flags(flag: str, values: list[str]) -> dict[str, str] | None:
    """``--label KEY=VALUE`` (repeatable) as the ``node_selector`` mapping."""
    bad = [kv for kv in values if "=" not in kv]
    if bad:
        raise ProviderError(f"{flag} {bad[0]!r}: expected KEY=VALUE (only nodes carrying that label)")
    return dict(kv.split("=", 1) for kv in values) if values else None


class Options(BaseModel):
    """How to read topology from node labels (the ``k8s-labels`` provider's options)."""

    model_config = ConfigDict(extra="forbid")
    #: the functions' variable holding these options as one JSON object
    ENV_OBJECT: ClassVar[OptionSpec] = OptionSpec(
        env="TOPOCAST_NODE_LABELS",
        env_help="NodeLabelsConfig as JSON (fabric_keys, accelerator_key, node_selector); the cluster is "
        "reached like the Kubernetes publisher (TOPOCAST_K8S_OPTIONS connection, else TOPOCAST_K8S_*)",
    )

    schemes: list[Scheme] = Field(
        default_factory=lambda: list(DEFAULT_SCHEMES), min_length=1, description="Label schemes tried, in order."
    )
    fabric_keys: Annotated[
        list[str], OptionSpec(flags=("--fabric-key",), many=True, help="node label of a switch tier, closest first")
    ] = Field(default_factory=list, description="custom scheme: label keys, closest first.")
    accelerator_key: Annotated[
        str | None, OptionSpec(flags=("--accelerator-key",), help="node label of the NVLink domain")
    ] = Field(None, description="Label key of the accelerator domain (any scheme).")
    subdomain_key: str = Field(TOPOGRAPH_SUBDOMAIN, description="Label key of the sub-domain.")
    node_selector: Annotated[
        dict[str, str] | None,
        OptionSpec(flags=("--label",), many=True, help="node label KEY=VALUE (repeatable)",
                   from_flag=_selector_from_flags),
    ] = Field(None, description="Only nodes with these labels.")  # fmt: skip
    preset: Annotated[
        str | None,
        OptionSpec(flags=("--preset",), help="a cloud's label set: coreweave, crusoe, nebius, eks, gke, topograph"),
    ] = Field(None, description=f"Named label set: {', '.join(PRESETS)} (fills unset fields).")
    qualify: bool = Field(False, description="Prefix each tier's ID with the tiers above it (numbered tiers).")

    @model_validator(mode="before")
    @classmethod
    def _apply_preset(cls, data: object) -> object:
        if not isinstance(data, dict) or data.get("preset") in (None, ""):
            return data
        name = data["preset"]
        if name not in PRESETS:
            raise ValueError(f"unknown preset {name!r}; known: {', '.join(PRESETS)}")
        given = {k: v for k, v in data.items() if v not in (None, [], {})}
        return {**PRESETS[name], **given}


class NodeLabelsConfig(Options):
    """The options and the cluster (CLI flags and the function's settings map onto this)."""

    cluster: str = "default"


@dataclass(frozen=True)
class ClusterNodeInfo:
    """What this provider needs of one Kubernetes Node (plain data; see topocast.k8s.node_source)."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    provider_id: str | None = None


def _instance(provider_id: str | None) -> str | None:
    if not provider_id:
        return None
    parts = [p for p in provider_id.split("://", 1)[-1].split("/") if p]
    return parts[-1] if parts else None


def fabric_of(labels: Mapping[str, str], scheme: Scheme, config: NodeLabelsConfig) -> list[str]:
    """The node's switch path closest-first under ``scheme`` (empty when the node has none of its keys)."""
    if scheme == "custom":
        path = [labels.get(k, "") for k in config.fabric_keys]
    elif scheme == "topograph":
        tiers = dict((int(m.group(1)), v) for k, v in labels.items() if (m := TOPOGRAPH_TIER.match(k)))
        path = [tiers.get(i, "") for i in range(max(tiers) + 1)] if tiers else []
    elif scheme == "eks":
        layers = dict((int(m.group(1)), v) for k, v in labels.items() if (m := EKS_LAYER.match(k)))
        path = [layers.get(i, "") for i in range(max(layers), 0, -1)] if layers else []
    else:
        path = [labels.get(GKE_SUBBLOCK, ""), labels.get(GKE_BLOCK, "")]
    # A path with holes (layer 2 missing, sub-block without block) is no path: the tree would be wrong.
    if not (path and all(path)):
        return []
    if config.qualify:  # leaf group "3" of superpod "1" is not leaf group "3" of superpod "2"
        path = ["/".join(reversed(path[i:])) for i in range(len(path))]
    return path


def _accelerator(labels: Mapping[str, str], scheme: Scheme | None, config: NodeLabelsConfig) -> str | None:
    for key in (config.accelerator_key, GPU_CLIQUE):
        if key and labels.get(key):
            return labels[key]
    if scheme == "topograph":
        return labels.get(TOPOGRAPH_DOMAIN) or None
    if scheme == "gke":
        return labels.get(GKE_SUBBLOCK) or None
    return None


def graph_from_nodes(nodes: Iterable[ClusterNodeInfo], config: NodeLabelsConfig) -> DiscoveryResult:
    """Pure: the listed Nodes as a graph, plus what looked wrong."""
    rows: list[Node] = []
    used: dict[str, int] = {}
    partial: list[str] = []
    for node in sorted(nodes, key=lambda n: n.name):
        labels = node.labels
        scheme: Scheme | None = None
        path: list[str] = []
        for candidate in config.schemes:
            if candidate == "custom" and not config.fabric_keys:
                continue
            path = fabric_of(labels, candidate, config)
            if path:
                scheme = candidate
                break
        if scheme is None and any(EKS_LAYER.match(k) or k in (GKE_BLOCK, GKE_SUBBLOCK) for k in labels):
            partial.append(node.name)
        used[scheme or "none"] = used.get(scheme or "none", 0) + 1
        accelerator = _accelerator(labels, scheme, config)
        extra = {k: v for k, v in node.annotations.items() if k == HOSTNAME_OVERRIDE}
        if labels.get(GKE_HOST):
            extra[GKE_HOST] = labels[GKE_HOST]
        rows.append(
            Node(
                name=node.name,
                id=_instance(node.provider_id),
                fabric=path,
                accelerator=accelerator,
                subdomain=(labels.get(config.subdomain_key) or None) if accelerator else None,
                zone=labels.get(ZONE),
                instance_type=labels.get(INSTANCE_TYPE),
                labels=extra,
            )
        )
    warnings: list[str] = []
    if partial:
        warnings.append(
            f"{len(partial)} node(s) carry only part of a topology label set (a missing layer); kept without "
            f"topology: {', '.join(partial[:5])}{' ...' if len(partial) > 5 else ''}"
        )
    # (a configuration reading no fabric at all, e.g. an overlay that takes only the domains, says nothing)
    reads_fabric = any(s != "custom" or config.fabric_keys for s in config.schemes)
    if used.get("none") and reads_fabric:
        warnings.append(
            f"{used['none']} of {len(rows)} node(s) carry no topology labels of the schemes {config.schemes}"
        )
    # any kubelet can set its own labels: a node whose labels break the graph's rules (a path that
    # contradicts the others, an unsafe value) is set aside with the reason, never the whole cluster
    graph = place_nodes(config.cluster, "k8s-labels", rows)
    return DiscoveryResult(graph, {}, warnings)


__all__ = [
    "ANNOTATIONS",
    "PRESETS",
    "ClusterNodeInfo",
    "NodeLabelsConfig",
    "NodeLabelsProvider",
    "NodeLister",
    "Options",
    "fabric_of",
    "graph_from_nodes",
    "provider",
]


#: what the shell supplies as ``sdk_client("k8s-nodes")``: the cluster's Nodes for a config, and the
#: API calls that took (operation -> count)
NodeLister = Callable[[NodeLabelsConfig], tuple[list[ClusterNodeInfo], dict[str, int]]]


@dataclass(frozen=True)
class NodeLabelsProvider(FullScanOnly):
    """The ``k8s-labels`` source: Node labels have no per-instance read, so every change is a full one."""

    inputs: ProviderInputs
    name = "k8s-labels"

    def config(self) -> NodeLabelsConfig:
        data = {k: v for k, v in self.inputs.options.items() if v not in (None, [], {})}
        return validate(NodeLabelsConfig, {**data, "cluster": self.inputs.cluster}, "k8s-labels options", ProviderError)

    def discover_full(self, previous: TopologyGraph | None) -> DiscoveryResult:
        config = self.config()
        lister: NodeLister = self.inputs.sdk_client("k8s-nodes")
        nodes, calls = lister(config)
        result = graph_from_nodes(nodes, config)
        result.api_calls.update(calls)
        return result


def provider(inputs: ProviderInputs) -> NodeLabelsProvider:
    """Registry factory (``k8s-labels``); the shell supplies the Node listing as ``sdk_client("k8s-nodes")``."""
    return NodeLabelsProvider(inputs)
