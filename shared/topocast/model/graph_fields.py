"""What the graph's checks, its fast decoder and the derived views read from a graph, as Protocols.

:class:`topocast.model.graph.TopologyGraph` validates itself with :mod:`topocast.model.checks`, which
reads node columns from :mod:`topocast.model.fabric`; :mod:`topocast.model.decode` builds graphs for
:mod:`topocast.model.graph`. Typing those modules against these Protocols rather than the models keeps
the arrows pointing one way (graph -> checks / decode -> fabric -> here), with no circle, not even a
type-only one. mypy checks that ``Node`` and ``TopologyGraph`` satisfy them wherever the models are
passed in.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, Self

from topocast.model.health import HealthRecord

__all__ = ["GraphFields", "GraphModel", "NodeFields"]


class NodeFields(Protocol):
    """A node's fields that the checks and the views read (:class:`topocast.model.graph.Node`)."""

    @property
    def name(self) -> str: ...
    @property
    def id(self) -> str | None: ...
    @property
    def fabric(self) -> list[str]: ...
    @property
    def accelerator(self) -> str | None: ...
    @property
    def subdomain(self) -> str | None: ...


class GraphFields(Protocol):
    """A graph's fields that the checks and the views read (:class:`topocast.model.graph.TopologyGraph`)."""

    @property
    def nodes(self) -> Sequence[NodeFields]: ...
    @property
    def switch_names(self) -> Mapping[str, str]: ...
    @property
    def unplaced(self) -> Mapping[str, str]: ...
    @property
    def notes(self) -> Mapping[str, str]: ...
    @property
    def health(self) -> Sequence[HealthRecord]: ...
    def nodes_without_topology(self) -> list[str]: ...


class GraphModel(GraphFields, Protocol):
    """A graph model class the decoder can fill without revalidating (pydantic's ``model_construct``)."""

    @classmethod
    def model_construct(cls, _fields_set: set[str] | None = None, **values: Any) -> Self: ...
