"""``topocast history``: the stored generations of a cluster's graph over time.

Reads the store the pipeline writes (``s3://bucket/prefix``, ``gs://bucket/prefix``, or a local directory /
``file:///dir`` holding ``<cluster>/graphs/``) through its history index (``graphs/index.json``,
:mod:`topocast.pipeline.history`): one read of the pointer and one of the index, whatever the number of
generations. A generation loaded for ``--out`` is checked against the sha256 the pointer or index recorded.

* no flag: one line per generation (time, generation, nodes, joined / moved / left);
* ``--node X``: every change of node X (joined, moved, left), with its place;
* ``--at T``: the generation live at T; with ``--node X``, where X was at T; ``--out FILE`` writes that
  generation's graph (for ``score --graph``, ``diff``, ``render --graph html``).
"""

from __future__ import annotations

import json
import re
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from topocast.errors import TopocastError
from topocast.model.history import HistoryIndex, Place
from topocast.pipeline.store import ObjectGraphStore

__all__ = ["open_store", "parse_time", "run_history"]


def parse_time(text: str, what: str = "--at") -> datetime:
    """An ISO 8601 time (``2026-12-01T10:00Z``); one without a zone is UTC."""
    try:
        at = datetime.fromisoformat(text.strip())
    except ValueError:
        raise TopocastError(f"{what} {text!r}: not a time (expected ISO 8601, e.g. 2026-12-01T10:00Z)") from None
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


#: bucket names the services accept (S3: 3-63 of a-z 0-9 . -; Cloud Storage also _, up to 222 with dots)
_BUCKET = {
    "s3": re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]"),
    "gs": re.compile(r"[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]"),
}


def cloud_errors(uri: str) -> tuple[type[BaseException], ...]:
    """The exceptions the SDK behind ``uri`` raises for a bucket it cannot read (denied, missing, unreachable).

    Missing credentials are not among them: the CLI words those itself (``topocast: error: no AWS credentials``)."""
    scheme = urlparse(uri).scheme
    if scheme == "s3":
        from botocore.exceptions import ClientError, ConnectionError, ParamValidationError

        return (ClientError, ConnectionError, ParamValidationError)
    if scheme in ("gs", "gcs"):
        from google.api_core.exceptions import GoogleAPIError

        return (GoogleAPIError,)
    return ()


def open_store(uri: str, cluster: str) -> ObjectGraphStore:
    """The graph store of ``cluster`` in ``uri``: s3://bucket/prefix, gs://bucket/prefix, file:///dir or a dir."""
    parsed = urlparse(uri)
    if parsed.scheme in ("s3", "gs", "gcs"):
        if not parsed.netloc:
            raise TopocastError(f"--store {uri!r}: expected s3://bucket/prefix or gs://bucket/prefix")
        if not _BUCKET["s3" if parsed.scheme == "s3" else "gs"].fullmatch(parsed.netloc):
            raise TopocastError(f"--store {uri!r}: {parsed.netloc!r} is not a bucket name")
        prefix = parsed.path.strip("/")
        if parsed.scheme == "s3":
            from topocast.aws.clients import s3_client
            from topocast.aws.s3_objects import S3Objects

            return ObjectGraphStore(S3Objects(parsed.netloc, s3_client()), prefix, cluster)
        from topocast.gcp.clients import storage_client
        from topocast.gcp.gcs import GcsObjects

        return ObjectGraphStore(GcsObjects(parsed.netloc, storage_client()), prefix, cluster)
    if parsed.scheme not in ("", "file"):
        raise TopocastError(f"--store {uri!r}: expected s3://, gs://, file:// or a directory")
    root = Path(unquote(parsed.path) if parsed.scheme == "file" else uri)
    if not (root / cluster / "graphs").is_dir():
        raise TopocastError(f"--store {uri!r}: no {cluster}/graphs/ directory there (is --cluster right?)")
    from topocast.pipeline.dir_objects import DirObjects

    return ObjectGraphStore(DirObjects(root), "", cluster)


def _place(place: Place | None) -> str:
    if place is None:
        return "(not in the graph)"
    fabric = " > ".join(reversed(place.get("f", []))) or "(no fabric)"
    domain = place.get("a")
    sub = place.get("s")
    return fabric + (f"  domain {domain}" + (f"/{sub}" if sub else "") if domain else "")


