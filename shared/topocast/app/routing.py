"""Which use case a delivery goes to, and whether it is this cluster's: decided once, for every cloud.

A cloud's handlers parse a delivery (an SQS record, a CloudEvent) and map the :class:`Outcome` back
(``batchItemFailures`` and the DLQ on AWS, the HTTP answer on GCP); the decisions in between are here,
with the same counters on every cloud:

* a delivery no use case can take (it does not parse, or it is for another function):
  :func:`rejected`, counted ``malformed`` and dead-lettered (``drop``; GCP, which has no DLQ,
  answers 200 and logs it as an error);
* a delivery for another cluster or about something outside the provider's scope: :func:`ignored`,
  counted ``ignored`` and acknowledged; a well-formed event topocast does not act on (``Ignored`` /
  ``Noted``) outside discover: :func:`skipped` (discover counts its own);
* a debounce timer (:func:`timer`), a graph generation written by someone (:func:`generation_written`)
  and a publish request (:func:`publish_request`) reach their use case only when they are this cluster's.
"""

from __future__ import annotations

from topocast.app import metrics as m
from topocast.app.outcome import Outcome
from topocast.app.publish import publish
from topocast.app.render import render
from topocast.model.changes import Ignored, Noted
from topocast.ports.debounce import Timer
from topocast.ports.protocols import Metrics, PublishPorts, RenderPorts

__all__ = [
    "foreign",
    "generation_written",
    "ignored",
    "is_rejected",
    "publish_request",
    "rejected",
    "skipped",
    "timer",
]

#: the detail key that marks an outcome of :func:`rejected`
_REJECTED = "rejected"


def rejected(metrics: Metrics, reason: str | Exception) -> Outcome:
    """A delivery no use case can take: counted ``malformed``; ``drop`` with the reason."""
    metrics.count(m.MALFORMED)
    return Outcome.drop(str(reason), **{_REJECTED: True})


def is_rejected(outcome: Outcome) -> bool:
    """Did :func:`rejected` decide ``outcome`` (GCP answers it as ``rejected``, not as a use case's drop)?"""
    return bool(outcome.detail.get(_REJECTED))


def ignored(metrics: Metrics, reason: str) -> Outcome:
    """Well-formed but not this function's business: counted ``ignored``; acknowledged."""
    metrics.count(m.IGNORED)
    return Outcome.done(f"ignored: {reason}", action="ignored")


def foreign(metrics: Metrics, serves: str, named: str | None, what: str) -> Outcome | None:
    """None when a delivery naming cluster ``named`` is for this function (which serves ``serves``);
    else its :func:`ignored` outcome. A delivery that names no cluster (``named`` None) is this one's."""
    if named is None or named == serves:
        return None
    return ignored(metrics, f"{what} for cluster {named!r}; this function serves {serves}")


def skipped(metrics: Metrics, event: Ignored | Noted) -> Outcome:
    """An event topocast does not act on, delivered to render or publish: counted ``ignored`` / ``noted``."""
    metrics.count(m.IGNORED if isinstance(event, Ignored) else m.NOTED)
    return Outcome.done(event.reason, action=type(event).__name__.lower())


def timer(ports: RenderPorts, body: object) -> Outcome:
    """A debounce timer's delivery (the SQS record body, the Cloud Tasks event's data; text or parsed):
    parsed here, once, into a :class:`~topocast.ports.debounce.Timer`; rejected when it is none, ignored
    when it is another cluster's, else the render use case."""
    try:
        parsed = Timer.parse(body)
    except ValueError as exc:
        return rejected(ports.metrics, exc)
    return foreign(ports.metrics, ports.cluster, parsed.cluster, "debounce timer") or render(ports, parsed)


def generation_written(ports: RenderPorts, generation: int | None, uri: str) -> Outcome:
    """An object was written (GCP's optional storage trigger): a graph generation of this cluster's store
    (``generation``, None when ``uri`` is not one) is noted with the debouncer like discover's own."""
    if generation is None:
        return ignored(ports.metrics, f"{uri} is not a graph generation")
    decision = ports.debouncer.note_change(ports.cluster, generation)
    return Outcome.done("noted", generation=generation, debounce=decision.reason)


def publish_request(ports: PublishPorts, cluster: str | None, generation: int) -> Outcome:
    """Publish ``generation`` when the request is this cluster's (one naming no cluster is: an operator's)."""
    return foreign(ports.metrics, ports.cluster, cluster, "publish request") or publish(ports, generation)
