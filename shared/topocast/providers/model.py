"""Topograph simulation models (YAML) as a topology source.

Operators who already describe clusters in Topograph's model format
(``switches`` map + ``blocks`` list, see Topograph ``docs/modeling.md``) can
render them with topocast directly::

    switches:
      S1: {switches: [S2, S3]}
    blocks:
    - switch: S2
      nodes: ["I[21-22]", "I25"]
      annotations: {accelerator.topology.test/domain: nvl2}

The same validation rules apply as in Topograph: a switch with two parents, a
node in two blocks, a cycle, an unknown switch, a ``name:`` that disagrees with
its key and an empty block are errors. A node that breaks a graph rule on its own (an unsafe
host or switch name, a host named like a switch) is set aside with the reason
(:func:`topocast.model.placement.place_nodes`), the rest renders.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from topocast.errors import InvalidGraphError, TopocastError
from topocast.model.graph import Node, TopologyGraph
from topocast.model.hostlist import expand, name_budget
from topocast.model.names import check_node_name
from topocast.model.placement import place_nodes
from topocast.safeio.limits import MAX_YAML_BYTES, read_capped
from topocast.safeio.yaml_input import load_yaml

DOMAIN_KEY = "accelerator.topology.test/domain"
SUBDOMAIN_KEY = "accelerator.topology.test/sub-domain"
ZONE_KEY = "topology.kubernetes.io/zone"
REGION_KEY = "topology.kubernetes.io/region"


def _as_map(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidGraphError(f"{where} must be a mapping")
    return value


def model_to_graph(
    model: Any,
    source: str = "model",
    cluster: str = "model",
    instances: dict[str, str] | None = None,
    instance_id_prefix: str = "",
) -> TopologyGraph:
    """Convert a parsed model to a graph.

    ``instances`` (instance ID -> node name), when given, selects and renames
    nodes the way a Topograph request does: model hosts not requested are left
    out, requested instances the model lacks become nodes without topology.
    ``instance_id_prefix`` reproduces Topograph's test provider (``i-<host>``).
    """
    with name_budget(what=source):  # one node-name cap across every block, not per block
        return _model_to_graph(model, source, cluster, instances, instance_id_prefix)


def _model_to_graph(
    model: Any, source: str, cluster: str, instances: dict[str, str] | None, instance_id_prefix: str
) -> TopologyGraph:
    top = _as_map(model, source)
    unknown = set(top) - {"switches", "blocks", "capacity_blocks"}
    if unknown:
        raise InvalidGraphError(f"{source}: unknown top-level key(s) {sorted(unknown)}")
    switches = _as_map(top.get("switches"), f"{source}: switches")
    parent: dict[str, str] = {}
    sw_labels: dict[str, dict[str, str]] = {}
    for sid, spec in switches.items():
        sid = str(sid)
        spec = _as_map(spec, f"{source}: switch {sid!r}")
        if "name" in spec and str(spec["name"]) != sid:
            raise InvalidGraphError(f"{source}: switch {sid!r} has mismatching name {spec['name']!r}")
        sw_labels[sid] = {str(k): str(v) for k, v in _as_map(spec.get("labels"), f"switch {sid}").items()}
        for child in spec.get("switches") or []:
            child = str(child)
            if child in parent:
                raise InvalidGraphError(f"{source}: switch {child!r} has two parents ({parent[child]!r} and {sid!r})")
            parent[child] = sid
    known = set(switches) | set(parent)  # leaf switches named only as children are auto-created
    for sid in known:  # cycle check: walking up must terminate
        seen = {sid}
        cur = sid
        while cur in parent:
            cur = parent[cur]
            if cur in seen:
                raise InvalidGraphError(f"{source}: switch {sid!r} is part of a cycle")
            seen.add(cur)

    blocks = top.get("blocks") or top.get("capacity_blocks") or []
    if not isinstance(blocks, list):
        raise InvalidGraphError(f"{source}: blocks must be a list")
    hosts: dict[str, dict[str, Any]] = {}
    for i, block in enumerate(blocks):
        block = _as_map(block, f"{source}: blocks[{i}]")
        leaf = block.get("switch")
        if leaf is not None:
            leaf = str(leaf)
            if leaf not in known:
                raise InvalidGraphError(f"{source}: blocks[{i}] references unknown switch {leaf!r}")
        try:
            names = expand([str(n) for n in block.get("nodes") or []])
        except TopocastError as exc:
            raise InvalidGraphError(f"{source}: blocks[{i}]: {exc}") from None
        if not names:
            raise InvalidGraphError(f"{source}: blocks[{i}] has no nodes")
        path: list[str] = []
        up: str | None = leaf
        while up is not None:
            path.append(up)
            up = parent.get(up)
        labels: dict[str, str] = {REGION_KEY: "none"}
        for sw in reversed(path):  # root first, so closer switches override
            labels.update(sw_labels.get(sw, {}))
        labels.update({str(k): str(v) for k, v in _as_map(block.get("labels"), f"blocks[{i}]").items()})
        ann = {str(k): str(v) for k, v in _as_map(block.get("annotations"), f"blocks[{i}]").items()}
        for host in names:
            if host in hosts:
                raise InvalidGraphError(f"{source}: node {host!r} is in two blocks")
            hosts[host] = {
                "fabric": path,
                "accelerator": ann.get(DOMAIN_KEY) or None,
                "subdomain": ann.get(SUBDOMAIN_KEY) or None,
                "zone": labels.get(ZONE_KEY),
                "labels": labels,
            }

    nodes: list[Node] = []
    if instances is None:
        for host, info in hosts.items():
            nodes.append(Node(name=host, id=instance_id_prefix + host, **info))
    else:
        by_id = {instance_id_prefix + h: h for h in hosts}
        for iid, name in instances.items():
            owner = by_id.get(iid)
            info = hosts[owner] if owner is not None else {}
            nodes.append(Node(name=name, id=iid, **info))
    # the model's own structure (two parents, a cycle, a node in two blocks) is an error above; a node
    # that breaks a graph rule on its own (an unsafe name or switch, a host named like a switch) is set
    # aside with the reason, and the rest of the model renders
    try:
        check_node_name(cluster, "the graph's cluster name")  # not one node's fault: an error
    except TopocastError as exc:
        raise InvalidGraphError(f"{source}: {exc}") from None
    return place_nodes(cluster, "model", nodes)


def load_model(path: str | Path, cluster: str | None = None, **kwargs: Any) -> TopologyGraph:
    p = Path(path)
    try:
        with p.open("rb") as fh:
            text = read_capped(fh, MAX_YAML_BYTES, str(p), InvalidGraphError)
    except OSError as exc:
        raise InvalidGraphError(f"{p}: cannot read ({exc.strerror})") from None
    data = load_yaml(text, str(p), InvalidGraphError)
    return model_to_graph(data, str(p), cluster or p.stem, **kwargs)
