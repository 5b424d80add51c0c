"""Test-side loaders for Topograph's conformance data (``shared/conformance/topograph``).

Topograph builds graphs in Go test helpers and simulated providers; the
conformance directory has them transcribed as JSON (``graphs/``, ``domainmaps/``)
or as simulation models. These helpers turn each into a :class:`TopologyGraph`
the way the corresponding Topograph code path would see it, including the
provider-specific twists of the ``*-sim`` providers (OCI switch-name
normalization, Nscale ``trimTiers``, Lambda clique suffix, GCP subblock domains).
Nothing here is product code: it only exists to feed the conformance tests.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from topocast.model.graph import TopologyGraph, graph_from_data
from topocast.model.hostlist import expand
from topocast.providers.model import model_to_graph
from topocast.renderers.base import RenderOptions

GRAPH_FORMAT_PREFIX = "Graph JSON"
DOMAINMAP_FORMAT_PREFIX = "DomainMap JSON"


def _read(path: Path) -> dict[str, Any]:
    data = json.loads(path.read_text())
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object")
    return data


def _graph(nodes: list[dict[str, Any]], source: str, switch_names: dict[str, str] | None = None) -> TopologyGraph:
    return graph_from_data(
        {"cluster": "conformance", "provider": "topograph", "nodes": nodes, "switch_names": switch_names or {}},
        source,
    )


# ----- graphs/*.json ------------------------------------------------------------------


def load_graph_json(path: Path, drop: tuple[str, ...] = ()) -> TopologyGraph:
    """A transcribed Topograph graph: ``tiers`` forest + ``domains`` map.

    ``drop`` removes accelerator domains (e.g. ``ib-testset`` without ``B2``).
    """
    data = _read(path)
    if not str(data.get("_format", "")).startswith(GRAPH_FORMAT_PREFIX):
        raise ValueError(f"{path}: not a transcribed graph ({data.get('_format')!r})")
    nodes: dict[str, dict[str, Any]] = {}
    names: dict[str, str] = {}

    def walk(vertices: list[dict[str, Any]] | None, above: list[str]) -> None:
        for v in vertices or []:
            if "children" in v:  # a switch
                if v.get("name"):
                    names[v["id"]] = v["name"]
                walk(v["children"], [v["id"], *above])
            else:  # a compute node: id = instance ID, name = node name
                nodes[v["name"]] = {"name": v["name"], "id": v["id"], "fabric": list(above)}

    walk(data.get("tiers"), [])
    for domain, hosts in (data.get("domains") or {}).items():
        if domain in drop:
            continue
        for host, info in hosts.items():
            node = nodes.setdefault(host, {"name": host, "id": info.get("instanceId") or None})
            node["accelerator"] = domain
            node["subdomain"] = info.get("subDomain") or None
    return _graph(list(nodes.values()), str(path), names)


def drop_fabric(graph: TopologyGraph) -> TopologyGraph:
    """The same graph with its ``tiers`` removed (domains only)."""
    data = graph.model_dump()
    for node in data["nodes"]:
        node["fabric"] = []
    return graph_from_data(data, "no-tiers variant")


# ----- domainmaps/*.json --------------------------------------------------------------


def load_domainmap(path: Path) -> tuple[TopologyGraph, dict[str, Any]]:
    """A block-complement domain map; returns the graph and the whole file (for its configs).

    When the file has ``blocks`` (upstream handed a partition-local block list to
    ``complementBlocks``), the graph holds only the domain hosts those blocks own:
    that is exactly the membership complementing sees.
    """
    data = _read(path)
    if not str(data.get("_format", "")).startswith(DOMAINMAP_FORMAT_PREFIX):
        raise ValueError(f"{path}: not a domain map ({data.get('_format')!r})")
    hosts: dict[str, tuple[str, str | None]] = {}
    for domain, groups in data["domains"].items():
        for group in groups:
            for host in expand(group["hosts"]):
                hosts[host] = (domain, group.get("subDomain"))
    if "blocks" in data:
        owned = {h for b in data["blocks"] for h in expand(b["nodes"]) if hosts.get(h, ("",))[0] == b["name"]}
        hosts = {h: v for h, v in hosts.items() if h in owned}
    nodes = [{"name": h, "accelerator": d, "subdomain": s} for h, (d, s) in hosts.items()]
    return _graph(nodes, str(path)), data


# ----- Topograph engine params -> RenderOptions ----------------------------------------


def _topology(spec: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"plugin": spec["plugin"], "cluster_default": bool(spec.get("clusterDefault"))}
    if "nodes" in spec:
        out["nodes"] = spec["nodes"]
    if spec.get("blockSizes"):
        out["block_sizes"] = spec["blockSizes"]
    if spec.get("blockName"):
        out["block_name"] = _block_name(spec["blockName"])
    return out


def _block_name(spec: dict[str, str]) -> dict[str, str]:
    return {"node_name_regexp": spec["nodeNameRegexp"], "format": spec["format"]}


def options_from_params(params: dict[str, Any], skeleton: bool = False) -> RenderOptions:
    """Topograph slurm/slinky engine params (camelCase) as our options (with Topograph's own rules)."""
    data: dict[str, Any] = {"skeleton_only": skeleton, "topograph_compat": True}
    if params.get("blockSizes"):
        data["block_sizes"] = params["blockSizes"]
    if params.get("blockName"):
        data["block_name"] = _block_name(params["blockName"])
    if params.get("topologies"):
        data["topologies"] = {k: _topology(v) for k, v in params["topologies"].items()}
    return RenderOptions.model_validate(data)


# ----- simulation models ------------------------------------------------------------


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def graph_from_test_provider(model_path: Path) -> TopologyGraph:
    """Topograph's ``test`` provider: every model host, instance ID ``i-<host>``."""
    return model_to_graph(load_yaml(model_path), str(model_path), instance_id_prefix="i-")


def sim_graph(
    model_path: Path,
    instances: dict[str, str] | None,
    provider: str,
    trim_tiers: int = 0,
) -> TopologyGraph:
    """A ``<provider>-sim`` graph: instance ID = model host; ``instances`` maps IDs to node names.

    ``None`` instances = every model host under its own name (slinky/k8s engines list them all).
    """
    graph = model_to_graph(load_yaml(model_path), str(model_path), instances=instances)
    data = graph.model_dump()
    for node in data["nodes"]:
        if trim_tiers and node["fabric"]:
            node["fabric"] = node["fabric"][: max(0, len(node["fabric"]) - trim_tiers)]
        if provider == "lambdai" and node["accelerator"]:
            node["accelerator"] = f"{node['accelerator']}.simulation"  # domain_id + "." + clique_id
        if provider == "gcp":
            node["accelerator"] = node["fabric"][0] if node["fabric"] else None  # the subblock
            node["subdomain"] = None
    if provider == "oci":
        data["switch_names"] = oci_switch_names(data["nodes"])
    return graph_from_data(data, str(model_path))


def oci_switch_names(nodes: list[dict[str, Any]]) -> dict[str, str]:
    """OCI normalization: instances sorted by root-first path then ID; each new switch of
    tier ``t`` (leaf = 0) in that order is named ``switch.<t+1>.<n>``."""
    ordered = sorted((tuple(reversed(n["fabric"])), n["id"], n["fabric"]) for n in nodes if n["fabric"])
    names: dict[str, str] = {}
    count: dict[int, int] = {}
    for _, _, fabric in ordered:
        for tier, sw in enumerate(fabric):
            if sw not in names:
                count[tier] = count.get(tier, 0) + 1
                names[sw] = f"switch.{tier + 1}.{count[tier]}"
    return names
