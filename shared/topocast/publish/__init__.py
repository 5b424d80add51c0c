"""Publishers: push a rendered manifest to where schedulers read it.

Like the renderer and provider registries, ``PUBLISHERS`` maps a name to
``"module:Class"``, loaded lazily so a Lambda only imports the SDK it uses.
Each class implements :class:`topocast.publish.base.Publisher`.
"""

from __future__ import annotations

import importlib
from typing import Any

from topocast.errors import TopocastError
from topocast.publish.base import Publisher, PublishResult

PUBLISHERS: dict[str, str] = {
    "ssm": "topocast.aws.ssm_publish:SsmPublisher",
    # Slurm files as Cloud Storage objects for `topocast pull --source gcs://...`
    "gcs": "topocast.gcp.gcs_publish:GcsSlurmPublisher",
    # provided by the Kubernetes publisher module (labels, Topology objects, Slinky ConfigMap)
    "kubernetes": "topocast.publish.kubernetes:KubernetesPublisher",
}


def publisher_class(name: str) -> type[Any]:
    """The class registered under ``name``; a clear error when unknown or not installed."""
    try:
        target = PUBLISHERS[name]
    except KeyError:
        raise TopocastError(f"unknown publisher {name!r}; known: {', '.join(PUBLISHERS)}") from None
    module_name, _, attr = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise TopocastError(f"publisher {name!r} is not available ({module_name}: {exc})") from None
    return getattr(module, attr)


__all__ = ["PUBLISHERS", "PublishResult", "Publisher", "publisher_class"]
