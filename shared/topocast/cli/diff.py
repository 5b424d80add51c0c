"""``topocast diff OLD NEW``: load two graphs, print what changed, exit like ``diff``.

Exit 0 when the graphs are the same, 1 when they differ; bad input raises a
:class:`~topocast.errors.TopocastError` (the CLI prints one line and exits 2).

A side is a graph file, ``-`` (stdin, one side only), or a stored generation by URI, fetched
and sha256-verified the way the pull agent fetches (``s3://bucket/<prefix>/<cluster>/graphs/
000000000042.json``, ``gs://...``, ``file:///...``): two generations of one deployment diff
directly.
"""

from __future__ import annotations

import json
import sys

from topocast.errors import InvalidGraphError
from topocast.model.diff import diff_graphs, format_text
from topocast.model.graph import TopologyGraph, graph_from_json, load_graph

__all__ = ["load_source", "run_diff"]


def load_source(source: str) -> TopologyGraph:
    """A graph file, ``-`` for stdin, or an ``s3://``, ``gs://`` or ``file://`` URI."""
    if source == "-":
        return graph_from_json(sys.stdin.buffer.read(), "<stdin>")
    if "://" in source:
        from topocast.agents.pull import fetch  # the pull agent's verified fetch (cloud SDKs load only here)

        return graph_from_json(fetch(source).content, source)
    return load_graph(source)


def run_diff(old: str, new: str, as_json: bool = False) -> int:
    if old == "-" and new == "-":
        raise InvalidGraphError("only one of OLD and NEW can be '-' (stdin)")
    d = diff_graphs(load_source(old), load_source(new))
    if as_json:
        sys.stdout.write(json.dumps({"old": old, "new": new, **d.to_json()}, indent=2) + "\n")
    else:
        sys.stdout.write(format_text(d, old, new))
    return 0 if d.same else 1
