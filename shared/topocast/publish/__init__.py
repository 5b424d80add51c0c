"""Publishers: push a rendered manifest to where schedulers read it, looked up by name.

``PUBLISHERS`` maps a name to ``"module:factory"`` (or a factory), loaded lazily so a function
only imports the SDK it uses. It holds the publishers every runtime can build (``kubernetes``,
``slurmrestd``); a cloud's composition root registers its own with :func:`register_publisher`
(``topocast.aws.root``: ``ssm``, ``topocast.gcp.root``: ``gcs``), so this package never reaches
up into a cloud. A factory takes :class:`PublisherInputs` (the settings and what the composition
root supplies) and returns a :class:`~topocast.publish.base.Publisher`. The publish use case and
``topocast publish`` build theirs through :func:`build_publishers`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from topocast.errors import TopocastError
from topocast.model.graph import TopologyGraph
from topocast.pipeline.objects import ObjectStore
from topocast.ports.protocols import Publisher
from topocast.ports.records import PublishResult
from topocast.registry import Registry

__all__ = [
    "PUBLISHERS",
    "PublishResult",
    "Publisher",
    "PublisherFactory",
    "PublisherInputs",
    "build_publishers",
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

#: name -> "module:factory" (or a factory); the clouds' own are added by their composition roots
PUBLISHERS: dict[str, str | PublisherFactory] = {
    # labels, Topology objects, Slinky ConfigMap
    "kubernetes": "topocast.publish.kubernetes:from_inputs",
    # live node moves on the running slurmctld over slurmrestd (beside ssm / gcs: the file stays theirs)
    "slurmrestd": "topocast.publish.slurmrest:from_inputs",
}
ALIASES = {"k8s": "kubernetes"}
REGISTRY: Registry[PublisherFactory] = Registry("publisher", PUBLISHERS, aliases=ALIASES)


def register_publisher(name: str, factory: str | PublisherFactory) -> None:
    """Add (or replace) a publisher; ``factory`` is ``"module:function"`` or the function."""
    REGISTRY.register(name, factory)


def build_publishers(names: Iterable[str], inputs: PublisherInputs) -> list[Publisher]:
    """One publisher per name, in order (TOPOCAST_PUBLISHERS); a clear error when one is unknown
    (not built in, and not registered by this runtime's cloud) or cannot be imported."""
    return [REGISTRY.get(name)(inputs) for name in names]
