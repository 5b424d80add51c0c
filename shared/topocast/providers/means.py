"""What only a shell has to reach the world with, and the shape of a provider's SDK connector.

A provider never creates a client (:mod:`topocast.providers.base`); its folder declares a *connector*
(``shell_clients(means, options)``, registered in ``CONNECTORS`` beside ``PROVIDERS``) that says how a
shell builds the clients the provider asks ``sdk_client(service)`` for, from :class:`ShellMeans` (the
shell's credentials chain is the SDK's own default) and the provider's options. ``topocast discover``
builds :class:`~topocast.providers.base.ProviderInputs` through it without naming a provider or a
service; the functions' composition roots build their own clients (retry budgets, cached per process).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from topocast.errors import ProviderError

if TYPE_CHECKING:  # type-only: importing this module (every SDK helper does) loads no provider
    from topocast.providers.dra.provider import DraLister
    from topocast.providers.k8s_labels.provider import NodeLister

__all__ = [
    "Connector",
    "KubeAccess",
    "SdkClient",
    "ShellMeans",
    "UploadReader",
    "kubernetes",
    "services",
    "uploads",
]

#: ``ProviderInputs.sdk_client``: a client by service name
SdkClient = Callable[[str], Any]
#: a shell's read of collectors' uploads under a bucket prefix URI (``s3://``, ``gs://``) through the functions'
#: quarantine: ``(prefix_uri, check(data, uri), record file name) -> {uri: bytes}`` of the good ones, a bad one
#: moved to ``quarantine/`` and reported by the shell, the host's ``last-good/`` copy standing in
UploadReader = Callable[[str, Callable[[bytes, str], object], str], Mapping[str, bytes]]


class KubeAccess(Protocol):
    """A shell's Kubernetes reads (``topocast.k8s.nodes_client.KubeListers``): the cluster of a kubeconfig,
    else the environment's (in-cluster service account, ``KUBECONFIG``)."""

    def node_lister(self, kubeconfig: str | None) -> NodeLister: ...

    def dra_lister(self, kubeconfig: str | None) -> DraLister: ...


@dataclass(frozen=True)
class ShellMeans:
    """What the shell hands every connector, besides the SDKs' own credentials chains."""

    #: the Compute Engine endpoint (``--compute-endpoint``); None: ``TOPOCAST_COMPUTE_ENDPOINT``, else the real API
    compute_endpoint: str | None = None
    #: the kubeconfig of the cluster to read (``--kubeconfig``); None: the environment's
    kubeconfig: str | None = None
    #: the shell's Kubernetes reads; None where the shell has none
    kubernetes: KubeAccess | None = None
    #: collectors' uploads in a bucket, for a connector whose provider names their prefix; None where the shell has none
    read_uploads: UploadReader | None = None


#: a provider folder's connector: ``sdk_client`` for that provider, from the shell's means and its options
Connector = Callable[[ShellMeans, Mapping[str, Any]], SdkClient]


def services(provider: str, factories: Mapping[str, Callable[[], object]]) -> SdkClient:
    """``sdk_client`` over ``factories`` (service -> how to build it, called on each ask); a service the
    provider did not declare is a one-line error naming the ones it did."""

    def client(service: str) -> Any:
        try:
            make = factories[service]
        except KeyError:
            known = ", ".join(sorted(factories)) or "none"
            raise ProviderError(f"provider {provider!r} has no {service!r} client (it declares: {known})") from None
        return make()

    return client


def kubernetes(means: ShellMeans, provider: str) -> KubeAccess:
    """The shell's Kubernetes reads, or a one-line error naming ``provider`` when the shell has none."""
    if means.kubernetes is None:
        raise ProviderError(f"provider {provider!r} reads Kubernetes, and this runtime supplies no Kubernetes access")
    return means.kubernetes


def uploads(means: ShellMeans, provider: str) -> UploadReader:
    """The shell's read of uploads in a bucket, or a one-line error naming ``provider`` when the shell has none."""
    if means.read_uploads is None:
        raise ProviderError(
            f"provider {provider!r} reads uploads in a bucket, and this runtime supplies no bucket reads"
        )
    return means.read_uploads
