"""Bounded retries with jittered exponential backoff for transient AWS failures.

The only retry layer of the S3 / SSM / DynamoDB / SQS calls (their clients have
botocore's retries off, :mod:`topocast.providers.aws.sdk`), so each call has one
budget: ``TOPOCAST_AWS_STORE_ATTEMPTS`` attempts (default 4). A transient failure (connection error, 5xx, throttling)
is retried a few times, then the error propagates unchanged so the caller's input
(the SQS batch, the EventBridge event) is retried by the platform and nothing is
lost. Semantic failures (412 PreconditionFailed, conditional-check failures,
access denied, missing keys) are never retried here.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from typing import TypeVar

from topocast.providers.aws.sdk import store_attempts_from_env

log = logging.getLogger(__name__)

T = TypeVar("T")

#: error codes AWS documents as "try again later"
TRANSIENT_CODES = frozenset(
    {
        "InternalError",
        "InternalFailure",
        "ServiceUnavailable",
        "SlowDown",
        "RequestTimeout",
        "RequestTimeoutException",
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestLimitExceeded",
        "TooManyRequestsException",
        "ProvisionedThroughputExceededException",
        "TransactionInProgressException",
        "ConditionalRequestConflict",  # S3: a concurrent conditional write is in flight; retry decides
        "TooManyUpdates",  # SSM: concurrent updates of one parameter
    }
)


def error_code(exc: BaseException) -> str | None:
    """The AWS error code of a botocore ClientError, else None."""
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        code = response.get("Error", {}).get("Code")
        return str(code) if code is not None else None
    return None


def http_status(exc: BaseException) -> int | None:
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        return int(status) if status is not None else None
    return None


def is_transient(exc: BaseException) -> bool:
    from botocore.exceptions import ClientError, ConnectionError, HTTPClientError

    if isinstance(exc, ConnectionError | HTTPClientError):
        return True
    if isinstance(exc, ClientError):
        status = http_status(exc)
        return error_code(exc) in TRANSIENT_CODES or (status is not None and status >= 500)
    return False


def with_retries(
    fn: Callable[[], T],
    *,
    what: str,
    attempts: int | None = None,
    base_delay: float = 0.1,
    max_delay: float = 2.0,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Call ``fn``; on a transient error retry up to ``attempts`` calls in total, then re-raise.

    ``attempts`` defaults to ``TOPOCAST_AWS_STORE_ATTEMPTS`` (4): the only retry budget of the
    clients these calls use, whose botocore retries are off (:mod:`topocast.providers.aws.sdk`).
    """
    if attempts is None:
        attempts = store_attempts_from_env()
    for attempt in range(1, attempts + 1):
        try:
            return fn()
        except Exception as exc:
            if attempt == attempts or not is_transient(exc):
                raise
            # "full jitter": spreads retries of many concurrent writers apart
            delay = random.uniform(0, min(max_delay, base_delay * 2 ** (attempt - 1)))
            log.warning("%s failed (attempt %d/%d), retrying in %.2fs: %s", what, attempt, attempts, delay, exc)
            sleep(delay)
    raise AssertionError("unreachable")  # pragma: no cover
