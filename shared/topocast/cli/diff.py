"""``topocast diff OLD NEW``: load two graphs or two Slurm topology files, print what changed, exit like ``diff``.

Exit 0 when they are the same, 1 when they differ; bad input raises a
:class:`~topocast.errors.TopocastError` (the CLI prints one line and exits 2).

A side is a file, ``-`` (stdin, one side only), or a stored object by URI, fetched and
sha256-verified the way the pull agent fetches (``s3://bucket/<prefix>/<cluster>/graphs/
000000000042.json``, ``gs://...``, ``file:///...``): two generations of one deployment diff
directly. Each side is a graph JSON (it starts with ``{``) or a Slurm ``topology.conf`` (tree or
block) or ``topology.yaml``, read the way slurmctld reads it (:mod:`topocast.slurm.topodiff`);
both sides must be of one kind, a graph or a Slurm file.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from topocast.errors import InvalidGraphError
from topocast.model.diff import GraphDiff, diff_graphs, diff_placements, format_text
from topocast.model.graph import TopologyGraph, graph_from_json
from topocast.safeio.limits import MAX_GRAPH_BYTES, read_capped

__all__ = ["load_source", "run_diff"]

Placement = dict[str, tuple[str, ...]]


def _read(source: str) -> bytes:
    """The bytes of a file, ``-`` for stdin, or an ``s3://``, ``gs://`` or ``file://`` URI."""
    if source == "-":
        return read_capped(sys.stdin.buffer, MAX_GRAPH_BYTES, "<stdin>", InvalidGraphError)
    if "://" in source:
        from topocast.agents.pull import fetch  # the pull agent's verified fetch (cloud SDKs load only here)

        return fetch(source).content
    try:
        with Path(source).open("rb") as fh:
            return read_capped(fh, MAX_GRAPH_BYTES, source, InvalidGraphError)
    except IsADirectoryError:
        raise InvalidGraphError(f"{source}: is a directory, not a file") from None
    except OSError as exc:
        raise InvalidGraphError(f"{source}: cannot read ({exc.strerror})") from None


def load_source(source: str) -> TopologyGraph:
    """A graph JSON from a file, ``-`` or a stored generation (fetched and checked like ``pull``)."""
    side = load_side(source)
    if not isinstance(side, TopologyGraph):
        raise InvalidGraphError(f"{source}: a Slurm topology file, not a graph JSON (this needs the graph)")
    return side


def load_side(source: str) -> TopologyGraph | Placement:
    """A graph, or a Slurm topology file's node -> path (closest first): either side of ``diff``."""
    content = _read(source)
    label = "<stdin>" if source == "-" else source
    if content.lstrip()[:1] == b"{":
        return graph_from_json(content, label)
    from topocast.slurm.topodiff import placements

    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidGraphError(f"{label}: neither a graph JSON nor a Slurm topology file (not UTF-8 text)") from None
    return placements(text, label)


def run_diff(old: str, new: str, as_json: bool = False) -> int:
    if old == "-" and new == "-":
        raise InvalidGraphError("only one of OLD and NEW can be '-' (stdin)")
    before, after = load_side(old), load_side(new)
    d: GraphDiff
    if isinstance(before, TopologyGraph) and isinstance(after, TopologyGraph):
        d = diff_graphs(before, after)
    elif isinstance(before, dict) and isinstance(after, dict):
        d = diff_placements(before, after)
    else:
        graph, other = (old, new) if isinstance(before, TopologyGraph) else (new, old)
        raise InvalidGraphError(
            f"{graph} is a graph JSON and {other} a Slurm topology file: compare two graphs or two Slurm files "
            f"(render the graph first: topocast render --graph {graph} -f slurm-tree)"
        )
    if as_json:
        sys.stdout.write(json.dumps({"old": old, "new": new, **d.to_json()}, indent=2) + "\n")
    else:
        sys.stdout.write(format_text(d, old, new))
    return 0 if d.same else 1
