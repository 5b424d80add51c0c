"""Topology sources ("providers"): where a graph comes from.

Each provider lives in its own module and is looked up by name here, so adding
a cloud or a fabric tool touches one module plus one line below. Modules are
imported lazily: the AWS Lambda never pays for the GCP SDK and vice versa.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from topocast.errors import ProviderError

#: provider name -> module implementing it
PROVIDERS: dict[str, str] = {
    "model": "topocast.providers.model",
    "aws": "topocast.providers.aws",
    "gcp": "topocast.providers.gcp",
    "ibnetdiscover": "topocast.providers.ibnetdiscover",
    "netq": "topocast.providers.netq",
    "k8s-labels": "topocast.providers.k8s_labels",
}


def provider_module(name: str) -> ModuleType:
    try:
        path = PROVIDERS[name]
    except KeyError:
        raise ProviderError(f"unknown provider {name!r}; known: {', '.join(sorted(PROVIDERS))}") from None
    return importlib.import_module(path)
