"""Topology sources ("providers"): where a graph comes from, looked up by name.

Each provider is one module with a ``provider(inputs: ProviderInputs) -> Provider`` factory,
registered below with one line (a new provider declares ``class Options(BaseModel)`` and validates
``inputs.options`` with :func:`topocast.providers.options.provider_options`); the functions
(``app.discover``) and ``topocast discover`` both build their provider through :func:`build_provider`, so
this table is the code path.
Modules are imported lazily: the AWS Lambda never pays for the GCP SDK and vice versa.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from topocast.errors import ProviderError
from topocast.providers.base import DiscoveryResult, NeedsFullScan, Provider, ProviderInputs
from topocast.registry import Registry

__all__ = [
    "PROVIDERS",
    "DiscoveryResult",
    "NeedsFullScan",
    "Provider",
    "ProviderFactory",
    "ProviderInputs",
    "build_provider",
    "register_provider",
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


REGISTRY: Registry[ProviderFactory] = Registry("provider", PROVIDERS, error=ProviderError)


def register_provider(name: str, factory: str | ProviderFactory) -> None:
    """Add (or replace) a provider; ``factory`` is ``"module:function"`` or the function."""
    REGISTRY.register(name, factory)


def build_provider(name: str, inputs: ProviderInputs, overlays: Sequence[str] = ()) -> Provider:
    """The provider registered as ``name``, built from ``inputs``; a clear error when unknown.

    ``overlays`` (``SOURCE:FIELD=VALUE,...``, :mod:`topocast.providers.overlay`) are read after it and
    merged into its every result; each is built like the base, with the same shell means.
    """
    base = _build(name, inputs)
    if not any(text.strip() for text in overlays):
        return base
    from topocast.providers.overlay import OverlaidProvider, parse_overlay

    specs = [parse_overlay(text) for text in overlays if text.strip()]
    built = [(s, _build(s.source, replace(inputs, options=s.options()))) for s in specs]
    return OverlaidProvider(base, built)


def _build(name: str, inputs: ProviderInputs) -> Provider:
    return REGISTRY.get(name)(inputs)
