"""What to do about fabric health: the drains / resumes (Slurm) or taints / untaints (Kubernetes) to make.

Pure. Three steps, each a function of plain data:

1. :func:`observe` damps flapping objects. Each run of an applier is one *observation* (a sequence number
   that only grows; a duplicated or late one, ``seq`` not above the last, changes nothing). An object
   becomes *confirmed bad* after ``act_after`` observations in a row in an acted-on state, and stops being
   confirmed after ``undo_after`` observations in a row that are not.
2. :func:`topocast.model.health.node_health` over the confirmed objects is the *blast radius*: the nodes
   that depend on them, each with the object to blame.
3. :func:`plan` compares that with what the scheduler holds now: the nodes topocast marked (their drain
   reason starts ``topocast:``, or they carry the ``topocast.io/fabric-degraded`` taint) and the nodes
   someone else drained. It marks nodes in the radius, unmarks topocast's own nodes outside it, never
   touches another operator's, and holds every *new* mark when topocast would then hold more than
   ``max_share`` of the cluster (unmarking is always allowed: it gives nodes back).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from topocast.model.health import SEVERITY, HealthRecord, NodeHealth

__all__ = [
    "ApplyOutcome",
    "DampingState",
    "HealthPlan",
    "HealthPolicy",
    "Holding",
    "Tracked",
    "is_ours",
    "observe",
    "plan",
    "slurm_reason",
]

#: every Slurm drain reason topocast writes starts with this; only such drains are ever resumed
REASON_PREFIX = "topocast:"
MAX_REASON = 128


@dataclass(frozen=True)
class HealthPolicy:
    """The settings of health actions (one object for the feature)."""

    #: the least severe state that is acted on (``degraded`` or ``impaired``)
    act_from: str = "degraded"
    #: observations in a row in an acted-on state before the object's nodes are marked
    act_after: int = 1
    #: observations in a row not in an acted-on state before they are unmarked
    undo_after: int = 1
    #: the most of the cluster (share of its nodes) topocast holds marked at once; at least one node
    max_share: float = 0.1

    def __post_init__(self) -> None:
        if self.act_from not in ("degraded", "impaired"):
            raise ValueError(f"act_from must be degraded or impaired, not {self.act_from!r}")
        if self.act_after < 1 or self.undo_after < 1:
            raise ValueError("act_after and undo_after are at least 1")
        if not 0.0 <= self.max_share <= 1.0:
            raise ValueError(f"max_share is a share of the cluster between 0 and 1, not {self.max_share}")

    def acts_on(self, state: str) -> bool:
        return SEVERITY[state] >= SEVERITY[self.act_from]

    def limit(self, nodes: int) -> int:
        """How many nodes topocast may hold marked in a cluster of ``nodes``: one odd node is always allowed."""
        return max(1, math.floor(self.max_share * nodes + 1e-9))


class Tracked(BaseModel):
    """One object the damper follows: its last bad record, whether it is confirmed, and the run of
    observations against that (bad ones while unconfirmed, good ones while confirmed)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    record: HealthRecord
    confirmed: bool
    streak: int = Field(ge=0)


