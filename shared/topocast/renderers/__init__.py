"""Renderer registry: graph in, scheduler config out.

Each format is a module exposing ``FILENAME``, ``MEDIA_TYPE`` and
``render(graph, options) -> Artifact``. Modules load lazily on first use.

:func:`render_many` renders several formats of one graph in one pass: the derived
views (switch tree, domains, block layout) are built once and shared by every
format (:func:`topocast.model.fabric.shared_views`), and the garbage collector is paused
while the many small per-node containers are built.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from types import ModuleType

from topocast.errors import RenderError
from topocast.model.fabric import shared_views
from topocast.model.gc_pause import paused_gc
from topocast.model.graph import TopologyGraph
from topocast.renderers.base import OBJECTS_WANTED, Artifact, RenderOptions

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
    with paused_gc():
        return renderer_module(fmt).render(graph, options or RenderOptions())


@contextmanager
def one_pass() -> Iterator[None]:
    """Inside the block, renders of one graph share its derived views and run with the GC paused.

    For callers that render format by format themselves (e.g. to handle each one's errors).
    """
    with shared_views(), paused_gc():
        yield


def render_many(
    graph: TopologyGraph, formats: Sequence[str], options: RenderOptions | None = None, *, objects: bool = True
) -> list[Artifact]:
    """Every format of ``formats`` (in that order), sharing one pass over the graph.

    ``objects=False`` drops each artifact's API objects as soon as it is rendered (callers that
    only write files: at 100k nodes the label and HyperNode objects are a fifth of the peak memory).
    """
    opts = options or RenderOptions()
    modules = [renderer_module(f) for f in formats]  # unknown formats fail before any work
    token = OBJECTS_WANTED.set(objects)
    try:
        with one_pass():
            if objects:
                return [m.render(graph, opts) for m in modules]
            return [dataclasses.replace(m.render(graph, opts), objects=[]) for m in modules]
    finally:
        OBJECTS_WANTED.reset(token)


__all__ = ["RENDERERS", "Artifact", "RenderOptions", "one_pass", "render", "render_many", "renderer_module"]
