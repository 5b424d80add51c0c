"""Renderer registry: graph in, scheduler config out.

Each format is a module exposing ``FILENAME``, ``MEDIA_TYPE`` and
``render(graph, options) -> Artifact``. Modules load lazily on first use.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from topocast.errors import RenderError
from topocast.graph import TopologyGraph
from topocast.renderers.base import Artifact, RenderOptions

#: format name -> module. The order is the order ``--format all`` renders in.
RENDERERS: dict[str, str] = {
    "slurm-tree": "topocast.renderers.slurm_tree",
    "slurm-block": "topocast.renderers.slurm_block",
    "slurm-yaml": "topocast.renderers.slurm_yaml",
    "k8s-labels": "topocast.renderers.k8s_labels",
    "kueue": "topocast.renderers.kueue",
    "kai": "topocast.renderers.kai",
    "volcano": "topocast.renderers.volcano",
    "slinky": "topocast.renderers.slinky",
    "graph": "topocast.renderers.graph_json",
    "html": "topocast.renderers.html",
}


def renderer_module(fmt: str) -> ModuleType:
    try:
        return importlib.import_module(RENDERERS[fmt])
    except KeyError:
        raise RenderError(f"unknown format {fmt!r}; known: {', '.join(RENDERERS)}") from None


def render(graph: TopologyGraph, fmt: str, options: RenderOptions | None = None) -> Artifact:
    return renderer_module(fmt).render(graph, options or RenderOptions())


__all__ = ["RENDERERS", "Artifact", "RenderOptions", "render", "renderer_module"]
