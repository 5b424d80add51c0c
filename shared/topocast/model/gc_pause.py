"""Pause Python's cyclic garbage collector while building many small objects.

Parsing or rendering a 100k-node graph allocates a few million containers; each
allocation burst triggers collections that walk every object still alive, which
is over half the time of a large load or render. Nothing here creates reference
cycles, so collecting once afterwards loses nothing.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["paused_gc"]


@contextmanager
def paused_gc() -> Iterator[None]:
    """Disable the cyclic collector inside the block (nesting is fine); restore it after."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
