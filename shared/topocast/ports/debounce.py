"""The debounce seam's values: the :class:`Timer` a delivery carries, the :class:`DebouncePolicy`
its knobs travel in, and the :class:`Decision` the debouncer answers with.

A timer is parsed once, where its delivery enters (:func:`topocast.app.routing.timer`, for the SQS
record body on AWS and the Cloud Tasks CloudEvent on GCP alike), by :meth:`Timer.parse`; from there on
it is a typed value: :meth:`topocast.ports.protocols.Debouncer.on_timer` takes a :class:`Timer`, and
the senders write :meth:`Timer.to_json`. The policy is built once from the settings
(:meth:`DebouncePolicy.from_settings`) and passed whole to the runner, the pure transitions and the
adapters, so a new knob is one field here, not a keyword re-passed through every layer.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from topocast.config import (
    DEFAULT_DEBOUNCE_LEADING_EDGE,
    DEFAULT_DEBOUNCE_MAX_WAIT,
    DEFAULT_DEBOUNCE_QUIET,
    RenderSettings,
)

__all__ = ["TIMER_KIND", "Action", "DebouncePolicy", "Decision", "Timer"]

#: the ``kind`` of every timer body, on every cloud
TIMER_KIND = "topocast.debounce.timer"

#: ``retry``: ask the platform to redeliver this timer later (its render holds the lease)
Action = Literal["render", "wait", "idle", "drop", "retry"]


@dataclass(frozen=True, kw_only=True)
class DebouncePolicy:
    """Every debounce knob, frozen: built once (:meth:`from_settings`), passed whole.

    The defaults of the knobs a setting controls are :mod:`topocast.config`'s (one place); the others
    are not settings and are written only here.
    """

    #: a render is due when the graph has been quiet this long (``TOPOCAST_DEBOUNCE_QUIET_SECONDS``) ...
    quiet: float = DEFAULT_DEBOUNCE_QUIET
    #: ... or this long after the first unrendered change (``TOPOCAST_DEBOUNCE_MAX_WAIT_SECONDS``)
    max_wait: float = DEFAULT_DEBOUNCE_MAX_WAIT
    #: the first change after a quiet window renders at once (``TOPOCAST_DEBOUNCE_LEADING_EDGE``)
    leading_edge: bool = DEFAULT_DEBOUNCE_LEADING_EDGE
    #: how long a claimed render may take before a redelivered timer renders again; keep it at or below
    #: the timer queue's visibility timeout so a render that failed is retried by redelivery
    lease: float = 180.0
    #: a waiting timer this far past due is presumed lost and re-armed by the next observer
    lost_timer_grace: float = 300.0
    #: renders of the same pending change that may fail in a row before it is dead-lettered
    render_attempts: int = 3
    #: conditional writes of the debounce state one step tries before it gives up (lost races)
    write_attempts: int = 50

    def __post_init__(self) -> None:
        if not 0 <= self.quiet <= self.max_wait or self.max_wait <= 0:
            raise ValueError(f"debounce needs 0 <= quiet <= max_wait, got quiet={self.quiet} max_wait={self.max_wait}")
        if self.render_attempts < 1 or self.write_attempts < 1:
            raise ValueError("debounce needs at least one render attempt and one write attempt")

    @classmethod
    def from_settings(cls, settings: RenderSettings) -> DebouncePolicy:
        """The policy the functions run with (``TOPOCAST_DEBOUNCE_*``)."""
        return cls(
            quiet=settings.debounce_quiet,
            max_wait=settings.debounce_max_wait,
            leading_edge=settings.debounce_leading_edge,
        )


@dataclass(frozen=True)
class Timer:
    """One debounce timer, as its delivery carries it: ``{"kind", "cluster", "timer_id", "armed_at", "due_at"}``."""

    cluster: str
    timer_id: str
    #: when it was armed and when it is due (epoch seconds; informational: the stored state decides)
    armed_at: float | None = None
    due_at: float | None = None

    def to_json(self) -> dict[str, str | float | None]:
        return {
            "kind": TIMER_KIND,
            "cluster": self.cluster,
            "timer_id": self.timer_id,
            "armed_at": self.armed_at,
            "due_at": self.due_at,
        }

    @classmethod
    def parse(cls, body: object) -> Timer:
        """A timer body (JSON text or the parsed object); ValueError naming what is wrong."""
        if isinstance(body, str | bytes | bytearray):
            try:
                body = json.loads(body)
            except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
                raise ValueError(f"timer message is not JSON ({type(exc).__name__}: {str(exc)[:120]})") from None
        if not isinstance(body, Mapping) or body.get("kind") != TIMER_KIND:
            raise ValueError(f"not a {TIMER_KIND} message: {str(body)[:200]}")
        cluster, timer_id = body.get("cluster"), body.get("timer_id")
        if not isinstance(cluster, str) or not isinstance(timer_id, str):
            raise ValueError(f"timer message lacks cluster/timer_id: {str(body)[:200]}")
        times: list[float | None] = []
        for name in ("armed_at", "due_at"):
            value = body.get(name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
                raise ValueError(f"timer message {name} is not a number: {repr(value)[:80]}")
            times.append(None if value is None else float(value))
        return cls(cluster, timer_id, times[0], times[1])


@dataclass(frozen=True)
class Decision:
    """What to do now. ``render``: render the latest generation, then call ``on_rendered`` with ``timer_id``."""

    action: Action
    wait_seconds: float = 0.0
    reason: str = ""
    generation: int | None = None
    timer_id: str | None = None
    #: filled in by adapters that serve several clusters (the timer message names it)
    cluster: str | None = None

    @property
    def render(self) -> bool:
        return self.action == "render"
