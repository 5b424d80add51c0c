"""The ``dra`` provider's connector: ``k8s-dra``, the shell's Node and ResourceSlice listing."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from topocast.providers.means import SdkClient, ShellMeans, kubernetes, services

__all__ = ["shell_clients"]


def shell_clients(means: ShellMeans, options: Mapping[str, Any]) -> SdkClient:
    """``k8s-dra``: a :data:`~topocast.providers.dra.provider.DraLister` of the cluster of ``--kubeconfig``,
    else of the provider's ``kubeconfig`` option, else the environment's."""
    kubeconfig = means.kubeconfig or options.get("kubeconfig")
    return services("dra", {"k8s-dra": lambda: kubernetes(means, "dra").dra_lister(kubeconfig)})
