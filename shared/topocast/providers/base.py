"""What every topology source returns."""

from __future__ import annotations

from dataclasses import dataclass, field

from topocast.graph import TopologyGraph


@dataclass
class DiscoveryResult:
    """A discovered graph plus what it cost and what looked wrong on the way."""

    graph: TopologyGraph
    #: API operation -> number of calls made (for metrics and benchmarks)
    api_calls: dict[str, int] = field(default_factory=dict)
    #: problems that did not stop discovery (nodes without a name tag, skipped instances...)
    warnings: list[str] = field(default_factory=list)
