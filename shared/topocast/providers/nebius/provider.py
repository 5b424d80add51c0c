"""Nebius AI Cloud: each instance's InfiniBand place from the Compute API.

``InstanceService.List`` of the project (``parent_id``; SDK
``nebius.api.nebius.compute.v1.InstanceServiceClient``, read through
:mod:`topocast.providers.nebius.sdk`) returns per instance
``status.infiniband_topology_path.path``: three switch-group IDs listed **top-down** (the root
first, as Topograph's Nebius provider reads them: data center / spine / block), which become the
fabric closest first (``path`` reversed). The accelerator (NVLink) domain is
``spec.nvl_instance_group_id`` (GB200 NVL72: the instances of one NVLink rack; the field Topograph
reads). The node name is ``metadata.name`` (or ``spec.hostname`` / ``metadata.id``, option
``name_from``), by the one rule of :mod:`topocast.providers.naming`: an instance without it is named by
its instance ID; a name two instances claim stays with the one that had it in the previous graph, the
others are named by their ID and wait (label ``topocast/wanted-name``).

Degrade per node: an instance in a GPU cluster (``spec.gpu_cluster.id``) whose path is missing or
not exactly three IDs keeps its node without topology, with the reason in the graph's ``unplaced``;
instances outside any GPU cluster (CPU nodes) are kept without topology and counted in a warning.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from topocast.model.graph import Node, TopologyGraph
from topocast.model.placement import place_nodes, record_label
from topocast.providers.base import DiscoveryResult, FullScanOnly, ProviderInputs
from topocast.providers.cloud_ids import switch_id
from topocast.providers.naming import name_listing
from topocast.providers.nebius.api import NebiusApi
from topocast.providers.options import provider_options

__all__ = ["NebiusProvider", "Options", "graph_from_instances", "provider"]

PATH_LABEL = "nebius.com/infiniband-topology-path"
GPU_CLUSTER_LABEL = "nebius.com/gpu-cluster"
#: the tiers of the path, closest first (the API lists them top-down)
TIERS = ("block", "spine", "datacenter")
GONE = {"DELETING"}


class Options(BaseModel):
    """``--provider nebius`` options (``--option KEY=VALUE``, or ``TOPOCAST_PROVIDER_OPTIONS``)."""

    model_config = ConfigDict(extra="forbid")

    project: str = Field(description="Project ID (the instances' parent_id), e.g. project-e00...")
    name_from: Literal["name", "hostname", "id"] = Field("name", description="node name: metadata.name, "
                                                         "spec.hostname or metadata.id.")  # fmt: skip
    labels: dict[str, str] = Field(default_factory=dict, description="Only instances with these metadata labels.")
    page_size: int = Field(200, ge=1, le=1000, description="Instances per page.")
    endpoint: str | None = Field(None, description="host:port for every call (private endpoint, tests).")
    insecure: bool = Field(False, description="Plaintext gRPC to endpoint (a local fake only).")
    credentials_file: str | None = Field(None, description="Service account credentials file (default: the SDK's).")
    timeout: float = Field(60.0, gt=0, description="Seconds one page may take.")


def graph_from_instances(
    cluster: str, instances: Iterable[Mapping[str, Any]], options: Options, previous: TopologyGraph | None = None
) -> DiscoveryResult:
    """Pure: ``InstanceService.List`` records (see :func:`topocast.providers.nebius.sdk._record`) as a graph;
    ``previous`` says who held a name two instances claim (:func:`topocast.providers.naming.name_listing`)."""
    nodes: list[Node] = []
    aside: dict[str, str] = {}
    cpu: list[str] = []
    listed = [
        inst
        for inst in sorted(instances, key=lambda i: str(i.get("id")))
        if inst.get("state") not in GONE
        and not any((inst.get("labels") or {}).get(k) != v for k, v in options.labels.items())
    ]
    claims = [(str(inst.get("id") or ""), str(inst.get(options.name_from) or "")) for inst in listed]
    naming = name_listing(claims, previous, options.name_from)
    for inst, name, wanted in zip(listed, naming.names, naming.labels, strict=True):
        iid = str(inst.get("id") or "")
        if not name:
            aside[record_label(iid)] = f"instance {iid} has no {options.name_from}; left out"
            continue
        path = [str(p) for p in inst.get("infiniband_topology_path") or []]
        cluster_id = str(inst.get("gpu_cluster") or "")
        extra = {GPU_CLUSTER_LABEL: cluster_id} if cluster_id else {}
        extra.update(wanted)
        if path:
            extra[PATH_LABEL] = "/".join(path)
        kind = "/".join(p for p in (inst.get("platform"), inst.get("preset")) if p) or None
        fabric: list[str] = []
        if len(path) == 3:
            fabric = [switch_id(tier, value) for tier, value in zip(TIERS, reversed(path), strict=True)]
        elif path:
            aside[name] = f"infiniband_topology_path has {len(path)} IDs {path[:4]} (expected 3); kept without topology"
        elif cluster_id:
            aside[name] = f"in GPU cluster {cluster_id} but no infiniband_topology_path; kept without topology"
        else:
            cpu.append(name)
        nodes.append(
            Node(
                name=name,
                id=iid or None,
                fabric=fabric,
                accelerator=str(inst.get("nvl_instance_group_id") or "") or None,
                instance_type=kind,
                labels=extra,
            )
        )
    warnings = list(naming.warnings)
    if cpu:
        warnings.append(
            f"{len(cpu)} instance(s) are in no GPU cluster (no InfiniBand); kept without topology: "
            f"{', '.join(sorted(cpu)[:5])}{' ...' if len(cpu) > 5 else ''}"
        )
    return DiscoveryResult(place_nodes(cluster, "nebius", nodes, unplaced=aside), {}, warnings)


#: what the shell supplies as ``sdk_client("nebius")``: a reader for these options (topocast.providers.nebius.sdk)
Connect = Callable[[Options], NebiusApi]


@dataclass(frozen=True)
class NebiusProvider(FullScanOnly):
    """The ``nebius`` source: no per-instance read here, so every change is a full discovery."""

    inputs: ProviderInputs
    options: Options
    name = "nebius"

    def discover_full(self, previous: TopologyGraph | None) -> DiscoveryResult:
        connect: Connect = self.inputs.sdk_client("nebius")
        reader = connect(self.options)
        try:
            records = reader.instances(self.options.project, self.options.page_size)
        finally:
            reader.close()
        result = graph_from_instances(self.inputs.cluster, records, self.options, previous)
        result.api_calls.update(reader.calls)
        return result


def provider(inputs: ProviderInputs) -> NebiusProvider:
    """Registry factory (``nebius``): the options validated by :class:`Options`."""
    return NebiusProvider(inputs, provider_options(Options, inputs.options, "nebius"))
