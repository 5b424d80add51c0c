"""The simulators' clock: wall time plus an offset that only grows.

SQS (moto, through :mod:`topocast_sim.moto_fast`), the local Cloud Tasks queue and the AWS debouncer
the simulated pipelines build all read this clock, so a failed record can stay invisible for the
queue's real visibility timeout (Terraform's 1,800 s) without a test waiting half an hour: when a
pipeline has nothing to do but wait, ``run_until_idle`` moves the clock to the next moment something
becomes due. The offset never goes back, so a message in flight never becomes visible early.
"""

from __future__ import annotations

import threading
import time

__all__ = ["advance", "advance_to", "now", "offset"]

_LOCK = threading.Lock()
_offset = 0.0


def now() -> float:
    """Seconds since the epoch on the simulated clock (``time.time()`` plus the offset)."""
    return time.time() + _offset


def offset() -> float:
    """How far the simulated clock runs ahead of the wall clock."""
    return _offset


def advance(seconds: float) -> None:
    """Jump the clock forward (a negative or zero jump does nothing)."""
    global _offset
    if seconds > 0:
        with _LOCK:
            _offset += seconds


def advance_to(when: float) -> None:
    """Jump the clock forward to ``when`` (epoch seconds) unless it is already past it."""
    advance(when - now())
