"""The fast way in for graph JSON: typed decoding at C speed, pydantic nodes built without revalidation.

:class:`topocast.model.graph.TopologyGraph` stays the boundary model (the JSON Schema, the errors,
graphs built in code). Validating 100k nodes through it costs about 2x a ``json.loads`` of
the same bytes, most of it pydantic-core creating one model instance per node. Here msgspec
decodes the bytes straight into lean structs that mirror the models field for field, checking
every type as it goes (strict: a string is only a JSON string, a bool only ``true``/``false``),
in about a quarter of a ``json.loads``; the pydantic ``Node`` instances are then filled from
those values by C-level calls, without a Python loop.

It only ever *accepts*: anything it does not take (bad JSON, a wrong type, an unknown field,
a lax value pydantic would coerce such as ``"yes"`` for a bool) makes :func:`decode_unchecked`
return None; :mod:`topocast.model.graph` then checks the rules of :mod:`topocast.model.checks` on
what it returns, and validates through pydantic as before whenever either says no, which words
the error. So a graph both accept is one pydantic accepts with the same values, and every error is
pydantic's or the checks' own.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from itertools import repeat
from typing import Any, Literal, TypeVar

import msgspec
from pydantic import BaseModel

from topocast.model.names import MAX_NODE_NAME, all_safe

__all__ = ["WireGraph", "WireNode", "decode_unchecked"]


class WireNode(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    """:class:`topocast.model.graph.Node` field for field, same order and defaults (a test keeps them equal)."""

    name: str
    id: str | None = None
    fabric: list[str] = []  # msgspec gives each instance its own empty list / dict
    accelerator: str | None = None
    subdomain: str | None = None
    accelerator_pending: bool = False
    zone: str | None = None
    instance_type: str | None = None
    labels: dict[str, str] = {}


class WireGraph(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """:class:`topocast.model.graph.TopologyGraph`'s fields; UNSET marks those absent from the JSON.

    ``health`` records (a few, one per broken object) are decoded as plain objects and validated one by
    one by :class:`~topocast.model.health.HealthRecord` (safe IDs, one-line reasons, aware times).
    """

    schema_version: Literal[1] | msgspec.UnsetType = msgspec.UNSET
    cluster: str
    provider: str
    nodes: list[WireNode] | msgspec.UnsetType = msgspec.UNSET
    switch_names: dict[str, str] | msgspec.UnsetType = msgspec.UNSET
    unplaced: dict[str, str] | msgspec.UnsetType = msgspec.UNSET
    notes: dict[str, str] | msgspec.UnsetType = msgspec.UNSET
    health: list[dict[str, Any]] | msgspec.UnsetType = msgspec.UNSET


_DECODER = msgspec.json.Decoder(WireGraph)
#: the graph and node models :mod:`topocast.model.graph` passes in (this module never imports it)
G = TypeVar("G", bound=BaseModel)
N = TypeVar("N", bound=BaseModel)
_set = object.__setattr__


def drain(calls: Iterable[object]) -> None:
    """Run a ``map`` of calls for their effect, at C speed."""
    deque(calls, maxlen=0)


def decode_unchecked(text: str | bytes, graph_model: type[G], node_model: type[BaseModel]) -> G | None:
    """The graph with every field type-checked but the graph's rules not yet checked, or None when
    pydantic has to look at ``text`` (see the module doc). The caller checks the rules
    (:func:`topocast.model.checks.looks_consistent`) and hands a graph that breaks one to pydantic.

    The models are passed in by :mod:`topocast.model.graph` (which imports this module). Nodes get
    every field marked as set (``model_fields_set``), as if the JSON had spelled each one out
    the way the graph store writes it; nothing in topocast reads that set.
    """
    try:
        wire = _DECODER.decode(text)
    except msgspec.DecodeError:  # ValidationError is a DecodeError
        return None
    if not all_safe([wire.cluster], MAX_NODE_NAME, cached=False):
        return None
    given = {f for f in wire.__struct_fields__ if getattr(wire, f) is not msgspec.UNSET}
    values: dict[str, Any] = {f: getattr(wire, f) for f in given}
    if wire.health:
        from pydantic import TypeAdapter, ValidationError

        from topocast.model.health import HealthRecord

        try:  # as JSON, so the records are read exactly as pydantic reads the file; one per object: checks
            values["health"] = TypeAdapter(list[HealthRecord]).validate_json(msgspec.json.encode(wire.health))
        except (ValidationError, ValueError):
            return None  # pydantic words the error
    values["nodes"] = _models(node_model, wire.nodes or [])
    return graph_model.model_construct(_fields_set=given, **values)


def _models(model: type[N], wire: Sequence[WireNode]) -> list[N]:
    """``model`` instances holding the values of ``wire``, set up the way pydantic-core sets them up
    (instance dict in field order, fields set, no extra, no private attributes), by ``map``.

    The nodes share one fields-set (a pydantic-core set per instance is ~0.7 kB, 70 MB at 100k
    nodes): pydantic only ever reads it or copies it (``model_copy``), and a frozen model never
    adds to it.
    """
    count = len(wire)
    nodes: list[N] = list(map(object.__new__, repeat(model, count)))
    drain(map(_set, nodes, repeat("__dict__"), map(msgspec.structs.asdict, wire)))
    drain(map(_set, nodes, repeat("__pydantic_fields_set__"), repeat(set(model.model_fields), count)))
    drain(map(_set, nodes, repeat("__pydantic_extra__"), repeat(None, count)))
    drain(map(_set, nodes, repeat("__pydantic_private__"), repeat(None, count)))
    return nodes
