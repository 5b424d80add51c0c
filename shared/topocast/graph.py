"""The normalized topology graph: the one data model every stage shares.

A graph is a flat list of nodes; each node carries its fabric path
closest-first (``fabric[0]`` is the leaf switch) and its accelerator (NVLink /
UltraServer) domain. The switch tree is *derived* from the paths (see
:mod:`topocast.fabric`), which keeps the stored form simple to diff, merge
incrementally and write from other tools::

    {"schema_version": 1, "cluster": "c1", "provider": "aws",
     "nodes": [{"name": "gpu-001", "id": "i-0abc", "fabric": ["leaf-7", "spine-2", "core-1"],
                "accelerator": "cb-123", "subdomain": null, "zone": "us-east-1a",
                "instance_type": "p5.48xlarge"}]}

Validation happens here, at the boundary: unsafe names, duplicate nodes and
fabric paths that do not form a tree are rejected with errors that name the
node. Nodes with an empty ``fabric`` are kept and reported, never dropped.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from topocast.errors import InvalidGraphError
from topocast.names import check_domain_name, check_node_name, check_switch_name
from topocast.validation import validate

SCHEMA_VERSION: Literal[1] = 1


class Node(BaseModel):
    """One compute node (instance, VM, host) and where it sits in the fabric."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(description="Scheduler node name (Slurm NodeName / Kubernetes node name).")
    id: str | None = Field(None, description="Provider instance ID (i-..., numeric GCE ID, HCA GUID...).")
    fabric: list[str] = Field(
        default_factory=list,
        description="Switch IDs closest-first: fabric[0] is the leaf (tier 0). Empty = no topology known.",
    )
    accelerator: str | None = Field(None, description="NVLink / UltraServer domain (AWS CapacityBlockId).")
    subdomain: str | None = Field(None, description="Optional sub-domain inside the accelerator domain (rack).")
    accelerator_pending: bool = Field(
        False,
        description="The provider has not reported the accelerator domain yet (e.g. right after launch).",
    )
    zone: str | None = None
    instance_type: str | None = None
    labels: dict[str, str] = Field(default_factory=dict, description="Extra provider labels (informational).")

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return check_node_name(v)

    @model_validator(mode="after")
    def _names(self) -> Node:
        for sw in self.fabric:
            check_switch_name(sw, self.name)
        if len(set(self.fabric)) != len(self.fabric):
            raise ValueError(f"node {self.name!r} has a switch twice in its fabric path {self.fabric}")
        if self.accelerator is not None:
            check_domain_name(self.accelerator, self.name)
        if self.subdomain is not None:
            check_domain_name(self.subdomain, self.name, "sub-domain")
            if self.accelerator is None:
                raise ValueError(f"node {self.name!r} has a sub-domain but no accelerator domain")
        return self

    @property
    def has_topology(self) -> bool:
        return bool(self.fabric)


