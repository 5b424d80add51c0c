"""Slinky (Slurm on Kubernetes): the topology file as a ConfigMap, and per-node spec annotations.

slurm-operator's ``slurm`` Helm chart renders the values' ``configFiles`` map into
the ConfigMap ``<fullname>-config-extra`` and mounts it into ``/etc/slurm`` (the
Controller's ``configFileRefs``), and only when ``configFiles`` is non-empty; we
render that ConfigMap with one key (``options.slinky.key``: ``topology.conf`` or
``topology.yaml``) holding the Slurm artifact named by ``options.slinky.content``
(tree, block or topology.yaml, rendered by the Slurm renderers with the same
options, so ``skeleton_only`` applies too). A key that contradicts its content
(YAML under ``topology.conf``, a tree file under ``topology.yaml``) is an error:
slurmctld would read the file by its name and fail to parse it.

Node names. The graph names Kubernetes nodes; the file must name *Slurm* nodes,
which slurm-operator names after the slurmd pod's hostname
(``options.slinky.naming``):

* ``hostname`` (default): the first DNS label of the Kubernetes node name
  (``ip-10-0-0-1.ec2.internal`` -> ``ip-10-0-0-1``), what a pod with the node's
  hostname gets;
* ``hostname-override``: the ``nodeset.slinky.slurm.net/hostname-override``
  annotation of the node where present (the ``k8s-labels`` provider records it
  in the graph node's ``labels``), else the first DNS label;
* ``ordinal``: StatefulSet NodeSets name pods ``<nodeset>-<ordinal>``; ``ordinals``
  says which ordinal runs on which Kubernetes node;
* ``map``: an explicit Kubernetes node -> Slurm node map.

Nodes without a Slurm name (not in the map, no ordinal) are left out with a
warning; two Kubernetes nodes mapping to one Slurm name are an error.

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

from topocast.errors import RenderError
from topocast.model.graph import TopologyGraph
from topocast.renderers import slurm_block, slurm_tree, slurm_yaml
from topocast.renderers.base import Artifact, FormatRenderer, Renderer, RenderOptions, SlinkyNaming
from topocast.renderers.k8s_common import (
    MANAGED_BY,
    MANAGED_BY_LABEL,
    all_dns_labels,
    check_configmap_key,
    check_dns_label,
    check_dns_subdomain,
    dns_label_node_names,
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
#: the Slurm formats a ConfigMap can hold (``SlinkyOptions.content``), imported directly: the registry
#: names this module, so going back through it would be an import circle
CONTENT: dict[str, Renderer] = {r.name: r for r in (slurm_tree.RENDERER, slurm_block.RENDERER, slurm_yaml.RENDERER)}
HOSTNAME_OVERRIDE = "nodeset.slinky.slurm.net/hostname-override"
#: which file (by the ConfigMap key's suffix) holds which Slurm format
KEY_CONTENT = {".conf": ("slurm-tree", "slurm-block"), ".yaml": ("slurm-yaml",), ".yml": ("slurm-yaml",)}

_BLOCK_SIZES = re.compile(r"^BlockSizes=(\S+)$", re.MULTILINE)


def _block_sizes(content_format: str, content: str, options: RenderOptions) -> str | None:
    if options.block_sizes:
        return ",".join(str(s) for s in options.block_sizes)
    if content_format == "slurm-block":  # sizes were inferred: report what the file says
        m = _BLOCK_SIZES.search(content)
        return m.group(1) if m else None
    return None


def check_key_content(key: str, content: str) -> None:
    """``topology.conf`` holds tree/block, ``topology.yaml`` holds topology.yaml: anything else is refused."""
    suffix = next((sfx for sfx in KEY_CONTENT if key.endswith(sfx)), None)
    if suffix is None:
        raise RenderError(
            f"slinky.key {key!r}: slurmctld reads topology.conf or topology.yaml; name the key after one of them"
        )
    if content not in KEY_CONTENT[suffix]:
        wants = " or ".join(KEY_CONTENT[suffix])
        raise RenderError(
            f"slinky.key {key!r} names a {suffix[1:]} file but slinky.content is {content} "
            f"(a {key} must hold {wants}); slurmctld would fail to parse it"
        )


def _first_label(name: str) -> str:
    return name.split(".", 1)[0]


def slurm_node_names(graph: TopologyGraph, naming: SlinkyNaming) -> tuple[dict[str, str], list[str]]:
    """Kubernetes node -> Slurm node name under ``naming``, and the nodes that have none."""
    names: dict[str, str] = {}
    unnamed: list[str] = []
    if naming.mode == "ordinal" and not naming.nodeset:
        raise RenderError("slinky.naming.mode ordinal needs slinky.naming.nodeset (the NodeSet's name)")
    if naming.mode == "hostname":
        k8s_names = [n.name for n in graph.nodes]
        # a name without a dot is its own first label: the usual graph needs no call per node
        labels = map(_first_label, k8s_names) if "." in "".join(k8s_names) else k8s_names
        names = dict(zip(k8s_names, labels, strict=True))
    else:
        for node in graph.nodes:
            if naming.mode == "hostname-override":
                name: str | None = node.labels.get(HOSTNAME_OVERRIDE) or _first_label(node.name)
            elif naming.mode == "ordinal":
                ordinal = naming.ordinals.get(node.name)
                name = None if ordinal is None else f"{naming.nodeset}-{ordinal}"
            else:
                name = naming.names.get(node.name)
            if name is None:
                unnamed.append(node.name)
            else:
                names[node.name] = name
    slurm_names = list(names.values())
    if slurm_names == list(names):  # every node keeps its name: unique, and checked once per render call
        valid = dns_label_node_names(graph) or all_dns_labels(slurm_names)
    else:
        valid = all_dns_labels(slurm_names) and len(set(slurm_names)) == len(slurm_names)
    if valid:
        return names, sorted(unnamed)  # the usual case, checked in bulk; else the loop below names the problem
    seen: dict[str, str] = {}
    for k8s_name, slurm_name in names.items():
        check_dns_label(slurm_name, f"Slurm node name for {k8s_name}")
        if slurm_name in seen:
            raise RenderError(
                f"Kubernetes nodes {seen[slurm_name]!r} and {k8s_name!r} both map to Slurm node {slurm_name!r} "
                f"(slinky.naming.mode {naming.mode}); use mode map or hostname-override to tell them apart"
            )
        seen[slurm_name] = k8s_name
    return names, sorted(unnamed)


def slurm_graph(graph: TopologyGraph, naming: SlinkyNaming) -> tuple[TopologyGraph, list[str]]:
    """The graph with Slurm node names (nodes without one left out) and the warnings about it."""
    names, unnamed = slurm_node_names(graph, naming)
    warnings = []
    if unnamed:
        warnings.append(
            f"{len(unnamed)} node(s) have no Slurm node name under slinky.naming.mode {naming.mode} and are left "
            f"out of the Slinky file: {', '.join(unnamed[:5])}{' ...' if len(unnamed) > 5 else ''}"
        )
    if not unnamed and list(names) == list(names.values()):  # every node keeps its name
        return graph, warnings
    # The names were checked above (DNS labels, unique), so the copies skip re-validation.
    nodes = [n.model_copy(update={"name": names[n.name]}) for n in graph.nodes if n.name in names]
    return graph.model_copy(update={"nodes": nodes}), warnings


def configmap(graph: TopologyGraph, options: RenderOptions) -> tuple[dict[str, Any], list[str]]:
    """The ConfigMap object and the warnings of the Slurm artifact inside it."""
    s = options.slinky
    check_dns_label(s.namespace, "slinky.namespace")
    check_dns_subdomain(s.configmap, "slinky.configmap")
    check_configmap_key(s.key, "slinky.key")
    check_key_content(s.key, s.content)
    named, naming_warnings = slurm_graph(graph, s.naming)
    inner = CONTENT[s.content].render(named, options)
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
    annotations[f"{ANNOTATION_PREFIX}node-naming"] = s.naming.mode
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
    return obj, [*naming_warnings, *inner.warnings]


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


#: its own options and those of the Slurm format it embeds (``slinky.content``)
RENDERER: Renderer = FormatRenderer(
    FORMAT,
    FILENAME,
    MEDIA_TYPE,
    "kubernetes-objects",
    (
        "block_sizes",
        "block_name",
        "topologies",
        "skeleton_only",
        "slinky",
        "cluster_default",
        "topograph_compat",
        "block_names",
        "slurm_version",
        "no_topology_switch",
        "leave_out_domains_from",
    ),
    render,
)
