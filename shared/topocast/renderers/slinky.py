"""Slinky (Slurm on Kubernetes): the topology file as a ConfigMap, and per-node spec annotations.

slurm-operator mounts extra config files from a ConfigMap (``<release>-config-extra``
by default) into ``/etc/slurm``; we render that ConfigMap with one key
(``options.slinky.key``, e.g. ``topology.conf``) holding the Slurm artifact named
by ``options.slinky.content`` (tree, block or topology.yaml, rendered by the
Slurm renderers with the same options, so ``skeleton_only`` applies too).

The object has no timestamps, so equal graphs render byte-identical ConfigMaps;
the publisher adds the generation and time when it writes. Annotations mirror
Topograph's ``topograph.run/*`` set under ``topocast.dev/``; ``topocast.dev/sha256``
lets a publisher skip the write when the content is unchanged.

:func:`node_annotations` gives the ``topology.slinky.slurm.net/spec`` annotation
for each node (dynamic nodes: the operator pushes it into Slurm).
"""

from __future__ import annotations

import re
from typing import Any

from topocast import renderers
from topocast.errors import RenderError
from topocast.graph import TopologyGraph
from topocast.renderers.base import Artifact, RenderOptions
from topocast.renderers.k8s_common import (
    MANAGED_BY,
    MANAGED_BY_LABEL,
    check_configmap_key,
    check_dns_label,
    check_dns_subdomain,
    dump_yaml,
)

FILENAME = "slinky-configmap.yaml"
MEDIA_TYPE = "application/yaml"
FORMAT = "slinky"
SPEC_ANNOTATION = "topology.slinky.slurm.net/spec"
ANNOTATION_PREFIX = "topocast.dev/"
#: etcd / API server limit for a ConfigMap's data.
MAX_CONFIGMAP_BYTES = 1024 * 1024
PLUGINS = {"slurm-tree": "topology/tree", "slurm-block": "topology/block"}

_BLOCK_SIZES = re.compile(r"^BlockSizes=(\S+)$", re.MULTILINE)


def _block_sizes(content_format: str, content: str, options: RenderOptions) -> str | None:
    if options.block_sizes:
        return ",".join(str(s) for s in options.block_sizes)
    if content_format == "slurm-block":  # sizes were inferred: report what the file says
        m = _BLOCK_SIZES.search(content)
        return m.group(1) if m else None
    return None


def configmap(graph: TopologyGraph, options: RenderOptions) -> tuple[dict[str, Any], list[str]]:
    """The ConfigMap object and the warnings of the Slurm artifact inside it."""
    s = options.slinky
    check_dns_label(s.namespace, "slinky.namespace")
    check_dns_subdomain(s.configmap, "slinky.configmap")
    check_configmap_key(s.key, "slinky.key")
    inner = renderers.render(graph, s.content, options)
    size = len(inner.content.encode())
    if size > MAX_CONFIGMAP_BYTES:
        raise RenderError(
            f"{s.content} output is {size} bytes; a ConfigMap holds at most {MAX_CONFIGMAP_BYTES} bytes "
            f"({s.namespace}/{s.configmap} key {s.key})"
        )
    annotations = {
        f"{ANNOTATION_PREFIX}managed-by": MANAGED_BY,
        f"{ANNOTATION_PREFIX}engine": FORMAT,
        f"{ANNOTATION_PREFIX}content-format": s.content,
        f"{ANNOTATION_PREFIX}sha256": inner.sha256,
    }
    if s.content in PLUGINS:
        annotations[f"{ANNOTATION_PREFIX}plugin"] = PLUGINS[s.content]
    sizes = _block_sizes(s.content, inner.content, options)
    if sizes:
        annotations[f"{ANNOTATION_PREFIX}block-sizes"] = sizes
    if options.skeleton_only:
        annotations[f"{ANNOTATION_PREFIX}skeleton-only"] = "true"
    obj = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": s.configmap,
            "namespace": s.namespace,
            "labels": {MANAGED_BY_LABEL: MANAGED_BY},
            "annotations": annotations,
        },
        "data": {s.key: inner.content},
    }
    return obj, list(inner.warnings)


def node_annotations(graph: TopologyGraph, options: RenderOptions) -> dict[str, dict[str, str]]:
    """``{node: {"topology.slinky.slurm.net/spec": "topo:sw3:sw21:sw11,..."}}``; nodes with an
    empty spec are left out (Topograph skips them too: an empty spec breaks slurmd registration)."""
    # Imported here: only publishers of dynamic nodes need it, and the ConfigMap must not depend on it.
    from topocast.renderers.slurm_specs import node_specs

    specs = node_specs(graph, options, options.slinky.content)
    return {node: {SPEC_ANNOTATION: spec} for node, spec in sorted(specs.items()) if spec}


def render(graph: TopologyGraph, options: RenderOptions) -> Artifact:
    obj, warnings = configmap(graph, options)
    return Artifact(FORMAT, FILENAME, dump_yaml([obj]), MEDIA_TYPE, len(graph.nodes), [obj], warnings)
