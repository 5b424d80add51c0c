"""The three AWS Lambda handlers: parse the SQS batch, run the use case, map its outcome.

The pipeline's decisions live in :mod:`topocast.app` (which use case a delivery is for, and whether
it is this cluster's: :mod:`topocast.app.routing`) and the wiring in :mod:`topocast.aws.root`;
this module only speaks Lambda's SQS contract. An outcome ``done`` acknowledges a record,
``retry`` reports it in ``batchItemFailures`` (SQS redelivers it; after the redrive policy's
``maxReceiveCount`` it reaches the DLQ), ``drop`` sends it to the DLQ at once with the reason as
the ``topocast-reject-reason`` attribute. Discover runs one use case per batch (one discovery for
many events); render and publish one per record.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from topocast.app import routing
from topocast.app.discover import discover as run_discover
from topocast.app.outcome import Outcome
from topocast.aws.lambda_tools import lambda_entry
from topocast.aws.root import AwsRuntime, build
from topocast.config import settings_from_env

__all__ = ["discover_batch", "discover_handler", "publish_batch", "publish_handler", "render_batch"]
__all__ += ["render_handler", "runtime", "use_runtime"]

log = logging.getLogger("topocast")
_RUNTIME: AwsRuntime | None = None


def runtime() -> AwsRuntime:
    """The process-wide runtime (built from env on first use; tests may replace it with :func:`use_runtime`)."""
    global _RUNTIME
    if _RUNTIME is None:
        _RUNTIME = build(settings_from_env())
    return _RUNTIME


def use_runtime(rt: AwsRuntime | None) -> None:
    global _RUNTIME
    _RUNTIME = rt


def _to_dlq(rt: AwsRuntime, record: dict[str, Any], reason: str) -> bool:
    """Send a record to the DLQ with the reason; False when there is none (the redrive policy moves it)."""
    if not rt.settings.dlq_url:
        return False
    try:
        rt.sqs.send_message(
            QueueUrl=rt.settings.dlq_url,
            MessageBody=record.get("body", ""),
            MessageAttributes={"topocast-reject-reason": {"DataType": "String", "StringValue": reason[:1000]}},
        )
    except Exception as exc:  # the DLQ itself failed: keep the message, retry later
        log.error("could not send %s to the DLQ: %s", record.get("messageId"), exc)
        return False
    return True


def _map(rt: AwsRuntime, record: dict[str, Any], outcome: Outcome, failures: list[str]) -> None:
    """``drop`` goes to the DLQ now, with the reason (discover and render; their roles may send there)."""
    if outcome.status == "retry" or (outcome.status == "drop" and not _to_dlq(rt, record, outcome.reason)):
        failures.append(record.get("messageId", "?"))
    if outcome.status != "done":
        log.warning("%s %s: %s", outcome.status, record.get("messageId"), outcome.reason)


def _map_by_redrive(record: dict[str, Any], outcome: Outcome, failures: list[str]) -> None:
    """``drop`` is left to the queue's redrive policy (publish: its role cannot send to the DLQ)."""
    if outcome.status != "done":
        failures.append(record.get("messageId", "?"))
        log.warning("%s %s: %s", outcome.status, record.get("messageId"), outcome.reason)


def _response(failures: list[str]) -> dict[str, Any]:
    return {"batchItemFailures": [{"itemIdentifier": mid} for mid in failures]}


def discover_batch(event: dict[str, Any], rt: AwsRuntime | None = None) -> dict[str, Any]:
    """Core of the discover Lambda: one discovery for every valid event of the batch."""
    from topocast.aws.events import parse_event
    from topocast.model.changes import Ignored, MalformedEvent, Noted

    rt = rt or runtime()
    failures: list[str] = []
    valid: list[dict[str, Any]] = []
    events = []
    for rec in event.get("Records") or []:
        try:
            parsed = parse_event(rec.get("body", ""), uploads=rt.settings.uploads_uri)
        except MalformedEvent as exc:
            _map(rt, rec, routing.rejected(rt.metrics, exc), failures)
            continue
        if not isinstance(parsed, Ignored | Noted):  # acknowledged whatever discovery does
            valid.append(rec)
        events.append(parsed)
    if events:
        outcome = run_discover(rt.discover_ports(), events)
        for rec in valid if outcome.status != "done" else []:
            _map(rt, rec, outcome, failures)
    return _response(failures)


def render_batch(event: dict[str, Any], rt: AwsRuntime | None = None) -> dict[str, Any]:
    """Core of the render Lambda: each record is a debounce timer."""
    rt = rt or runtime()
    failures: list[str] = []
    for rec in event.get("Records") or []:
        _map(rt, rec, _guarded(lambda rec=rec: routing.timer(rt.render_ports(), rec.get("body", ""))), failures)
    return _response(failures)


def publish_batch(event: dict[str, Any], rt: AwsRuntime | None = None) -> dict[str, Any]:
    """Core of the publish Lambda: each record names a generation."""
    rt = rt or runtime()
    failures: list[str] = []
    for rec in event.get("Records") or []:
        try:
            body = json.loads(rec.get("body", ""))
            generation, cluster = int(body["generation"]), body.get("cluster")
            if cluster is not None and not isinstance(cluster, str):
                raise TypeError(f"cluster must be a string, got {cluster!r}")
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
            reason = f"publish message is not {{'generation': N}}: {exc}"
            _map_by_redrive(rec, routing.rejected(rt.metrics, reason), failures)
            continue
        run = lambda g=generation, c=cluster: routing.publish_request(rt.publish_ports(), c, g)  # noqa: E731
        _map_by_redrive(rec, _guarded(run), failures)
    return _response(failures)


def _guarded(run: Any) -> Outcome:
    """A use case's outcome; an error it did not decide about (storage down...) means: retry."""
    try:
        outcome: Outcome = run()
    except Exception as exc:
        log.exception("failed, will be retried: %s", exc)
        return Outcome.retry(str(exc))
    return outcome


@lambda_entry(runtime)
def discover_handler(event: dict[str, Any], rt: AwsRuntime) -> dict[str, Any]:
    """Lambda: SQS batch of instance events -> one discovery -> new graph generation."""
    return discover_batch(event, rt)


@lambda_entry(runtime)
def render_handler(event: dict[str, Any], rt: AwsRuntime) -> dict[str, Any]:
    """Lambda: debounce timers -> render the latest generation -> publish queue."""
    return render_batch(event, rt)


@lambda_entry(runtime)
def publish_handler(event: dict[str, Any], rt: AwsRuntime) -> dict[str, Any]:
    """Lambda: manifests -> guard -> SSM / Kubernetes."""
    return publish_batch(event, rt)
