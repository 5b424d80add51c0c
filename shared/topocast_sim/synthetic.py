"""Synthetic cluster graphs for benchmarks, demos and property tests.

The fat tree itself is :mod:`topocast.model.synth` (also behind ``topocast synth``); this module keeps the
names benches and tests import and adds the validated model.
"""

from __future__ import annotations

from typing import Any

from topocast.model.graph import TopologyGraph
from topocast.model.synth import synthetic_data

__all__ = ["synthetic_data", "synthetic_graph"]


def synthetic_graph(n: int, **shape: Any) -> TopologyGraph:
    """:func:`synthetic_data` as the validated model (the same keyword arguments)."""
    # model_construct would skip validation; benchmarks and demos want the real validated model
    return TopologyGraph.model_validate(synthetic_data(n, **shape))