class TopologyGraph(BaseModel):
    """A cluster's topology at one point in time (content only; storage adds the generation)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: Literal[1] = Field(SCHEMA_VERSION, description="Bumped on incompatible changes.")
    cluster: str = Field(description="Cluster name this graph describes.")
    provider: str = Field(description="Where the topology came from: aws, gcp, model, ibnetdiscover...")
    nodes: list[Node] = Field(default_factory=list)
    switch_names: dict[str, str] = Field(
        default_factory=dict,
        description="Optional display names for switch IDs (printed as SwitchName with a '# name=id' comment).",
    )

    @field_validator("cluster")
    @classmethod
    def _cluster(cls, v: str) -> str:
        return check_node_name(v, "the graph's cluster name")

    @model_validator(mode="after")
    def _consistent(self) -> TopologyGraph:
        seen_names: set[str] = set()
        seen_ids: dict[str, str] = {}
        # A switch must sit at one tier under one parent everywhere, or the paths don't form a tree.
        tier_of: dict[str, tuple[int, str | None, str]] = {}
        leaf_path: dict[str, tuple[str, ...]] = {}
        for node in self.nodes:
            if node.name in seen_names:
                raise ValueError(f"node name {node.name!r} appears twice")
            seen_names.add(node.name)
            if node.id is not None:
                if node.id in seen_ids:
                    raise ValueError(
                        f"instance id {node.id!r} is used by nodes {seen_ids[node.id]!r} and {node.name!r}"
                    )
                seen_ids[node.id] = node.name
            path = tuple(node.fabric)
            if not path:
                continue
            known = leaf_path.get(path[0])
            if known == path:
                continue  # same leaf, same path: already checked (the common case, kept fast)
            leaf_path.setdefault(path[0], path)
            depth = len(path)
            for i, sw in enumerate(path):
                parent = node.fabric[i + 1] if i + 1 < depth else None
                height = depth - 1 - i  # distance from the root of this node's path
                prev = tier_of.get(sw)
                if prev is None:
                    tier_of[sw] = (height, parent, node.name)
                elif prev[:2] != (height, parent):
                    raise ValueError(
                        f"switch {sw!r} has parent {prev[1]!r} for node {prev[2]!r} but {parent!r} for node "
                        f"{node.name!r}: fabric paths must form a tree"
                    )
        if seen_names & set(tier_of):
            clash = sorted(seen_names & set(tier_of))[0]
            raise ValueError(f"{clash!r} is both a node and a switch")
        for sw, name in self.switch_names.items():
            check_switch_name(name, f"switch {sw}")
        return self

    # ----- queries -----------------------------------------------------------------
    def nodes_without_topology(self) -> list[str]:
        return sorted(n.name for n in self.nodes if not n.fabric)

    def node_names(self) -> list[str]:
        return sorted(n.name for n in self.nodes)

    def content_hash(self) -> str:
        """sha256 of the canonical JSON: equal for graphs that render identically."""
        return hashlib.sha256(canonical_json(self).encode()).hexdigest()


def canonical_json(graph: TopologyGraph) -> str:
    """Deterministic JSON (nodes sorted by name, keys sorted, no whitespace)."""
    data = graph.model_dump(mode="json")
    data["nodes"] = sorted(data["nodes"], key=lambda n: n["name"])
    return json.dumps(data, sort_keys=True, separators=(",", ":"))


def dump_graph(graph: TopologyGraph, indent: int | None = 2) -> str:
    data = graph.model_dump(mode="json", exclude_defaults=False)
    data["nodes"] = sorted(data["nodes"], key=lambda n: n["name"])
    return json.dumps(data, indent=indent, sort_keys=False) + "\n"


def graph_from_data(data: Any, source: str = "graph") -> TopologyGraph:
    """Validate parsed JSON into a graph; errors name the source and the field."""
    if not isinstance(data, dict):
        raise InvalidGraphError(f"{source}: expected a JSON object, got {type(data).__name__}")
    version = data.get("schema_version")
    if version is not None and version != SCHEMA_VERSION:
        raise InvalidGraphError(
            f"{source}: schema_version {version!r} is not supported (this topocast reads {SCHEMA_VERSION})"
        )
    return validate(TopologyGraph, data, source, InvalidGraphError)


def graph_from_json(text: str | bytes, source: str = "graph") -> TopologyGraph:
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InvalidGraphError(f"{source}: not valid JSON ({exc})") from None
    return graph_from_data(data, source)


def load_graph(path: str | Path) -> TopologyGraph:
    p = Path(path)
    try:
        text = p.read_bytes()
    except OSError as exc:
        raise InvalidGraphError(f"{p}: cannot read ({exc.strerror})") from None
    return graph_from_json(text, str(p))


def json_schema() -> dict[str, Any]:
    schema = TopologyGraph.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = "https://topocast.dev/schemas/graph-v1.json"
    return schema