def _counts(entry: dict[str, Any]) -> str:
    return f"+{len(entry['joined'])} ~{len(entry['moved'])} -{len(entry['left'])}"


def run_history(store_uri: str, cluster: str, node: str | None, at_text: str | None, out: Path | None,
                as_json: bool) -> int:  # fmt: skip
    at = parse_time(at_text) if at_text else None
    try:
        return _history(store_uri, cluster, node, at, out, as_json)
    except cloud_errors(store_uri) as exc:
        raise TopocastError(f"--store {store_uri}: cannot read ({_first_line(exc)})") from None


def _first_line(exc: BaseException) -> str:
    return next(iter(str(exc).strip().splitlines()), type(exc).__name__)[:300]


def _history(store_uri: str, cluster: str, node: str | None, at: datetime | None, out: Path | None,
             as_json: bool) -> int:  # fmt: skip
    from topocast.pipeline import history

    store = open_store(store_uri, cluster)
    index = history.load(store, since=at, complete=at is None)
    if out is not None and at is None:
        raise TopocastError("--out writes the graph live at a time: give --at too")
    result: dict[str, Any] = {"cluster": cluster, "generations": len(index.entries)}
    lines: list[str] = []
    if at is not None:
        entry = index.entry_at(at)
        if entry is None:
            first = index.time_of(0).isoformat() if index.entries else "never"
            raise TopocastError(f"no generation was live at {at.isoformat()} (the first was written {first})")
        result["at"] = at.isoformat()
        result["generation"] = {"generation": entry["generation"], "written_at": entry["written_at"],
                                "sha256": entry["sha256"], "nodes": entry["nodes"]}  # fmt: skip
        lines.append(f"at {at.isoformat()}: generation {entry['generation']} (written {entry['written_at']}, "
                     f"{entry['nodes']} nodes)")  # fmt: skip
        if node is not None:
            event, place = index.place_at(node, at)
            result["node"] = {"name": node, "place": place, "since": event.to_json() if event else None}
            since = f" (since generation {event.generation}, {event.kind} {event.at.isoformat()})" if event else ""
            lines.append(f"{node}: {_place(place)}{since}")
        if out is not None:
            from topocast.model.graph import dump_graph
            from topocast.safeio.files import write_out

            _, graph = history.graph_at(store, index, at)
            write_out(out, dump_graph(graph))
            lines.append(f"graph of generation {entry['generation']} -> {out}")
    elif node is not None:
        events = index.events(node)
        if not events:
            raise TopocastError(f"node {node!r} is in no stored generation of cluster {cluster!r}")
        result["node"] = {"name": node, "events": [e.to_json() for e in events]}
        lines.extend(f"{e.at.isoformat()}  gen {e.generation:>6}  {e.kind:<6}  {_place(e.place)}" for e in events)
    else:
        result["entries"] = [
            {k: e[k] for k in ("generation", "written_at", "sha256", "nodes")}
            | {"joined": len(e["joined"]), "moved": len(e["moved"]), "left": len(e["left"])}
            for e in index.entries
        ]
        lines.extend(f"{e['written_at']}  gen {e['generation']:>6}  {e['nodes']:>7} nodes  {_counts(e)}"
                     for e in index.entries)  # fmt: skip
    if as_json:
        sys.stdout.write(json.dumps(result, indent=2) + "\n")
    else:
        sys.stdout.write("\n".join(lines) + "\n")
    return 0


def graph_live_at(store_uri: str, cluster: str, at: datetime | None) -> tuple[Any, str]:
    """(the graph live at ``at`` or the latest when None, a label naming its generation) for ``score``."""
    try:
        return _graph_live_at(store_uri, cluster, at)
    except cloud_errors(store_uri) as exc:
        raise TopocastError(f"--store {store_uri}: cannot read ({_first_line(exc)})") from None


def _graph_live_at(store_uri: str, cluster: str, at: datetime | None) -> tuple[Any, str]:
    from topocast.pipeline import history

    store = open_store(store_uri, cluster)
    if at is None:
        latest = store.latest()
        if latest is None:
            raise TopocastError(f"--store {store_uri!r}: no graph generations stored for {cluster!r}")
        return latest.graph, f"generation {latest.generation} (latest)"
    index: HistoryIndex = history.load(store, since=at)
    entry, graph = history.graph_at(store, index, at)
    return graph, f"generation {entry['generation']} (live at {at.isoformat()})"
