"""The normalized topology graph: the one data model every stage shares.

A graph is a flat list of nodes; each node carries its fabric path
closest-first (``fabric[0]`` is the leaf switch) and its accelerator (NVLink /
UltraServer) domain. The switch tree is *derived* from the paths (see
:mod:`topocast.model.fabric`), which keeps the stored form simple to diff, merge
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
from operator import attrgetter
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from topocast.errors import InvalidGraphError, TopocastError
from topocast.model.checks import check_graph, looks_consistent
from topocast.model.gc_pause import paused_gc
from topocast.model.health import HealthRecord
from topocast.model.names import check_node_name
from topocast.safeio.limits import MAX_GRAPH_BYTES, check_size, read_capped
from topocast.safeio.validation import check_json_depth, validate

SCHEMA_VERSION: Literal[1] = 1


class Node(BaseModel):
    """One compute node (instance, VM, host) and where it sits in the fabric."""

    # defer_build: pydantic-core's validator is built on first use; loading a graph file
    # (model/decode.py) never needs it, which keeps `topocast render` start-up ~10 ms shorter.
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

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

    @property
    def has_topology(self) -> bool:
        return bool(self.fabric)


class TopologyGraph(BaseModel):
    """A cluster's topology at one point in time (content only; storage adds the generation)."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    schema_version: Literal[1] = Field(SCHEMA_VERSION, description="Bumped on incompatible changes.")
    cluster: str = Field(description="Cluster name this graph describes.")
    provider: str = Field(description="Where the topology came from: aws, gcp, model, ibnetdiscover...")
    nodes: list[Node] = Field(default_factory=list)
    switch_names: dict[str, str] = Field(
        default_factory=dict,
        description="Optional display names for switch IDs (printed as SwitchName with a '# name=id' comment).",
    )
    unplaced: dict[str, str] = Field(
        default_factory=dict,
        description=(
            "What discovery set aside, with the reason: a node name (the node is kept in `nodes` with what "
            "could be trusted, e.g. no fabric path) or a record that could not become a node (an escaped "
            "label such as `record 'gpu-03=x mlx5_0'`). Never silently dropped: rendered in reports and views."
        ),
    )
    notes: dict[str, str] = Field(
        default_factory=dict,
        description=(
            "Per-node notes that did not set the node aside: node name -> what discovery decided and why, e.g. "
            "merged sources disagreeing (an overlay's NVLink clique spanning two of the base source's domains, "
            "a node only one source knows). Rendered in reports and views."
        ),
    )

    health: list[HealthRecord] = Field(
        default_factory=list,
        description=(
            "Fabric health: one record per switch, link, accelerator domain or capacity block a source reported "
            "on (no record = ok), with its state, source, reason and since when (docs/health.md). Each node's "
            "fabric health is derived from these: the worst state on its path or in its domain."
        ),
    )

    @field_validator("health")
    @classmethod
    def _one_record_per_object(cls, v: list[HealthRecord]) -> list[HealthRecord]:
        seen: set[object] = set()
        for rec in v:
            if rec.ref in seen:
                raise ValueError(f"two health records for {rec.ref}")
            seen.add(rec.ref)
        return v

    @field_validator("cluster")
    @classmethod
    def _cluster(cls, v: str) -> str:
        return check_node_name(v, "the graph's cluster name")

    @model_validator(mode="after")
    def _consistent(self) -> TopologyGraph:
        check_graph(self)
        return self

    # ----- queries -----------------------------------------------------------------
    def nodes_without_topology(self) -> list[str]:
        if all(map(_fabric, self.nodes)):  # the usual answer, at C speed
            return []
        return sorted(n.name for n in self.nodes if not n.fabric)

    def nodes_set_aside(self) -> dict[str, str]:
        """What discovery set aside (``unplaced``), name or record -> reason, in name order."""
        return dict(sorted(self.unplaced.items()))

    def node_names(self) -> list[str]:
        return sorted(n.name for n in self.nodes)

    def content_hash(self) -> str:
        """sha256 of the canonical JSON: equal for graphs that render identically."""
        return hashlib.sha256(canonical_json(self).encode()).hexdigest()


def canonical_json(graph: TopologyGraph) -> str:
    """Deterministic JSON (nodes sorted by name, keys sorted, no whitespace)."""
    data = graph.model_dump(mode="json")
    data["nodes"] = sorted(data["nodes"], key=lambda n: n["name"])
    # graphs with nothing set aside and no health records hash as they did before the fields existed
    for key in ("unplaced", "health"):
        if not data[key]:
            del data[key]
    return json.dumps(data, sort_keys=True, separators=(",", ":"))


