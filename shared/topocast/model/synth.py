"""Synthetic clusters: a regular fat tree as a graph or as a Topograph model (test data, benches, demos).

``levels`` switch tiers, ``nodes_per_leaf`` nodes under each leaf switch, ``fanout`` children per
upper switch, NVLink domains of ``domain_size`` consecutive nodes (72 = one GB200 NVL72 rack; 0 or
None = no domains). Node ``i`` is named by ``name_pattern`` (``str.format`` with ``i``; default
``gpu-<i>`` zero-padded to at least 6 digits) and has instance ID ``i-<i:017x>``. Pure: no cloud, no
randomness unless ``missing_fraction`` asks for nodes without topology (seeded).

``topocast synth`` writes :func:`synthetic_data` as a graph JSON (``render --graph``, ``diff``,
``publish --graph``) or :func:`model_data` as a model YAML (``render --model``).
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator
from typing import Any

from topocast.errors import TopocastError
from topocast.model.hostlist import compact

__all__ = ["graph_data", "model_data", "node_names", "synthetic_data", "tiers_for_one_root"]

#: the Topograph model's annotation of a block's NVLink domain (as :mod:`topocast.providers.model` reads it)
DOMAIN_KEY = "accelerator.topology.test/domain"


def node_names(n: int, name_pattern: str | None = None) -> Iterator[str]:
    """The names of nodes ``0..n-1``; a pattern that does not format or names two nodes alike is an error."""
    if name_pattern is None:
        width = max(6, len(str(n)))
        yield from (f"gpu-{i:0{width}d}" for i in range(n))
        return
    seen: set[str] = set()
    for i in range(n):
        try:
            name = name_pattern.format(i=i)
        except (KeyError, IndexError, ValueError) as exc:
            raise TopocastError(
                f"--name-pattern {name_pattern!r}: {exc!s}; write it with {{i}}, e.g. 'gpu-{{i:05d}}'"
            ) from None
        if name in seen:
            raise TopocastError(f"--name-pattern {name_pattern!r} names two nodes {name!r}: use {{i}} in it")
        seen.add(name)
        yield name


def tiers_for_one_root(n: int, nodes_per_leaf: int, fanout: int, *, at_least: int = 3) -> int:
    """The fewest switch tiers (``at_least`` or more) under which ``n`` nodes have one root switch: each tier
    above the leaves joins ``fanout`` switches of the one below (a fan-out of 1 never joins: ``at_least``)."""
    switches = -(-n // nodes_per_leaf)  # leaves
    tiers = 1
    while switches > 1 and fanout > 1:
        switches = -(-switches // fanout)
        tiers += 1
    return max(tiers, at_least)


def synthetic_data(
    n: int,
    *,
    levels: int = 4,
    nodes_per_leaf: int = 18,
    fanout: int = 8,
    domain_size: int | None = 72,
    missing_fraction: float = 0.0,
    cluster: str = "synthetic",
    seed: int = 7,
    name_pattern: str | None = None,
) -> dict[str, Any]:
    """The graph of ``n`` nodes as plain JSON data (the fields a provider sets; the rest default)."""
    if min(levels, nodes_per_leaf, fanout) < 1:
        raise TopocastError("tiers, nodes per leaf and fan-out must be at least 1")
    rng = random.Random(seed)
    nodes = []
    for i, name in enumerate(node_names(n, name_pattern)):
        leaf = i // nodes_per_leaf
        path = [f"leaf-{leaf:05d}"]
        up = leaf
        for tier in range(1, levels):
            up //= fanout
            path.append(f"t{tier}-{up:05d}")
        node: dict[str, Any] = {"name": name, "id": f"i-{i:017x}"}
        node["instance_type"] = "p6e-gb200.36xlarge"
        if missing_fraction and rng.random() < missing_fraction:
            node["fabric"] = []
        else:
            node["fabric"] = path
        if domain_size:
            node["accelerator"] = f"nvl-{i // domain_size:05d}"
        nodes.append(node)
    return {"schema_version": 1, "cluster": cluster, "provider": "synthetic", "nodes": nodes}


def graph_data(n: int, **shape: Any) -> dict[str, Any]:
    """:func:`synthetic_data` with every field of a node written, as ``render -f graph`` and the graph
    store write them (what a process reading the file sees; no validation here, for benches)."""
    data = synthetic_data(n, **shape)
    data["nodes"] = [
        {
            "name": node["name"],
            "id": node["id"],
            "fabric": node["fabric"],
            "accelerator": node.get("accelerator"),
            "subdomain": None,
            "accelerator_pending": False,
            "zone": None,
            "instance_type": node["instance_type"],
            "labels": {},
        }
        for node in data["nodes"]
    ]
    data["switch_names"] = {}
    return data


def model_data(n: int, **shape: Any) -> dict[str, Any]:
    """The same cluster as a Topograph simulation model: ``switches`` (each upper switch's children) and one
    block per (leaf switch, NVLink domain) with its nodes as hostlists; nodes without topology are a block
    without a switch."""
    data = synthetic_data(n, **shape)
    children: dict[str, set[str]] = {}
    blocks: dict[tuple[str | None, str | None], list[str]] = {}
    for node in data["nodes"]:
        path = node["fabric"]
        for below, above in itertools.pairwise(path):
            children.setdefault(above, set()).add(below)
        blocks.setdefault((path[0] if path else None, node.get("accelerator")), []).append(node["name"])
    switches = {sw: {"switches": sorted(kids)} for sw, kids in sorted(children.items())}
    out_blocks = []
    for (leaf, domain), names in blocks.items():
        block: dict[str, Any] = {"nodes": compact(names)}
        if leaf is not None:
            block = {"switch": leaf, **block}
        if domain is not None:
            block["annotations"] = {DOMAIN_KEY: domain}
        out_blocks.append(block)
    return {"switches": switches, "blocks": out_blocks}
