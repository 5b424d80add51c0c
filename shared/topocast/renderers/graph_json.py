"""The normalized graph itself, as canonical pretty JSON (``--format graph``)."""

from __future__ import annotations

from topocast.model.graph import TopologyGraph, dump_graph
from topocast.renderers.base import Artifact, FormatRenderer, Renderer, RenderOptions

FILENAME = "graph.json"
MEDIA_TYPE = "application/json"


def render(graph: TopologyGraph, options: RenderOptions) -> Artifact:
    return Artifact("graph", FILENAME, dump_graph(graph), MEDIA_TYPE, len(graph.nodes))


RENDERER: Renderer = FormatRenderer("graph", FILENAME, MEDIA_TYPE, "file", (), render)
