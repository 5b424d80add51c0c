"""Blast-radius guard: never let one bad discovery wipe a cluster's topology from the scheduler.

A cloud API hiccup (throttled pages, a partial DescribeInstanceTopology, an IAM
change) looks exactly like "half the nodes vanished". Publishing that would make
Slurm schedule as if those nodes had no topology. So a publish that loses more
than ``max_loss_fraction`` of the nodes of the last *published* graph is held
until either

* a **reconcile** confirms it, node by node: a later full discovery sees those nodes gone too
  (:func:`reconcile_confirms`, recorded in :attr:`HoldRecord.confirmed_gone`), so two reads agree
  on every node let through; a held node the reconcile sees again is simply present again and
  no longer part of the loss, so stop/start churn (one held node back in every reconcile period)
  never keeps a stale map. A full discovery also confirms the published nodes the stored graph it
  replaces already lacked (:func:`seen_gone_twice`), so a loss whose publish is still waiting
  (debounce) when the reconcile runs is not held afterwards; or
* an **operator override** names the generation to let through
  (:func:`override_allows`; e.g. SSM parameter ``/topocast/<cluster>/guard/allow-generation``
  or env ``TOPOCAST_GUARD_ALLOW_GENERATION``).

An empty graph is never published, whatever the fraction or override.
The hold record is persisted by the cloud shell (:mod:`topocast.aws.publish_state`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from topocast.config import DEFAULT_GUARD_MAX_LOSS
from topocast.ports.records import HoldRecord

__all__ = [
    "OVERRIDE_ENV",
    "GuardDecision",
    "check",
    "confirm",
    "confirmed_gone",
    "override_allows",
    "read_override",
    "reconcile_confirms",
    "rehold",
    "seen_gone_twice",
]

OVERRIDE_ENV = "TOPOCAST_GUARD_ALLOW_GENERATION"


@dataclass(frozen=True)
class GuardDecision:
    allow: bool
    lost: list[str]
    reason: str


def check(
    previous_published_nodes: set[str] | None,
    new_nodes: set[str],
    max_loss_fraction: float = DEFAULT_GUARD_MAX_LOSS,
    confirmed_gone: Collection[str] = (),
    override: bool = False,
) -> GuardDecision:
    """May a graph with ``new_nodes`` replace the last published one?

    ``confirmed_gone``: nodes a reconcile's full read confirmed gone (:attr:`HoldRecord.confirmed_gone`);
    only the rest of the loss counts against ``max_loss_fraction``.
    """
    if not 0 <= max_loss_fraction <= 1:
        raise ValueError(f"max_loss_fraction must be within 0..1, got {max_loss_fraction}")
    previous = previous_published_nodes or set()
    lost = sorted(previous - new_nodes)
    if not new_nodes:
        return GuardDecision(False, lost, "the new graph has no nodes; an empty topology is never published")
    if not previous:
        return GuardDecision(True, [], "first publish")
    confirmed = set(confirmed_gone)
    unconfirmed = [n for n in lost if n not in confirmed]
    fraction = len(unconfirmed) / len(previous)
    summary = f"{len(lost)} of {len(previous)} published nodes ({len(lost) / len(previous):.0%}) would disappear"
    if len(unconfirmed) < len(lost):
        confirmed_count = len(lost) - len(unconfirmed)
        summary += f", {confirmed_count} of them confirmed gone by a reconcile ({fraction:.0%} unconfirmed)"
    if fraction <= max_loss_fraction:
        return GuardDecision(True, lost, f"{summary}; within the {max_loss_fraction:.0%} limit")
    if override:
        return GuardDecision(True, lost, f"{summary}; allowed by operator override")
    examples = ", ".join(unconfirmed[:5]) + (", ..." if len(unconfirmed) > 5 else "")
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


def reconcile_confirms(hold: HoldRecord, reconcile_nodes: set[str]) -> list[str]:
    """The held nodes a full discovery sees gone too: confirmed one by one (empty for an empty read)."""
    if not reconcile_nodes:
        return []
    return sorted(set(hold.lost) - reconcile_nodes)


def seen_gone_twice(
    published: Collection[str], earlier: Collection[str] | None, reconcile_nodes: set[str]
) -> list[str]:
    """Published nodes that both an earlier read (the stored graph a full discovery replaces) and the full
    read lack: two reads agree, so the loss is confirmed even before any publish of it was held."""
    if not reconcile_nodes or not earlier:
        return []
    return sorted(set(published) - set(earlier) - reconcile_nodes)


def confirm(hold: HoldRecord, gone: Collection[str] | None = None) -> HoldRecord:
    """``hold`` with ``gone`` (default: its whole loss) confirmed, on top of what was confirmed before."""
    more = set(hold.lost) if gone is None else set(gone) & set(hold.lost)
    return replace(
        hold, confirmed_gone=sorted(set(hold.confirmed_gone) | more), confirmed_at=datetime.now(UTC).isoformat()
    )


def confirmed_gone(hold: HoldRecord | None, lost: Collection[str]) -> set[str]:
    """The part of ``lost`` a reconcile confirmed (the nodes it saw gone); nothing without a hold."""
    return set() if hold is None else set(lost) & set(hold.confirmed_gone)


def rehold(previous: HoldRecord | None, hold: HoldRecord) -> HoldRecord:
    """A new hold keeps what a reconcile confirmed of the old one's nodes that are still lost."""
    if previous is None:
        return hold
    kept = sorted(set(previous.confirmed_gone) & set(hold.lost))
    return replace(hold, confirmed_gone=kept, confirmed_at=previous.confirmed_at if kept else None)


def read_override(read_store: Callable[[], str | None], env: Mapping[str, str] = os.environ) -> str | None:
    """The operator's allow-generation value: :data:`OVERRIDE_ENV` first (when set and not empty), then
    ``read_store()`` (the cloud's SSM parameter or override object; None when it is absent).

    The one order both clouds follow: the function's own environment wins, so an operator can let a
    generation through by a redeploy even when the parameter or object cannot be written.
    """
    return env.get(OVERRIDE_ENV) or read_store()
