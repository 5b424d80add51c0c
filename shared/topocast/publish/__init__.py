"""Publishers: push a rendered manifest to where schedulers read it, looked up by name.

``PUBLISHERS`` maps a name to ``"module:factory"`` (or a factory), loaded lazily so a function
only imports the SDK it uses. A factory takes :class:`PublisherInputs` (the settings and what the
cloud's composition root supplies) and returns a :class:`topocast.publish.base.Publisher`. The
publish use case and ``topocast publish`` build theirs through :func:`build_publishers`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from topocast.errors import TopocastError
from topocast.model.graph import TopologyGraph
from topocast.pipeline.objects import ObjectStore
from topocast.publish.base import Publisher, PublishResult

__all__ = [
    "PUBLISHERS",
    "PublishResult",
    "Publisher",
    "PublisherFactory",
    "PublisherInputs",
    "build_publishers",
    "publisher_class",
    "register_publisher",
]


def _no_client(service: str) -> Any:
    raise TopocastError(f"this runtime supplies no {service!r} client")


@dataclass(frozen=True)
class PublisherInputs:
    #: :class:`topocast.config.Settings` (publisher options: ssm_*, k8s_options, formats, render_options)
    settings: Any
    #: a stored graph generation (the Kubernetes publisher labels nodes from it)
    graph_source: Callable[[int], TopologyGraph]
    #: an SDK client by service name (``ssm``, ``s3``), built by the shell
    sdk_client: Callable[[str], Any] = _no_client
    #: the pipeline's bucket (S3 or GCS) for publishers that write objects
    objects: ObjectStore | None = None
    extra: dict[str, Any] = field(default_factory=dict)


PublisherFactory = Callable[[PublisherInputs], Publisher]

#: name -> "module:factory"; the class behind each factory in ``CLASSES`` (publisher_class)
PUBLISHERS: dict[str, str | PublisherFactory] = {
    # Slurm files as SSM parameters (+ S3 for big ones) for `topocast pull --source ssm://...`
    "ssm": "topocast.aws.ssm_publish:from_inputs",
    # Slurm files as Cloud Storage objects for `topocast pull --source gcs://...`
    "gcs": "topocast.gcp.gcs_publish:from_inputs",
    # labels, Topology objects, Slinky ConfigMap
    "kubernetes": "topocast.publish.kubernetes:from_inputs",
    # live node moves on the running slurmctld over slurmrestd (beside ssm / gcs: the file stays theirs)
    "slurmrestd": "topocast.publish.slurmrest:from_inputs",
}
ALIASES = {"k8s": "kubernetes"}
CLASSES = {
    "ssm": "topocast.aws.ssm_publish:SsmPublisher",
    "gcs": "topocast.gcp.gcs_publish:GcsSlurmPublisher",
    "kubernetes": "topocast.publish.kubernetes:KubernetesPublisher",
    "slurmrestd": "topocast.publish.slurmrest:SlurmRestPublisher",
}


def register_publisher(name: str, factory: str | PublisherFactory) -> None:
    PUBLISHERS[name] = factory


def _load(name: str, target: str) -> Any:
    module_name, _, attr = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise TopocastError(f"publisher {name!r} is not available ({module_name}: {exc})") from None
    return getattr(module, attr)


def _target(name: str, table: dict[str, Any]) -> Any:
    name = ALIASES.get(name, name)
    try:
        return name, table[name]
    except KeyError:
        raise TopocastError(f"unknown publisher {name!r}; known: {', '.join(PUBLISHERS)}") from None


def publisher_class(name: str) -> type[Any]:
    """The class registered under ``name``; a clear error when unknown or not installed."""
    name, target = _target(name, CLASSES)
    return _load(name, target)


def build_publishers(names: Iterable[str], inputs: PublisherInputs) -> list[Publisher]:
    """One publisher per name, in order (TOPOCAST_PUBLISHERS)."""
    out: list[Publisher] = []
    for raw in names:
        name, target = _target(raw, PUBLISHERS)
        factory: PublisherFactory = _load(name, target) if isinstance(target, str) else target
        out.append(factory(inputs))
    return out
