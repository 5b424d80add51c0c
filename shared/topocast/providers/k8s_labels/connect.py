"""The ``k8s-labels`` provider's connector: ``k8s-nodes``, the shell's Node listing of the kubeconfig's cluster."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from topocast.providers.means import SdkClient, ShellMeans, kubernetes, services

__all__ = ["shell_clients"]


def shell_clients(means: ShellMeans, options: Mapping[str, Any]) -> SdkClient:
    """``k8s-nodes``: a :data:`~topocast.providers.k8s_labels.provider.NodeLister` of the shell's cluster
    (``--kubeconfig``, else the environment's)."""
    return services("k8s-labels", {"k8s-nodes": lambda: kubernetes(means, "k8s-labels").node_lister(means.kubeconfig)})
