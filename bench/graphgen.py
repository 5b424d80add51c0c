"""Synthetic graph files for the benchmarks, written as plain JSON.

The fat tree of :func:`topocast.model.synth.synthetic_data` (what ``topocast synth`` writes; ``levels``
switch tiers, ``nodes_per_leaf`` nodes under each leaf, ``fanout`` children per upper switch, NVLink
domains of ``domain_size`` consecutive nodes), with every field of a node written
(:func:`topocast.model.synth.graph_data`), as ``topocast render -f graph`` and the graph store write them.
Only this parent process imports topocast; the benched processes read the file.
"""

from __future__ import annotations

import json
from pathlib import Path

from topocast.model.synth import graph_data

__all__ = ["graph_data", "write_graph"]


def write_graph(path: Path, n: int, **shape: float) -> Path:
    path.write_text(json.dumps(graph_data(n, **shape), separators=(",", ":")))
    return path
