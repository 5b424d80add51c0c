"""Registry entry point for the Kubernetes publisher (``PUBLISHERS["kubernetes"]``).

The implementation lives in :mod:`topocast.k8s.publisher` (it needs the ``k8s``
extra); this module re-exports it under the name the registry expects and
builds it from the functions' settings the same way on every cloud.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from topocast.k8s.publisher import K8sPublishResult, KubernetesPublisher, KubernetesPublisherConfig

__all__ = ["K8sPublishResult", "KubernetesPublisher", "KubernetesPublisherConfig", "from_inputs", "from_settings"]


def from_settings(settings: Any, graph_source: Callable[[int], Any]) -> KubernetesPublisher:
    """``TOPOCAST_K8S_OPTIONS`` (KubernetesPublisherConfig as JSON); the connection may instead come from
    ``TOPOCAST_K8S_<FIELD>`` variables. The label scheme is the render stage's, so ownership agrees."""
    from topocast.k8s.client import connection_from_options

    options = dict(settings.k8s_options)
    options.setdefault("labels", settings.render_options.labels.model_dump())
    options["connection"] = connection_from_options(options)
    return KubernetesPublisher(
        KubernetesPublisherConfig.model_validate(options),
        render_options=settings.render_options,
        graph_source=graph_source,
    )


def from_inputs(inputs: Any) -> KubernetesPublisher:
    """Registry factory (``PUBLISHERS["kubernetes"]``): :func:`from_settings` with the runtime's graph source."""
    return from_settings(inputs.settings, inputs.graph_source)
