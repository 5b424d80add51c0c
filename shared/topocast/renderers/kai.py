"""KAI Scheduler ``Topology`` (``kai.scheduler/v1alpha1``, cluster-scoped).

Same levels as the Kueue object (one computation, in
:mod:`topocast.renderers.k8s_topology`). Workloads select it with the
``kai.scheduler/topology`` annotation and name a level in
``kai.scheduler/topology-required-placement`` / ``-preferred-placement``.
"""

from __future__ import annotations

from topocast.model.graph import TopologyGraph
from topocast.renderers.base import Artifact, FormatRenderer, Renderer, RenderOptions
from topocast.renderers.k8s_common import dump_yaml
from topocast.renderers.k8s_topology import topology_levels, topology_object

FILENAME = "kai-topology.yaml"
MEDIA_TYPE = "application/yaml"
FORMAT = "kai"
API_VERSION = "kai.scheduler/v1alpha1"


def render(graph: TopologyGraph, options: RenderOptions) -> Artifact:
    levels = topology_levels(graph, options, "KAI")
    obj = topology_object(API_VERSION, options.topology_object_name, levels.keys)
    return Artifact(FORMAT, FILENAME, dump_yaml([obj]), MEDIA_TYPE, len(graph.nodes), [obj], list(levels.warnings))


RENDERER: Renderer = FormatRenderer(
    FORMAT, FILENAME, MEDIA_TYPE, "kubernetes-objects", ("labels", "topology_object_name"), render
)
