"""Renderers: graph in, scheduler config out, looked up by format name.

Each format is a module exposing one :class:`~topocast.renderers.base.Renderer` as ``RENDERER``
(name, file, media type, target ``kind``, the options it ``reads``, and a pure ``render(graph,
options) -> Artifact``), registered below with one line on the one :class:`topocast.registry.Registry`.
Modules load lazily on first use. Every list of formats elsewhere (CLI help and choices, the
Kubernetes publisher's and controller's formats) is derived from this table with :func:`formats`;
the ones that cannot import it (Terraform's ``var.formats`` validation, the docs) are checked against
it by ``tests/test_renderer_registry.py``.

:func:`render_many` renders several formats of one graph in one pass: the derived
views (switch tree, domains, block layout) are built once and shared by every
format (:func:`topocast.model.fabric.shared_views`), and the garbage collector is paused
while the many small per-node containers are built.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from topocast.errors import RenderError
from topocast.model.fabric import shared_views
from topocast.model.gc_pause import paused_gc
from topocast.model.graph import TopologyGraph
from topocast.registry import Registry
from topocast.renderers.base import (
    KUBERNETES_KINDS,
    OBJECTS_WANTED,
    Artifact,
    Renderer,
    RendererKind,
    RenderOptions,
)

#: format name -> ``"module:RENDERER"`` (or a Renderer). The order is the order ``--format all`` renders in.
RENDERERS: dict[str, str | Renderer] = {
    "slurm-tree": "topocast.renderers.slurm_tree:RENDERER",
    "slurm-block": "topocast.renderers.slurm_block:RENDERER",
    "slurm-yaml": "topocast.renderers.slurm_yaml:RENDERER",
    "k8s-labels": "topocast.renderers.k8s_labels:RENDERER",
    "kueue": "topocast.renderers.kueue:RENDERER",
    "kai": "topocast.renderers.kai:RENDERER",
    "volcano": "topocast.renderers.volcano:RENDERER",
    "slinky": "topocast.renderers.slinky:RENDERER",
    "graph": "topocast.renderers.graph_json:RENDERER",
    "html": "topocast.renderers.html:RENDERER",
}

REGISTRY: Registry[Renderer] = Registry("format", RENDERERS, error=RenderError)


def register_renderer(name: str, renderer: str | Renderer) -> None:
    """Add (or replace) a format; ``renderer`` is ``"module:attribute"`` or the Renderer itself."""
    REGISTRY.register(name, renderer)


def renderer(fmt: str) -> Renderer:
    """The renderer of format ``fmt``; ``RenderError`` naming the known formats when there is none."""
    return REGISTRY.get(fmt)


def formats(*kinds: RendererKind) -> tuple[str, ...]:
    """Every format (in ``--format all`` order), or those of the given kinds (imports their modules)."""
    if not kinds:
        return tuple(RENDERERS)
    return tuple(name for name in RENDERERS if renderer(name).kind in kinds)


def kubernetes_formats() -> tuple[str, ...]:
    """The formats written to a Kubernetes API: labels first, then the objects (the publisher's order)."""
    return formats(*KUBERNETES_KINDS)


def render(graph: TopologyGraph, fmt: str, options: RenderOptions | None = None) -> Artifact:
    with paused_gc():
        return renderer(fmt).render(graph, options or RenderOptions())


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
    chosen = [renderer(f) for f in formats]  # unknown formats fail before any work
    token = OBJECTS_WANTED.set(objects)
    try:
        with one_pass():
            if objects:
                return [r.render(graph, opts) for r in chosen]
            return [dataclasses.replace(r.render(graph, opts), objects=[]) for r in chosen]
    finally:
        OBJECTS_WANTED.reset(token)


__all__ = [
    "RENDERERS",
    "Artifact",
    "RenderOptions",
    "Renderer",
    "formats",
    "kubernetes_formats",
    "one_pass",
    "register_renderer",
    "render",
    "render_many",
    "renderer",
]
