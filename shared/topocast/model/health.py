"""Fabric health on the map: the state of switches, links, NVLink domains and capacity blocks, and what it
means for each node.

A graph may carry ``health``: one :class:`HealthRecord` per fabric object a source reported on (a switch
ID, a link between a node or switch and the switch above it, an accelerator domain ID, a capacity block
ID), with its state, the source, the reason and since when it is in that state. An object without a
record is ``ok``. Each node's *fabric health* is derived, never stored: the worst state among the objects
on its path (its leaf link, its switches, their uplinks) and in its domains, and the object to blame
(:func:`node_health`).

States, best to worst (:data:`SEVERITY`):

* ``ok``: the source reports the object healthy (or no source reports on it);
* ``unknown``: the source cannot tell (AWS ``insufficient-data``); shown, never acted on;
* ``degraded``: works with less bandwidth or redundancy (a GCP sub-block ``DEGRADED``, a leaf with
  fewer uplinks, an NVLink fabric ``Degraded``);
* ``impaired``: does not work as a fabric (AWS ``impaired``, a leaf that lost every uplink or vanished).

``observed_at`` is when the object was first seen in its current state (:func:`carry_forward` keeps it
while the state and reason stay), so a poll that sees nothing new writes the same graph and no new
generation.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, field_validator, model_validator

from topocast.model.names import MAX_DOMAIN_NAME, check_name

__all__ = [
    "SEVERITY",
    "HealthKind",
    "HealthRecord",
    "HealthState",
    "NodeHealth",
    "ObjectRef",
    "bad_domains",
    "carry_forward",
    "dependents",
    "node_health",
    "objects_of",
]

HealthState = Literal["ok", "unknown", "degraded", "impaired"]
HealthKind = Literal["switch", "link", "domain", "capacity_block"]
#: best to worst: a node's fabric health is the highest of its objects'
SEVERITY: dict[str, int] = {"ok": 0, "unknown": 1, "degraded": 2, "impaired": 3}
#: label a node carries that names its capacity block when the accelerator domain is not the block
CAPACITY_BLOCK_LABEL = "capacity-block"
MAX_REASON = 200


class HealthRecord(BaseModel):
    """The state of one fabric object as a source last reported it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: HealthKind = Field(description="What the object is: switch, link, domain (accelerator), capacity_block.")
    id: str = Field(
        description="The object's ID as the graph carries it: a switch ID, an accelerator domain, a capacity "
        "block ID; for a link, its lower end (a node name or switch ID)."
    )
    peer: str | None = Field(
        None,
        description="A link's upper end (the switch above `id`, or for a node's NVLink attachment its accelerator "
        "domain); None for other kinds.",
    )
    state: HealthState
    source: str = Field(description="Who reported it: aws-capacity-block, gcp-sub-block, ibnetdiscover, nvlink...")
    reason: str = Field("", description="The source's words, one line.")
    observed_at: AwareDatetime = Field(description="When the object was first seen in this state (UTC).")

    @field_validator("id", "peer", "source")
    @classmethod
    def _safe(cls, value: str | None) -> str | None:
        return None if value is None else check_name(value, "health record ID", "the graph's health", MAX_DOMAIN_NAME)

    @field_validator("reason")
    @classmethod
    def _one_line(cls, value: str) -> str:
        if len(value) > MAX_REASON or not value.isprintable():
            raise ValueError(f"a health reason is one printable line of at most {MAX_REASON} characters")
        return value

    @model_validator(mode="after")
    def _peer_for_links(self) -> HealthRecord:
        if (self.kind == "link") != (self.peer is not None):
            raise ValueError(f"{self.kind} {self.id}: `peer` is required for a link and only for a link")
        return self

    @property
    def ref(self) -> ObjectRef:
        return ObjectRef(self.kind, self.id, self.peer)


@dataclass(frozen=True, order=True)
class ObjectRef:
    """A fabric object: (kind, id, peer); ``str()`` is how reports, drain reasons and taints name it."""

    kind: str
    id: str
    peer: str | None = None

    def __str__(self) -> str:
        return f"link {self.id}>{self.peer}" if self.kind == "link" else f"{self.kind} {self.id}"


@dataclass(frozen=True)
class NodeHealth:
    """A node's derived fabric health: the worst state on its path or in its domain, and the object to blame."""

    node: str
    state: str
    blame: ObjectRef | None = None
    reason: str = ""


