"""Read the cluster's Nodes for the ``k8s-labels`` provider (the I/O half; the provider itself is pure).

One LIST of Nodes through the same resilient client the publisher uses (rate
limit, retries, every auth mode), keeping labels, provider ID and the few
annotations the provider reads. Used by ``topocast discover --provider k8s-labels``
and by a scheduled function (:func:`discover`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from typing import Any

import httpx2
from lightkube.core.exceptions import ApiError

from topocast.errors import ProviderError
from topocast.k8s.client import (
    ClientSettings,
    K8sConnection,
    KubeClient,
    build_client,
    client_settings_from_options,
    connection_from_options,
)
from topocast.k8s.labels import list_cluster_nodes
from topocast.providers.base import DiscoveryResult
from topocast.providers.k8s_labels.provider import ANNOTATIONS, ClusterNodeInfo, NodeLabelsConfig, graph_from_nodes
from topocast.safeio.validation import validate


def list_node_info(kc: KubeClient, config: NodeLabelsConfig, page_size: int | None = 500) -> list[ClusterNodeInfo]:
    try:
        nodes = list_cluster_nodes(kc, ANNOTATIONS, config.node_selector, page_size)
    except ApiError as exc:
        raise ProviderError(f"listing Kubernetes nodes failed: {exc.status.code} {exc.status.message}") from None
    except httpx2.HTTPError as exc:
        raise ProviderError(f"listing Kubernetes nodes at {kc.server} failed: {exc}") from None
    return [ClusterNodeInfo(n.name, n.labels, n.annotations, n.provider_id) for n in nodes]


def _listing(kc: KubeClient, config: NodeLabelsConfig) -> tuple[list[ClusterNodeInfo], dict[str, int]]:
    """The nodes, and the requests that took as ``api_calls`` entries (``k8s_GET``...)."""
    infos = list_node_info(kc, config)
    return infos, {f"k8s_{method}": n for method, n in kc.transport.stats.snapshot()["by_method"].items()}


def node_lister(
    connection: K8sConnection | None = None, settings: ClientSettings | None = None
) -> Callable[[NodeLabelsConfig], tuple[list[ClusterNodeInfo], dict[str, int]]]:
    """The ``k8s-nodes`` client a shell hands the ``k8s-labels`` provider: one Node LIST per call,
    returned with the API calls it made (``k8s_GET``...)."""

    def list_nodes(config: NodeLabelsConfig) -> tuple[list[ClusterNodeInfo], dict[str, int]]:
        kc = build_client(connection or K8sConnection(), settings)
        try:
            return _listing(kc, config)
        finally:
            kc.close()

    return list_nodes


def lister_from_options(
    k8s_options: Mapping[str, Any],
) -> Callable[[NodeLabelsConfig], tuple[list[ClusterNodeInfo], dict[str, int]]]:
    """The ``k8s-nodes`` client of a composition root: the cluster the Kubernetes publisher reaches, from
    the same settings (``TOPOCAST_K8S_OPTIONS`` ``connection`` / ``client``, else ``TOPOCAST_K8S_*``)."""
    return node_lister(connection_from_options(k8s_options), client_settings_from_options(k8s_options))


def discover(
    config: NodeLabelsConfig,
    connection: K8sConnection | None = None,
    settings: ClientSettings | None = None,
    *,
    client: KubeClient | None = None,
) -> DiscoveryResult:
    """The graph the cluster's node labels describe (``client`` overrides ``connection``, for tests)."""
    kc = client or build_client(connection or K8sConnection(), settings)
    try:
        infos, calls = _listing(kc, config)
    finally:
        if client is None:
            kc.close()
    result = graph_from_nodes(infos, config)
    result.api_calls.update(calls)
    return result


NODE_LABELS_ENV = "TOPOCAST_NODE_LABELS"


def discover_from_env(cluster: str, environ: Mapping[str, str] | None = None) -> DiscoveryResult:
    """A scheduled function's discovery: ``TOPOCAST_NODE_LABELS`` (NodeLabelsConfig as JSON, optional) and
    the ``TOPOCAST_K8S_*`` connection variables (:meth:`K8sConnection.from_env`)."""
    env = os.environ if environ is None else environ
    try:
        options = json.loads(env.get(NODE_LABELS_ENV) or "{}")
    except ValueError as exc:
        raise ProviderError(f"{NODE_LABELS_ENV} is not JSON: {exc}") from None
    if not isinstance(options, dict):
        raise ProviderError(f"{NODE_LABELS_ENV} must be a JSON object (NodeLabelsConfig)")
    config = validate(NodeLabelsConfig, {**options, "cluster": cluster}, NODE_LABELS_ENV, ProviderError)
    return discover(config, K8sConnection.from_env(env))


__all__ = ["NODE_LABELS_ENV", "discover", "discover_from_env", "list_node_info", "lister_from_options", "node_lister"]
