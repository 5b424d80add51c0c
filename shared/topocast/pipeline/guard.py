"""Blast-radius guard: never let one bad discovery wipe a cluster's topology from the scheduler.

A cloud API hiccup (throttled pages, a partial DescribeInstanceTopology, an IAM
change) looks exactly like "half the nodes vanished". Publishing that would make
Slurm schedule as if those nodes had no topology. So a publish that loses more
than ``max_loss_fraction`` of the nodes of the last *published* graph is held
until either

* a **reconcile** confirms it: a later full discovery sees the same nodes gone
  (:func:`reconcile_confirms`, recorded in the :class:`HoldRecord`), or
* an **operator override** names the generation to let through
  (:func:`override_allows`; e.g. SSM parameter ``/topocast/<cluster>/guard/allow-generation``
  or env ``TOPOCAST_GUARD_ALLOW_GENERATION``).

An empty graph is never published, whatever the fraction or override.
The hold record is persisted by the cloud shell (:mod:`topocast.aws.publish_state`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

DEFAULT_MAX_LOSS_FRACTION = 0.10
OVERRIDE_ENV = "TOPOCAST_GUARD_ALLOW_GENERATION"


@dataclass(frozen=True)
class GuardDecision:
    allow: bool
    lost: list[str]
    reason: str


def check(
    previous_published_nodes: set[str] | None,
    new_nodes: set[str],
    max_loss_fraction: float = DEFAULT_MAX_LOSS_FRACTION,
    confirmed_by_reconcile: bool = False,
    override: bool = False,
) -> GuardDecision:
    """May a graph with ``new_nodes`` replace the last published one?"""
    if not 0 <= max_loss_fraction <= 1:
        raise ValueError(f"max_loss_fraction must be within 0..1, got {max_loss_fraction}")
    previous = previous_published_nodes or set()
    lost = sorted(previous - new_nodes)
    if not new_nodes:
        return GuardDecision(False, lost, "the new graph has no nodes; an empty topology is never published")
    if not previous:
        return GuardDecision(True, [], "first publish")
    fraction = len(lost) / len(previous)
    summary = f"{len(lost)} of {len(previous)} published nodes ({fraction:.0%}) would disappear"
    if fraction <= max_loss_fraction:
        return GuardDecision(True, lost, f"{summary}; within the {max_loss_fraction:.0%} limit")
    if override:
        return GuardDecision(True, lost, f"{summary}; allowed by operator override")
    if confirmed_by_reconcile:
        return GuardDecision(True, lost, f"{summary}; confirmed by a reconcile")
    examples = ", ".join(lost[:5]) + (", ..." if len(lost) > 5 else "")
    return GuardDecision(
        False,
        lost,
        f"held: {summary} (over the {max_loss_fraction:.0%} limit), e.g. {examples}; "
        "waiting for a reconcile to confirm or an operator override",
    )


def override_allows(value: str | None, generation: int) -> bool:
    """An override names one generation (``"42"``); anything else allows nothing."""
    if value is None:
        return False
    text = value.strip()
    return text.isdigit() and int(text) == generation


@dataclass(frozen=True)
class HoldRecord:
    """A publish the guard held, waiting for confirmation."""

    generation: int
    lost: list[str]
    previous_generation: int | None
    reason: str
    held_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat())
    confirmed: bool = False
    confirmed_at: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "generation": self.generation,
            "lost": self.lost,
            "previous_generation": self.previous_generation,
            "reason": self.reason,
            "held_at": self.held_at,
            "confirmed": self.confirmed,
            "confirmed_at": self.confirmed_at,
        }

    @classmethod
    def from_json(cls, data: Any, source: str = "hold record") -> HoldRecord:
        try:
            return cls(
                generation=int(data["generation"]),
                lost=[str(n) for n in data["lost"]],
                previous_generation=data.get("previous_generation"),
                reason=str(data.get("reason", "")),
                held_at=str(data.get("held_at", "")),
                confirmed=bool(data.get("confirmed", False)),
                confirmed_at=data.get("confirmed_at"),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{source}: malformed guard hold record ({exc!r})") from None


def reconcile_confirms(hold: HoldRecord, reconcile_nodes: set[str]) -> bool:
    """A full discovery confirms a hold when every node the hold would lose is still gone."""
    return bool(reconcile_nodes) and not (set(hold.lost) & reconcile_nodes)


def confirm(hold: HoldRecord) -> HoldRecord:
    return replace(hold, confirmed=True, confirmed_at=datetime.now(UTC).isoformat())


def hold_covers(hold: HoldRecord | None, lost: list[str]) -> bool:
    """Does a confirmed hold vouch for this loss? Only for nodes the reconcile saw gone."""
    return hold is not None and hold.confirmed and set(lost) <= set(hold.lost)
