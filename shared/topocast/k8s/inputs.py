"""Turn the publish stage's input (a manifest + file bytes) back into artifacts with objects.

The pipeline stores rendered files and hands a publisher ``{file name: bytes}``
plus the manifest that lists them (format, file, sha256). The Kubernetes formats
are plain data, so they decode losslessly: YAML files hold the full manifests
(Kueue/KAI Topology, HyperNodes, ConfigMap) and ``labels.json`` holds
``{node: {key: value}}``. Each file's sha256 is checked against the manifest, so a
truncated or swapped file is refused instead of half-applied.

``labels.json`` carries neither instance IDs nor the renderer's ``keep`` keys.
When the publisher can read the graph, :func:`labels_from_graph` re-renders the
label objects and uses them if they hash to the very same file.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from typing import Any

from topocast.errors import TopocastError
from topocast.model.graph import TopologyGraph
from topocast.renderers.base import Artifact, RenderOptions
from topocast.safeio.validation import load_json
from topocast.safeio.yaml_input import load_yaml_all


class PublishInputError(TopocastError):
    """A file the manifest lists is missing, corrupt or not the expected shape."""


def decode_files(manifest: Any, files: Mapping[str, bytes], formats: Iterable[str]) -> dict[str, Artifact]:
    """Artifacts for every manifest entry whose format is in ``formats`` (sha256-checked)."""
    wanted = set(formats)
    out: dict[str, Artifact] = {}
    for entry in manifest.artifacts:
        if entry.format not in wanted:
            continue
        where = f"generation {manifest.generation} {entry.file} ({entry.format})"
        raw = files.get(entry.file)
        if raw is None:
            raise PublishInputError(f"{where}: listed in the manifest but not given to the publisher")
        if hashlib.sha256(raw).hexdigest() != entry.sha256:
            raise PublishInputError(f"{where}: sha256 does not match the manifest (corrupt or swapped file)")
        try:
            text = raw.decode()
            objects = _label_objects(text) if entry.format == "k8s-labels" else _yaml_objects(text)
        except (UnicodeDecodeError, ValueError, RecursionError, PublishInputError) as exc:
            raise PublishInputError(f"{where}: {exc}") from None
        out[entry.format] = Artifact(entry.format, entry.file, text, entry.media_type, entry.node_count, objects)
    return out


def _label_objects(text: str) -> list[dict[str, Any]]:
    data = load_json(text, "labels", PublishInputError)
    if isinstance(data, list):  # already the object form
        return data
    if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
        raise ValueError("expected a JSON object {node: {label: value}}")
    return [{"node": node, "id": None, "labels": labels} for node, labels in data.items()]


def _yaml_objects(text: str) -> list[dict[str, Any]]:
    docs = [d for d in load_yaml_all(text, "YAML", PublishInputError) if d is not None]
    for i, doc in enumerate(docs):
        if not isinstance(doc, dict) or not doc.get("kind") or not (doc.get("metadata") or {}).get("name"):
            raise ValueError(f"YAML document {i + 1} is not a Kubernetes object (kind, metadata.name)")
    return docs


def labels_from_graph(graph: TopologyGraph, options: RenderOptions, file_artifact: Artifact) -> Artifact | None:
    """The rendered label artifact (with instance IDs and ``keep`` keys) if it is byte-identical to the
    file that was published for this generation; None when the options differ."""
    from topocast.renderers import render

    rendered = render(graph, "k8s-labels", options)
    return rendered if rendered.sha256 == file_artifact.sha256 else None
