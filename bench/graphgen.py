"""Synthetic graph files for the benchmarks, written as plain JSON.

The fat tree of :func:`topocast_sim.synthetic.synthetic_data` (``levels`` switch tiers,
``nodes_per_leaf`` nodes under each leaf, ``fanout`` children per upper switch, NVLink domains of
``domain_size`` consecutive nodes), with every field of a node written, as ``topocast render -f graph``
and the graph store write them. Only this parent process imports topocast; the benched processes
read the file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from topocast_sim.synthetic import synthetic_data


def graph_data(n: int, **shape: int) -> dict[str, Any]:
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


def write_graph(path: Path, n: int, **shape: int) -> Path:
    path.write_text(json.dumps(graph_data(n, **shape), separators=(",", ":")))
    return path
