"""google-api-core retry policy for Compute and Cloud Tasks calls (below the providers and the GCP shell).

"Try again later" answers (429, 500, 502, 503, 504, deadline) are retried with jittered
exponential backoff (google-api-core's ``Retry``) for at most ``RetryPolicy.timeout`` seconds: the
one retry budget of a Compute / Cloud Tasks call (the pager passes it to every page request).
Its own module so that the calls (:mod:`topocast.providers.gcp.api`) and the client factories
(:mod:`topocast.providers.gcp.sdk`, which return the calls' Protocols) do not import each other.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["RetryPolicy", "transient_retry"]


@dataclass(frozen=True)
class RetryPolicy:
    """Backoff for "try again later" answers: first delay, longest delay, total time before giving up."""

    initial: float = 0.2
    maximum: float = 10.0
    timeout: float = 120.0


def transient_retry(policy: RetryPolicy | None = None, *, on_error: Callable[[Exception], None] | None = None) -> Any:
    """google-api-core ``Retry`` for "try again later" answers (429, 5xx, deadline)."""
    from google.api_core import exceptions as gexc
    from google.api_core import retry as gretry

    p = policy or RetryPolicy()
    predicate = gretry.if_exception_type(
        gexc.TooManyRequests,
        gexc.InternalServerError,
        gexc.BadGateway,
        gexc.ServiceUnavailable,
        gexc.GatewayTimeout,
        gexc.DeadlineExceeded,
    )
    return gretry.Retry(
        predicate=predicate, initial=p.initial, maximum=p.maximum, multiplier=2.0, timeout=p.timeout, on_error=on_error
    )