class DampingState(BaseModel):
    """What :func:`observe` keeps between observations (stored by the applier as JSON)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    seq: int = Field(0, ge=0, description="The last observation taken into account.")
    objects: list[Tracked] = Field(default_factory=list)

    def confirmed(self) -> list[HealthRecord]:
        return [t.record for t in self.objects if t.confirmed]


def observe(state: DampingState, records: Iterable[HealthRecord], seq: int, policy: HealthPolicy) -> DampingState:
    """The damper after observation ``seq`` saw ``records`` (objects without a record are ``ok``)."""
    if seq <= state.seq:  # duplicated or late: what it says is already known or out of date
        return state
    bad = {r.ref: r for r in records if policy.acts_on(r.state)}
    before = {t.record.ref: t for t in state.objects}
    out: list[Tracked] = []
    for ref in sorted(before.keys() | bad.keys()):
        old, rec = before.get(ref), bad.get(ref)
        if rec is not None:
            if old is not None and old.confirmed:
                out.append(Tracked(record=rec, confirmed=True, streak=0))
            else:
                streak = (old.streak if old is not None else 0) + 1
                confirmed = streak >= policy.act_after
                # once confirmed, the streak counts good observations from zero
                out.append(Tracked(record=rec, confirmed=confirmed, streak=0 if confirmed else streak))
        elif old is not None and old.confirmed and old.streak + 1 < policy.undo_after:
            out.append(Tracked(record=old.record, confirmed=True, streak=old.streak + 1))
        # else: healed long enough (or never confirmed): no longer followed
    return DampingState(seq=seq, objects=out)


@dataclass(frozen=True)
class Holding:
    """What the scheduler holds now: nodes topocast marked (node -> the mark's text: drain reason or taint
    value) and nodes someone else holds (drained with another reason)."""

    ours: Mapping[str, str] = field(default_factory=dict)
    foreign: frozenset[str] = frozenset()


@dataclass(frozen=True)
class HealthPlan:
    """The actions to take, and why some were not."""

    #: node -> the mark to set (drain reason / taint value); new marks and changed ones
    mark: dict[str, str]
    #: topocast's own marks to lift (the node left the blast radius)
    unmark: list[str]
    #: node -> its health, for every node in the blast radius
    radius: dict[str, NodeHealth]
    #: nodes in the blast radius another operator holds: left as they are
    foreign: list[str]
    #: nodes in the radius not marked because of the share guard (empty unless held)
    held: list[str] = field(default_factory=list)
    #: why new marks were held (the guard's words), or None
    held_reason: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "mark": self.mark,
            "unmark": self.unmark,
            "radius": {
                n: {"state": h.state, "object": str(h.blame), "reason": h.reason}
                for n, h in sorted(self.radius.items())
            },
            "foreign": self.foreign,
            "held": self.held,
            "held_reason": self.held_reason,
        }


def plan(
    nodes: int,
    radius: Mapping[str, NodeHealth],
    holding: Holding,
    policy: HealthPolicy,
    mark_text: Callable[[NodeHealth], str],
) -> HealthPlan:
    """Marks and unmarks that take the scheduler from ``holding`` to ``radius`` in a cluster of ``nodes``
    (nodes of ``radius`` in a state the policy does not act on are left out)."""
    radius = {n: h for n, h in radius.items() if policy.acts_on(h.state)}
    want = {n: mark_text(h) for n, h in radius.items() if n not in holding.foreign}
    unmark = sorted(holding.ours.keys() - want.keys())
    new = sorted(want.keys() - holding.ours.keys())
    limit = policy.limit(nodes)
    held: list[str] = []
    reason = None
    if new and len(want) > limit:
        held = new
        reason = (
            f"{len(want)} node(s) of {nodes} would be marked, more than max_share {policy.max_share:g} "
            f"({limit}); new marks held"
        )
    mark = {n: t for n, t in sorted(want.items()) if holding.ours.get(n) != t and n not in held}
    return HealthPlan(
        mark=mark,
        unmark=unmark,
        radius=dict(radius),
        foreign=sorted(radius.keys() & holding.foreign),
        held=held,
        held_reason=reason,
    )


@dataclass
class ApplyOutcome:
    """What an applier did: nodes marked (drained / tainted) and unmarked, as read back from the scheduler."""

    drained: list[str] = field(default_factory=list)
    resumed: list[str] = field(default_factory=list)
    #: nodes of the plan's unmark whose mark changed under us (someone else's now): left as they are
    left: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def slurm_reason(health: NodeHealth) -> str:
    """The drain reason: ``topocast: <object> <state>[: <source's reason>]``, one line, capped."""
    text = f"{REASON_PREFIX} {health.blame} {health.state}"
    if health.reason:
        text += f": {health.reason}"
    return text if len(text) <= MAX_REASON else text[: MAX_REASON - 3] + "..."


def is_ours(reason: str | None) -> bool:
    """A Slurm drain reason topocast wrote (the only kind it ever resumes)."""
    return reason is not None and reason.startswith(REASON_PREFIX)
