"""What every topology source is and returns: the :class:`Provider` protocol and :class:`DiscoveryResult`.

A provider is built by its module's ``provider(inputs)`` factory (registered by name in
:mod:`topocast.providers`) from :class:`ProviderInputs`: its own options plus what only the shell
can supply (SDK clients built with the shell's credentials, on-prem uploads, operator files,
secrets). Providers never create clients or read credentials themselves, so they import no cloud
shell and the same provider runs in a Lambda, a Cloud Function and the CLI.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from topocast.errors import ProviderError
from topocast.model.changes import InstanceChange
from topocast.model.graph import TopologyGraph

__all__ = [
    "DiscoveryResult",
    "FullScanOnly",
    "NeedsFullScan",
    "Provider",
    "ProviderInputs",
    "no_client",
    "no_secret",
]


@dataclass
class DiscoveryResult:
    """A discovered graph plus what it cost and what looked wrong on the way."""

    graph: TopologyGraph
    #: API operation -> number of calls made (for metrics and benchmarks)
    api_calls: dict[str, int] = field(default_factory=dict)
    #: problems that did not stop discovery (nodes without a name tag, skipped instances...)
    warnings: list[str] = field(default_factory=list)
    #: incremental reads only: the followed changes (``InstanceChange.instance``) whose instance is not
    #: steady yet (starting, stopping, stopped with a restart expected); their nodes are kept as they were
    unsettled: list[str] = field(default_factory=list, kw_only=True)


class NeedsFullScan(ProviderError):
    """An incremental update cannot be applied safely (e.g. its paths clash with the graph): scan instead."""


class Provider(Protocol):
    """One topology source, bound to its configuration and clients."""

    #: the registry name (``aws``, ``gcp``, ``ibnetdiscover``, ``netq``...)
    name: str
    #: False: every change means a full discovery (on-prem fabric dumps have no per-node read)
    incremental: bool

    def discover_full(self, previous: TopologyGraph | None) -> DiscoveryResult:
        """The whole cluster; ``previous`` only keeps what the source has not reported yet stable."""
        ...

    def discover_changes(self, previous: TopologyGraph, changes: Sequence[InstanceChange]) -> DiscoveryResult:
        """``previous`` with ``changes`` applied; :class:`NeedsFullScan` when that is not safe.

        A change with ``follow`` whose instance is not steady (neither running nor steadily out) keeps
        its node as in ``previous`` and is named in :attr:`DiscoveryResult.unsettled`; with ``final``
        an instance that is out is removed even when it may still restart.
        """
        ...

    def scope(self, change: InstanceChange) -> str | None:
        """Why ``change`` is not about this cluster (another project, zone...), or None when it is."""
        ...


class FullScanOnly:
    """For a :class:`Provider` with no per-node read (a fabric dump, a cloud listing, node labels): every
    change is a full discovery and every change is about this cluster."""

    incremental = False

    def discover_full(self, previous: TopologyGraph | None) -> DiscoveryResult:
        raise NotImplementedError

    def discover_changes(self, previous: TopologyGraph, changes: Sequence[InstanceChange]) -> DiscoveryResult:
        return self.discover_full(previous)

    def scope(self, change: InstanceChange) -> str | None:
        return None


def no_client(service: str) -> Any:
    """``sdk_client`` of a runtime that builds no client for ``service``: one line saying so."""
    raise ProviderError(f"this runtime supplies no {service!r} client")


def no_secret(ref: str) -> str:
    """``secret`` of a runtime that resolves no secret reference: one line saying so."""
    raise ProviderError(f"this runtime cannot resolve the secret {ref!r}")


def _no_uploads() -> Mapping[str, bytes]:
    raise ProviderError("this runtime has no upload location for on-prem collectors")


def _no_files(uri: str) -> str:
    raise ProviderError(f"this runtime cannot read {uri!r}")


@dataclass(frozen=True)
class ProviderInputs:
    """Everything a provider factory gets: its options, and the shell's means to reach the world."""

    cluster: str
    #: the provider's own options (from ``TOPOCAST_*`` settings or CLI flags), validated by the provider
    options: Mapping[str, Any] = field(default_factory=dict)
    #: an SDK client by service name (``ec2``, ``compute``), created by the shell with its credentials (the
    #: CLI through the provider folder's connector, ``topocast.providers.CONNECTORS``; a root, its own)
    sdk_client: Callable[[str], Any] = no_client
    #: on-prem collectors' uploads, ``{uri: bytes}`` newest first (S3 or GCS)
    uploads: Callable[[], Mapping[str, bytes]] = _no_uploads
    #: an operator-maintained text file by URI (``s3://``, ``gs://``, ``ssm:///``, a local path)
    read_text: Callable[[str], str] = _no_files
    #: a secret's text by reference (Secrets Manager / SSM ARN, a file), resolved by the shell
    secret: Callable[[str], str] = no_secret