def objects_of(name: str, fabric: Iterable[str], accelerator: str | None, labels: Mapping[str, str]) -> list[ObjectRef]:
    """The fabric objects a node depends on, nearest first (the order that breaks ties in blame).

    Its link to the leaf, then each switch and the link above it, then its NVLink attachment (a link from
    the node to its accelerator domain), the domain and its capacity block (the accelerator domain itself
    on AWS UltraServers, else the ``capacity-block`` label).
    """
    refs: list[ObjectRef] = []
    below = name
    for switch in fabric:
        refs += [ObjectRef("link", below, switch), ObjectRef("switch", switch)]
        below = switch
    if accelerator is not None:
        # the node's NVLink attachment (a link whose peer is the domain), then the domain itself
        refs += [ObjectRef("link", name, accelerator), ObjectRef("domain", accelerator)]
        refs.append(ObjectRef("capacity_block", accelerator))
    block = labels.get(CAPACITY_BLOCK_LABEL)
    if block is not None and block != accelerator:
        refs.append(ObjectRef("capacity_block", block))
    return refs


def dependents(
    nodes: Iterable[tuple[str, Iterable[str], str | None, Mapping[str, str]]], wanted: Iterable[ObjectRef]
) -> dict[ObjectRef, list[str]]:
    """Each object of ``wanted`` -> the names of the nodes (``(name, fabric, accelerator, labels)`` rows) that
    depend on it, sorted: what ``health show``, ``diff`` and the view list under a broken object."""
    out: dict[ObjectRef, list[str]] = {ref: [] for ref in wanted}
    for name, fabric, accelerator, labels in nodes:
        for ref in objects_of(name, fabric, accelerator, labels):
            if ref in out:
                out[ref].append(name)
    return {ref: sorted(names) for ref, names in out.items()}


def node_health(
    nodes: Iterable[tuple[str, Iterable[str], str | None, Mapping[str, str]]],
    records: Iterable[HealthRecord],
) -> dict[str, NodeHealth]:
    """Each node's fabric health from ``(name, fabric, accelerator, labels)`` rows and the health records.

    Only nodes with a state other than ``ok`` are returned (a healthy cluster costs one dict lookup per
    object). Ties between equally bad objects go to the nearest one (:func:`objects_of`).
    """
    bad = {r.ref: r for r in records if r.state != "ok"}
    if not bad:
        return {}
    out: dict[str, NodeHealth] = {}
    for name, fabric, accelerator, labels in nodes:
        worst: HealthRecord | None = None
        for ref in objects_of(name, fabric, accelerator, labels):
            rec = bad.get(ref)
            if rec is not None and (worst is None or SEVERITY[rec.state] > SEVERITY[worst.state]):
                worst = rec
        if worst is not None:
            out[name] = NodeHealth(name, worst.state, worst.ref, worst.reason)
    return out


def carry_forward(previous: Iterable[HealthRecord], current: Iterable[HealthRecord]) -> list[HealthRecord]:
    """``current`` with each record's ``observed_at`` taken from ``previous`` when state and reason did not
    change, sorted by object: a poll that sees nothing new yields the same records (and the same graph).

    Records in state ``ok`` are dropped (no record means ``ok``), so a healed object leaves the graph.
    """
    before = {r.ref: r for r in previous}
    out: list[HealthRecord] = []
    for rec in current:
        if rec.state == "ok":
            continue
        old = before.get(rec.ref)
        if old is not None and (old.state, old.reason) == (rec.state, rec.reason):
            rec = rec.model_copy(update={"observed_at": old.observed_at})
        out.append(rec)
    return sorted(out, key=lambda r: r.ref)


def bad_domains(records: Iterable[HealthRecord], least: str) -> dict[str, HealthRecord]:
    """Accelerator domains with a ``domain`` or ``capacity_block`` record at least as bad as ``least``
    (domain -> the worse record): the ones a block topology can leave out instead of draining their nodes."""
    out: dict[str, HealthRecord] = {}
    for rec in records:
        if rec.kind in ("domain", "capacity_block") and SEVERITY[rec.state] >= SEVERITY[least]:
            old = out.get(rec.id)
            if old is None or SEVERITY[rec.state] > SEVERITY[old.state]:
                out[rec.id] = rec
    return out
