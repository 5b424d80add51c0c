"""The ``k8s-nodes`` client both clouds' roots hand the ``k8s-labels`` provider, written once; and the
Kubernetes reads ``topocast discover`` hands every provider's connector (:class:`KubeListers`).

The cluster it lists is the one the Kubernetes publisher reaches, from the same settings
(``TOPOCAST_K8S_OPTIONS`` ``connection`` / ``client``, else ``TOPOCAST_K8S_*``). Importing this module
loads no Kubernetes client: :mod:`topocast.k8s.node_source` (lightkube) is imported when the client is
asked for, so a function that never lists nodes never pays for it (cold start).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from topocast.k8s.client import K8sConnection
    from topocast.providers.dra.provider import DraLister
    from topocast.providers.k8s_labels.provider import NodeLister

__all__ = ["NODES_CLIENT", "KubeListers", "with_node_lister"]

#: the service name the ``k8s-labels`` provider asks its ``clients`` for
NODES_CLIENT = "k8s-nodes"


def with_node_lister(clients: Callable[[str], Any], k8s_options: Mapping[str, Any]) -> Callable[[str], Any]:
    """``clients`` (the cloud's), plus :data:`NODES_CLIENT`: the Node lister of the publisher's cluster."""

    def client(service: str) -> Any:
        if service == NODES_CLIENT:
            from topocast.k8s.node_source import lister_from_options

            return lister_from_options(k8s_options)
        return clients(service)

    return client


class KubeListers:
    """:class:`topocast.providers.means.KubeAccess` over the cluster of a kubeconfig, else that of
    ``k8s_options`` (``TOPOCAST_K8S_OPTIONS``' ``connection``: the in-cluster controller's), else the
    environment's (``TOPOCAST_K8S_*``, the in-cluster service account); lightkube is loaded when a listing
    is asked for."""

    def __init__(self, k8s_options: Mapping[str, Any] | None = None) -> None:
        self.k8s_options = dict(k8s_options or {})

    def node_lister(self, kubeconfig: str | None) -> NodeLister:
        from topocast.k8s.node_source import node_lister

        return node_lister(self._connection(kubeconfig))

    def dra_lister(self, kubeconfig: str | None) -> DraLister:
        from topocast.k8s.resource_slices import dra_lister

        return dra_lister(self._connection(kubeconfig))

    def _connection(self, kubeconfig: str | None) -> K8sConnection:
        from topocast.k8s.client import K8sConnection, connection_from_options

        if kubeconfig:
            return K8sConnection(auth="kubeconfig", kubeconfig=kubeconfig)
        return connection_from_options(self.k8s_options)
