"""What the graph's checks and the derived views read from a graph, as Protocols.

:class:`topocast.model.graph.TopologyGraph` validates itself with :mod:`topocast.model.checks`, which
reads node columns from :mod:`topocast.model.fabric`. Typing those two against these Protocols rather
than the models keeps the arrows pointing one way (graph -> checks -> fabric -> here; graph -> decode,
which takes the model classes as arguments), with no circle, not even a type-only one. mypy checks that
``TopologyGraph`` satisfies them wherever the graph passes itself in (``check_graph(self)``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from topocast.model.health import HealthRecord

__all__ = ["GraphFields", "NodeFields"]


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
