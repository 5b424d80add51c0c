"""Per-node Slurm topology specs for Slinky dynamic nodes (``topology.slinky.slurm.net/spec``).

A dynamic node joins the topology through ``Topology=<topology>:<unit>[,...]``.
The spec must name units that exist in the file Slinky publishes, so it is
derived from the same layout as that file:

* ``slurm-tree``: ``default:<root-first switch names joined by ':'>`` (e.g.
  ``default:core:spine1:leaf3``). We use the names printed in topology.conf
  (display names when the graph has them); Topograph uses raw IDs there, which
  names switches the file does not define.
* ``slurm-block``: ``default:<block name>`` (e.g. ``default:block001``).
* ``slurm-yaml``: one ``<topology>:<unit>`` per topology containing the node,
  comma-joined in topology-name order (e.g. ``topo1:IB2:S1:S3,topo3:block2``).

A node found in no topology gets ``""`` (the Slinky engine skips empty specs).
"""

from __future__ import annotations

from typing import Literal

from topocast.errors import RenderError
from topocast.model.graph import TopologyGraph
from topocast.renderers.base import RenderOptions
from topocast.renderers.slurm_block import cluster_layout
from topocast.renderers.slurm_tree import node_paths
from topocast.renderers.slurm_yaml import build_units

Content = Literal["slurm-tree", "slurm-block", "slurm-yaml"]


def node_specs(graph: TopologyGraph, options: RenderOptions, content: str) -> dict[str, str]:
    """node name -> Slinky spec string, for every node of the graph."""
    specs = dict.fromkeys((n.name for n in graph.nodes), "")
    if content == "slurm-tree":
        specs.update({n: f"default:{p}" for n, p in node_paths(graph).items()})
    elif content == "slurm-block":
        specs.update({n: f"default:{b}" for n, b in cluster_layout(graph, options).node_block().items()})
    elif content == "slurm-yaml":
        units, _ = build_units(graph, options)
        parts: dict[str, list[str]] = {}
        for unit in units:
            for node, unit_path in unit.parents.items():
                parts.setdefault(node, []).append(f"{unit.name}:{unit_path}")
        specs.update({n: ",".join(p) for n, p in parts.items()})
    else:
        raise RenderError(f"unknown Slurm content {content!r}; expected slurm-tree, slurm-block or slurm-yaml")
    return specs
