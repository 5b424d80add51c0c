"""Synthetic graph files for the benchmarks, written as plain JSON (no topocast import needed).

A regular fat tree: ``levels`` switch tiers, ``nodes_per_leaf`` nodes under each leaf,
``fanout`` children per upper switch, NVLink domains of ``domain_size`` consecutive nodes
(72 = one GB200 NVL72 rack). Node ``i`` is ``gpu-<i:06d>`` with instance ID ``i-<hex>``.
Every field of a node is written, as ``topocast render -f graph`` and the graph store write them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def graph_data(
    n: int, *, levels: int = 4, nodes_per_leaf: int = 18, fanout: int = 8, domain_size: int = 72
) -> dict[str, Any]:
    width = max(6, len(str(n)))
    nodes = []
    for i in range(n):
        leaf = i // nodes_per_leaf
        path = [f"leaf-{leaf:05d}"]
        up = leaf
        for tier in range(1, levels):
            up //= fanout
            path.append(f"t{tier}-{up:05d}")
        nodes.append(
            {
                "name": f"gpu-{i:0{width}d}",
                "id": f"i-{i:017x}",
                "fabric": path,
                "accelerator": f"nvl-{i // domain_size:05d}",
                "subdomain": None,
                "accelerator_pending": False,
                "zone": None,
                "instance_type": "p6e-gb200.36xlarge",
                "labels": {},
            }
        )
    return {"schema_version": 1, "cluster": "synthetic", "provider": "synthetic", "nodes": nodes, "switch_names": {}}


def write_graph(path: Path, n: int, **shape: int) -> Path:
    path.write_text(json.dumps(graph_data(n, **shape), separators=(",", ":")))
    return path
