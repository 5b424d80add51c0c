"""Synthetic cluster graphs for benchmarks, demos and property tests.

A regular fat tree: ``levels`` switch tiers, ``nodes_per_leaf`` nodes under each
leaf, ``fanout`` children per upper switch, NVLink domains of ``domain_size``
consecutive nodes (72 = one GB200 NVL72 rack). Pure: no cloud, no randomness
unless ``missing_fraction`` asks for nodes without topology (seeded).
"""

from __future__ import annotations

import random
from typing import Any

from topocast.graph import TopologyGraph


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
) -> dict[str, Any]:
    """The graph of ``n`` nodes as plain JSON data; node ``i`` is ``gpu-<i:06d>`` with instance ID ``i-<hex>``."""
    rng = random.Random(seed)
    width = max(6, len(str(n)))
    nodes = []
    for i in range(n):
        leaf = i // nodes_per_leaf
        path = [f"leaf-{leaf:05d}"]
        up = leaf
        for tier in range(1, levels):
            up //= fanout
            path.append(f"t{tier}-{up:05d}")
        node: dict[str, Any] = {"name": f"gpu-{i:0{width}d}", "id": f"i-{i:017x}"}
        node["instance_type"] = "p6e-gb200.36xlarge"
        if missing_fraction and rng.random() < missing_fraction:
            node["fabric"] = []
        else:
            node["fabric"] = path
        if domain_size:
            node["accelerator"] = f"nvl-{i // domain_size:05d}"
        nodes.append(node)
    return {"schema_version": 1, "cluster": cluster, "provider": "synthetic", "nodes": nodes}


def synthetic_graph(n: int, **shape: Any) -> TopologyGraph:
    """:func:`synthetic_data` as the validated model (the same keyword arguments)."""
    # model_construct would skip validation; benchmarks and demos want the real validated model
    return TopologyGraph.model_validate(synthetic_data(n, **shape))