def dump_graph(graph: TopologyGraph, indent: int | None = 2) -> str:
    """The graph as JSON, nodes sorted by name (what the store and ``-f graph`` write).

    Equal to ``json.dumps(graph.model_dump(mode="json") with sorted nodes, indent=indent)``;
    indented output is serialized by pydantic-core (the stdlib encoder is pure Python when
    indenting), which prints the same bytes whenever the text is ASCII.
    """
    ordered = sorted(graph.nodes, key=_by_name)
    # an empty `unplaced` / `notes` / `health` is left out: the file is byte for byte what it was before the
    # field existed
    exclude = {k for k in ("unplaced", "notes", "health") if not getattr(graph, k)} or None
    if indent is not None:
        with paused_gc():
            text = graph.model_copy(update={"nodes": ordered}).model_dump_json(indent=indent, exclude=exclude)
        if text.isascii():
            return text + "\n"
    data = graph.model_dump(mode="json", exclude_defaults=False, exclude=exclude)
    data["nodes"] = [n.model_dump(mode="json") for n in ordered]
    return json.dumps(data, indent=indent, sort_keys=False) + "\n"


_by_name = attrgetter("name")
_fabric = attrgetter("fabric")


def graph_from_data(data: Any, source: str = "graph") -> TopologyGraph:
    """Validate parsed JSON into a graph; errors name the source and the field."""
    if not isinstance(data, dict):
        raise InvalidGraphError(f"{source}: expected a JSON object, got {type(data).__name__}")
    version = data.get("schema_version")
    if version is not None and version != SCHEMA_VERSION:
        raise InvalidGraphError(
            f"{source}: schema_version {version!r} is not supported (this topocast reads {SCHEMA_VERSION})"
        )
    if version is None and _before_schema_1(data):
        raise InvalidGraphError(
            f"{source}: this is a graph from before schema version 1 (its nodes have 'switches', not 'fabric'): "
            "re-run 'topocast discover' to write a current graph"
        )
    with paused_gc():
        return validate(TopologyGraph, data, source, InvalidGraphError)


def _before_schema_1(data: dict[str, Any]) -> bool:
    """A graph written before ``schema_version`` existed: node paths were called ``switches``."""
    nodes = data.get("nodes")
    first = nodes[0] if isinstance(nodes, list) and nodes else None
    return isinstance(first, dict) and "switches" in first and "fabric" not in first


def graph_from_json(text: str | bytes, source: str = "graph") -> TopologyGraph:
    """Parse and validate graph JSON straight from the bytes, no Python dicts in between.

    The size is capped first (:data:`~topocast.safeio.limits.MAX_GRAPH_BYTES`). A good graph takes
    :func:`topocast.model.decode.decode_unchecked` (msgspec, about 4x quicker) and the graph's rules
    (:func:`topocast.model.checks.looks_consistent`); whatever those do not accept is validated by
    pydantic-core. Only a graph pydantic rejects takes the slower route
    through :func:`json.loads` and :func:`graph_from_data`, which words the error (not JSON, not an
    object, schema version).
    """
    check_size(len(text), MAX_GRAPH_BYTES, source, InvalidGraphError)
    from topocast.model.decode import decode_unchecked  # msgspec: only processes that load graph files

    with paused_gc():
        fast = decode_unchecked(text, TopologyGraph, Node)
        if fast is not None and looks_consistent(fast):
            return fast
        try:
            return TopologyGraph.model_validate_json(text)
        except ValidationError:
            pass  # reworded below
        except TopocastError as exc:  # our own checks (unsafe names): keep the class, add the source
            raise type(exc)(f"{source}: {exc}") from None
    try:
        if isinstance(text, bytes | bytearray):
            text = text.decode("utf-8")
        check_json_depth(text, source, InvalidGraphError)
        data = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InvalidGraphError(f"{source}: not valid JSON ({exc})") from None
    except (RecursionError, MemoryError, ValueError) as exc:
        raise InvalidGraphError(f"{source}: not usable JSON ({type(exc).__name__})") from None
    return graph_from_data(data, source)


def load_graph(path: str | Path) -> TopologyGraph:
    p = Path(path)
    try:
        with p.open("rb") as fh:
            text = read_capped(fh, MAX_GRAPH_BYTES, str(p), InvalidGraphError)
    except OSError as exc:
        raise InvalidGraphError(f"{p}: cannot read ({exc.strerror})") from None
    return graph_from_json(text, str(p))


def json_schema() -> dict[str, Any]:
    schema = TopologyGraph.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = "https://topocast.dev/schemas/graph-v1.json"
    return schema
