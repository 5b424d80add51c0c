"""Kueue ``Topology`` for Topology Aware Scheduling (``kueue.x-k8s.io``).

One cluster-scoped object whose ``spec.levels`` list the node labels topocast
writes, coarsest first, ``kubernetes.io/hostname`` last (see
:mod:`topocast.renderers.k8s_topology`; tiers that an accelerator domain straddles
are left out so that Kueue never splits a domain). ``options.kueue_api_version`` picks the
API version the installed Kueue serves: ``v1beta2`` (Kueue >= 0.15),
``v1beta1`` (0.14) or ``v1alpha1`` (0.9 - 0.13). A ResourceFlavor must still
reference it through ``spec.topologyName``. ``levels`` are immutable: when the
fabric depth changes, the object must be deleted and recreated.
"""

from __future__ import annotations

from topocast.model.graph import TopologyGraph
from topocast.renderers.base import Artifact, FormatRenderer, Renderer, RenderOptions
from topocast.renderers.k8s_common import dump_yaml
from topocast.renderers.k8s_topology import topology_levels, topology_object

FILENAME = "kueue-topology.yaml"
MEDIA_TYPE = "application/yaml"
FORMAT = "kueue"
GROUP = "kueue.x-k8s.io"
#: The first v1alpha1 Topology CRD (Kueue 0.9) allowed at most 8 levels; later ones allow 16.
OLD_ALPHA_MAX_LEVELS = 8


def render(graph: TopologyGraph, options: RenderOptions) -> Artifact:
    levels = topology_levels(graph, options, "Kueue")
    warnings = list(levels.warnings)
    if options.kueue_api_version == "v1alpha1" and len(levels.keys) > OLD_ALPHA_MAX_LEVELS:
        warnings.append(
            f"{len(levels.keys)} levels: early Kueue releases that serve only kueue.x-k8s.io/v1alpha1 "
            f"accept at most {OLD_ALPHA_MAX_LEVELS}"
        )
    obj = topology_object(f"{GROUP}/{options.kueue_api_version}", options.topology_object_name, levels.keys)
    return Artifact(FORMAT, FILENAME, dump_yaml([obj]), MEDIA_TYPE, len(graph.nodes), [obj], warnings)


RENDERER: Renderer = FormatRenderer(
    FORMAT, FILENAME, MEDIA_TYPE, "kubernetes-objects", ("labels", "kueue_api_version", "topology_object_name"), render
)
