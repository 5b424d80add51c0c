"""Topology sources ("providers"): where a graph comes from, looked up by name.

Each provider is a folder (``providers/aws/``, ``providers/gcp/``...) whose ``provider`` module has a
``provider(inputs: ProviderInputs) -> Provider`` factory, registered below with one line (a provider
declares ``class Options(BaseModel)`` and validates ``inputs.options`` with
:func:`topocast.providers.options.provider_options`); the functions (``app.discover``) and
``topocast discover`` both build their provider through :func:`build_provider`, so this table is the
code path. A provider that asks ``sdk_client(service)`` for a client also registers its folder's
connector in ``CONNECTORS`` (:mod:`topocast.providers.means`): how ``topocast discover`` builds those
clients from the shell's means, so the CLI names no provider and no service.
Modules are imported lazily: the AWS Lambda never pays for the GCP SDK and vice versa.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from topocast.errors import ProviderError
from topocast.providers.base import DiscoveryResult, NeedsFullScan, Provider, ProviderInputs
from topocast.providers.means import Connector, SdkClient, ShellMeans, services
from topocast.registry import Registry

if TYPE_CHECKING:
    from pydantic import BaseModel

__all__ = [
    "CONNECTORS",
    "PROVIDERS",
    "DiscoveryResult",
    "NeedsFullScan",
    "Provider",
    "ProviderFactory",
    "ProviderInputs",
    "ShellMeans",
    "build_provider",
    "connect",
    "provider_models",
    "register_provider",
    "registered_options_model",
]

ProviderFactory = Callable[[ProviderInputs], Provider]

#: provider name -> ``"module:factory"`` (or a factory itself, for providers registered at run time)
PROVIDERS: dict[str, str | ProviderFactory] = {
    "aws": "topocast.providers.aws.provider:provider",
    "gcp": "topocast.providers.gcp.provider:provider",
    "ibnetdiscover": "topocast.providers.onprem.provider:ibnetdiscover_provider",
    "netq": "topocast.providers.onprem.provider:netq_provider",
    "k8s-labels": "topocast.providers.k8s_labels.provider:provider",
    "oci": "topocast.providers.oci.provider:provider",
    "nebius": "topocast.providers.nebius.provider:provider",
    "azure": "topocast.providers.azure.provider:provider",
    "dra": "topocast.providers.dra.provider:provider",
}


#: provider name -> its folder's connector (``"module:shell_clients"``): the SDK clients it asks for, built
#: from the shell's means; a provider without one (ibnetdiscover, netq: uploads and secrets) asks for none
CONNECTORS: dict[str, str | Connector] = {
    "aws": "topocast.providers.aws.sdk:shell_clients",
    "gcp": "topocast.providers.gcp.sdk:shell_clients",
    "k8s-labels": "topocast.providers.k8s_labels.connect:shell_clients",
    "oci": "topocast.providers.oci.sdk:shell_clients",
    "nebius": "topocast.providers.nebius.sdk:shell_clients",
    "azure": "topocast.providers.azure.sdk:shell_clients",
    "dra": "topocast.providers.dra.connect:shell_clients",
}

REGISTRY: Registry[ProviderFactory] = Registry("provider", PROVIDERS, error=ProviderError)
CONNECTOR_REGISTRY: Registry[Connector] = Registry("connector", CONNECTORS, error=ProviderError)


def register_provider(name: str, factory: str | ProviderFactory, connector: str | Connector | None = None) -> None:
    """Add (or replace) a provider; ``factory`` is ``"module:function"`` or the function, ``connector`` (the
    same) builds its SDK clients from the shell's means."""
    REGISTRY.register(name, factory)
    if connector is not None:
        CONNECTOR_REGISTRY.register(name, connector)


def connect(name: str, means: ShellMeans, options: Mapping[str, Any]) -> SdkClient:
    """``sdk_client`` of provider ``name`` in a shell with ``means`` (its folder's connector); a provider
    without a connector gets one that names the service it asked for."""
    if name not in CONNECTORS:
        return services(name, {})
    return CONNECTOR_REGISTRY.get(name)(means, options)


def build_provider(
    name: str, inputs: ProviderInputs, overlays: Sequence[str] = (), means: ShellMeans | None = None
) -> Provider:
    """The provider registered as ``name``, built from ``inputs``; a clear error when unknown.

    ``overlays`` (``SOURCE:FIELD=VALUE,...``, :mod:`topocast.providers.overlay`) are read after it and
    merged into its every result; each is built like the base, with the same shell means: given
    ``means``, each overlay source gets its own connector's clients, else the base's ``sdk_client``.
    """
    base = _build(name, inputs)
    if not any(text.strip() for text in overlays):
        return base
    from topocast.providers.overlay import OverlaidProvider, parse_overlay

    specs = [parse_overlay(text) for text in overlays if text.strip()]
    built = []
    for s in specs:
        own = replace(inputs, options=s.options())
        if means is not None:
            own = replace(own, sdk_client=connect(s.source, means, own.options))
        built.append((s, _build(s.source, own)))
    return OverlaidProvider(base, built)


def _build(name: str, inputs: ProviderInputs) -> Provider:
    return REGISTRY.get(name)(inputs)


def registered_options_model(name: str) -> type[BaseModel] | None:
    """The options model of the provider registered as ``name`` (None: unknown, run-time or without one)."""
    from topocast.providers.options import options_model

    target = PROVIDERS.get(name)
    return options_model(target) if isinstance(target, str) else None


def provider_models() -> dict[str, type[BaseModel]]:
    """Every registered provider's options model, in registry order (one whose module does not import
    here, e.g. an SDK not installed at module level, is left out)."""
    out: dict[str, type[BaseModel]] = {}
    for name in PROVIDERS:
        try:
            model = registered_options_model(name)
        except ImportError:
            continue
        if model is not None:
            out[name] = model
    return out
