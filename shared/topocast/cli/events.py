"""``topocast events explain``: what the functions would do with one delivery, without running them.

The input is one delivery exactly as a function receives it; the same parsers the functions use
(:func:`topocast.aws.events.parse_event`, :func:`topocast.gcp.events.parse_cloud_event`) read it:

* AWS: an EventBridge event, an SQS record or batch (``{"Records": [{"eventSource": "aws:sqs",
  "body": ...}]}``; each record is one event), an S3 event notification, an EventBridge
  Scheduler Input (any other JSON object, or the text ``reconcile``);
* GCP: a CloudEvent in structured JSON (``{"specversion": ...}``), in binary mode (HTTP-style
  ``ce-*`` header lines, a blank line, the body), or a raw Pub/Sub push
  (``{"message": ..., "subscription": ...}``, converted the way functions-framework does).

One JSON line per event: ``{"cloud", "kind", "action", "instances", "reason"}``; a delivery with no
event at all (``[]``, ``{"Records": []}``) prints ``0 events`` on stderr. An object that is no known
event is what the AWS function takes for an EventBridge Scheduler Input: its line says it is
"treated as a manual reconcile". One record too deep or too large for a parser is one ``rejected``
line; the other records of its batch keep theirs. The exit code is
0 when the function would accept the delivery (``ignored`` and ``noted`` included) and 2 when it
would dead-letter any of it. What the function does afterwards with its settings (cluster
filters, project, zones) is not shown: explain reads no configuration.
Nor is what discovery would set aside (the graph's ``unplaced``): a delivery names instances or an
upload, never their topology data, so only the discover outcome, its metric and the graph know it.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from topocast.errors import TopocastError
from topocast.model import changes
from topocast.safeio.limits import MAX_JSON_DEPTH
from topocast.safeio.validation import check_json_depth, load_json

__all__ = ["explain", "explain_delivery"]

Line = dict[str, Any]
_INTERNAL = {
    "dev.topocast.discover.window.v1": "re-reads the VMs queued in this discover window",
    "dev.topocast.debounce.timer.v1": "a debounce timer for the render function",
    "dev.topocast.publish.v1": "a publish hand-off for the publish function",
    "google.cloud.storage.object.v1.finalized": "a graph generation landing in the bucket, for the render function",
}


def _line(cloud: str, kind: str, action: str, instances: list[str], reason: str) -> Line:
    return {"cloud": cloud, "kind": kind, "action": action, "instances": instances, "reason": reason}


def _from_outcome(cloud: str, outcome: Any) -> Line:
    if isinstance(outcome, changes.InstanceChange):
        reason = outcome.detail.get("state") or outcome.detail.get("method") or outcome.kind
        if "changed-tag-keys" in outcome.detail:  # whether a key decides membership needs the function's filters
            keys = outcome.detail["changed-tag-keys"].replace(",", ", ") or "none"
            reason = f"tag keys changed: {keys}; re-read only when one is a membership tag (TOPOCAST_FILTERS tag:...)"
        if outcome.follow:
            reason += "; re-read until it runs again or is gone (bounded)"
        return _line(cloud, outcome.kind, outcome.action, [outcome.instance], reason)
    if isinstance(outcome, changes.Recheck):
        why = f"re-check {outcome.attempt} of followed instance(s) not steady yet (bounded)"
        return _line(cloud, outcome.kind, "upsert", [i for i, _ in outcome.instances], why)
    if isinstance(outcome, changes.Reconcile):
        why = outcome.reason + (f" (cluster {outcome.cluster})" if outcome.cluster else "")
        return _line(cloud, outcome.kind, "reconcile", [], why)
    if isinstance(outcome, changes.Noted):
        return _line(cloud, outcome.kind, "noted", list(outcome.instances), outcome.reason)
    if isinstance(outcome, changes.Ignored):
        return _line(cloud, outcome.kind, "ignored", [], outcome.reason)
    kind = type(outcome).__name__
    return _line(cloud, kind, "internal", [], "topocast's own hand-off between its functions")


# ----- AWS -------------------------------------------------------------------------------------------
def _aws_kind(body: Any) -> str:
    try:
        data = load_json(body, "event body", changes.MalformedEvent)  # depth-checked: never RecursionError
    except changes.MalformedEvent:
        return "?"
    if isinstance(data, dict) and ("detail-type" in data or "detail_type" in data):
        return f"{data.get('source', '?')}/{data.get('detail-type') or data.get('detail_type')}"
    return "?"


def _aws(body: Any, uploads: str | None) -> Line:
    from topocast.aws.events import parse_event

    if body == _TOO_DEEP or (not isinstance(body, str | bytes) and _TOO_DEEP_JSON in json.dumps(body)):
        return _line("aws", "?", "rejected", [], f"event body: nested deeper than {MAX_JSON_DEPTH} levels")
    try:
        line = _from_outcome("aws", parse_event(body, uploads=uploads))
    except changes.MalformedEvent as exc:
        return _line("aws", _aws_kind(body), "rejected", [], str(exc))
    if line["kind"] == "scheduler/input" and not _scheduler_shaped(body):
        line["reason"] += f"; {_UNKNOWN_OBJECT}"
    return line


_UNKNOWN_OBJECT = (
    "not a known event (no detail-type, Records, specversion or cluster/reason): treated as a manual reconcile,"
    " as the discover function takes any other JSON object for an EventBridge Scheduler Input"
)


def _scheduler_shaped(body: Any) -> bool:
    """True for the documented Scheduler Input (``{"cluster": ..., "reason": ...}``, nothing else)."""
    try:
        data = load_json(body, "event body", changes.MalformedEvent)
    except changes.MalformedEvent:
        return False
    return isinstance(data, dict) and bool(data) and data.keys() <= {"cluster", "reason"}


# ----- GCP -------------------------------------------------------------------------------------------
def _gcp(event: Any) -> Line:
    from topocast.gcp.events import parse_cloud_event

    attrs = event[0] if isinstance(event, tuple) else event
    ce_type = attrs.get("type", "?") if isinstance(attrs, dict) else "?"
    if not isinstance(ce_type, str):
        got = "null" if ce_type is None else type(ce_type).__name__
        return _line("gcp", "?", "rejected", [], f"CloudEvent attribute type: must be a string, got {got}")
    if ce_type in _INTERNAL:
        try:
            parse_cloud_event(event)
        except changes.MalformedEvent as exc:
            return _line("gcp", ce_type, "rejected", [], str(exc))
        return _line("gcp", ce_type, "internal", [], _INTERNAL[ce_type])
    try:
        return _from_outcome("gcp", parse_cloud_event(event))
    except changes.MalformedEvent as exc:
        return _line("gcp", str(ce_type), "rejected", [], str(exc))


def _pubsub_push(push: dict[str, Any]) -> dict[str, Any]:
    """A raw Pub/Sub push body as the CloudEvent functions-framework turns it into."""
    raw = push.get("message")
    message: dict[str, Any] = raw if isinstance(raw, dict) else {}
    return {
        "specversion": "1.0",
        "type": "google.cloud.pubsub.topic.v1.messagePublished",
        "source": f"//pubsub.googleapis.com/{push.get('subscription', '')}",
        "id": message.get("messageId", ""),
        "data": {"message": message, "subscription": push.get("subscription")},
    }


def _binary_mode(text: str) -> tuple[dict[str, Any], bytes] | None:
    """``ce-*`` header lines (an optional request line first), a blank line, the body; None if not that."""
    head, sep, body = text.replace("\r\n", "\n").partition("\n\n")
    lines = [ln for ln in head.split("\n") if ln.strip()]
    if lines and lines[0].split(" ", 1)[0] in ("POST", "PUT"):
        lines = lines[1:]
    headers: dict[str, str] = {}
    for ln in lines:
        name, colon, value = ln.partition(":")
        if not colon or " " in name.strip():
            return None
        headers[name.strip().lower()] = value.strip()
    attrs = {k.removeprefix("ce-"): v for k, v in headers.items() if k.startswith("ce-")}
    if not attrs:
        return None
    if "content-type" in headers:
        attrs["datacontenttype"] = headers["content-type"]
    return attrs, body.encode() if sep else b""


# ----- one delivery -------------------------------------------------------------------------------------
def _events(text: str, uploads: str | None) -> Iterator[Line]:
    stripped = text.strip()
    if not stripped:
        yield _line("?", "?", "rejected", [], "empty delivery")
        return
    try:
        data = json.loads(_prune_too_deep(stripped))
    except ValueError:
        binary = _binary_mode(text)
        if binary is not None:
            yield _gcp(binary)
        else:
            yield _aws(stripped, uploads)  # the text 'reconcile' (a Scheduler Input), or a clear rejection
        return
    yield from _json_delivery(data, uploads)


#: stands in for a value nested too deep to parse, so the rest of the delivery still is
_TOO_DEEP = "\u0000topocast: nested too deep"
_TOO_DEEP_JSON = json.dumps(_TOO_DEEP)
#: the levels a delivery wraps an event in (a list, ``Records``, a record, its ``body``)
_WRAPPING = 4
_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]')


def _prune_too_deep(text: str) -> str:
    """``text`` with every value nested deeper than one event may be replaced by :data:`_TOO_DEEP`.

    ``json.loads`` recurses per level: one record of 100,000 ``[`` would end the whole batch in
    RecursionError. Scanned without recursion, and only when the brackets could be that deep.
    """
    limit = MAX_JSON_DEPTH + _WRAPPING
    try:
        check_json_depth(text, "delivery", TopocastError, limit)
        return text
    except TopocastError:
        pass
    out: list[str] = []
    depth, kept, cut = 0, 0, -1  # cut: where the value being dropped starts (-1: none)
    for tok in _TOKEN.finditer(text):
        ch = tok.group()
        if ch in "[{":
            depth += 1
            if depth > limit and cut < 0:
                out.append(text[kept : tok.start()])
                cut = tok.start()
        elif ch in "]}":
            depth -= 1
            if cut >= 0 and depth == limit:
                out.append(json.dumps(_TOO_DEEP))
                kept, cut = tok.end(), -1
    if cut >= 0:  # never closed: the delivery is truncated as well, let the parser say so
        return text
    out.append(text[kept:])
    return "".join(out)


def _json_delivery(data: Any, uploads: str | None) -> Iterator[Line]:
    if isinstance(data, list):
        for item in data:
            yield from _json_delivery(item, uploads)
        return
    if not isinstance(data, dict):
        yield _aws(json.dumps(data), uploads)
        return
    records = data.get("Records")
    if records == [] and data.keys() == {"Records"}:
        return  # an empty batch: no event
    if (
        isinstance(records, list)
        and records
        and all(isinstance(r, dict) and (r.get("eventSource") == "aws:sqs" or "receiptHandle" in r) for r in records)
    ):
        for rec in records:  # an SQS batch: one event per record
            yield _aws(rec.get("body", ""), uploads)
        return
    if "body" in data and ("messageId" in data or "receiptHandle" in data):
        yield _aws(data["body"], uploads)  # one SQS record
    elif "specversion" in data:
        yield _gcp(data)
    elif isinstance(data.get("message"), dict) and "subscription" in data:
        yield _gcp(_pubsub_push(data))
    elif "protoPayload" in data:  # a bare LogEntry: what Eventarc would send for it
        yield _gcp({"specversion": "1.0", "type": "google.cloud.audit.log.v1.written", "id": "", "data": data})
    else:
        yield _aws(data, uploads)


def explain_delivery(text: str, uploads: str | None = None) -> tuple[list[Line], int]:
    """(one line per event, exit code) for one delivery given as text."""
    lines = list(_events(text, uploads))
    return lines, 2 if any(line["action"] == "rejected" for line in lines) else 0


def explain(source: Path | None, uploads: str | None = None) -> int:
    """``topocast events explain [FILE|-]``: print one JSON line per event, return the exit code."""
    if source is None or str(source) == "-":
        text = sys.stdin.read()
    else:
        try:
            text = source.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            sys.stderr.write(f"topocast: error: {source}: cannot read ({exc})\n")
            return 2
    lines, code = explain_delivery(text, uploads)
    for line in lines:
        sys.stdout.write(json.dumps(line) + "\n")
    if not lines:
        sys.stderr.write("0 events (the delivery holds none: nothing to do)\n")
    return code
