"""boto3 clients with topocast's retry and user-agent settings.

Everything else comes from the standard AWS environment, which boto3 already
honours: credentials chain (env, profile, IRSA, Lambda role), ``AWS_PROFILE``,
``AWS_REGION``/``AWS_DEFAULT_REGION``, ``AWS_ENDPOINT_URL`` and per-service
``AWS_ENDPOINT_URL_EC2`` etc. (tests point these at moto). Retries use
botocore's *adaptive* mode: exponential back-off plus a client-side token
bucket that slows down after ``RequestLimitExceeded``, which is what EC2's
per-account throttling wants.

boto3 is imported inside the functions: importing this module costs nothing,
so a Lambda that never talks to AWS on a given path does not pay ~100 ms.
Create clients once per process (module scope of the handler) and reuse them.
"""

from __future__ import annotations

import os
from typing import Any

from topocast import __version__

#: Attempts per call (first try + retries); override with TOPOCAST_AWS_MAX_ATTEMPTS.
DEFAULT_MAX_ATTEMPTS = 10
USER_AGENT_EXTRA = f"topocast/{__version__}"


def max_attempts_from_env(default: int = DEFAULT_MAX_ATTEMPTS) -> int:
    raw = os.environ.get("TOPOCAST_AWS_MAX_ATTEMPTS")
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"TOPOCAST_AWS_MAX_ATTEMPTS must be an integer, got {raw!r}") from None
    if value < 1:
        raise ValueError(f"TOPOCAST_AWS_MAX_ATTEMPTS must be >= 1, got {value}")
    return value


def client_config(max_attempts: int | None = None, **overrides: Any) -> Any:
    """A ``botocore.config.Config`` with adaptive retries and the topocast user agent."""
    from botocore.config import Config

    attempts = max_attempts if max_attempts is not None else max_attempts_from_env()
    # botocore's "max_attempts" counts retries only; "total_max_attempts" counts the first try too,
    # like AWS_MAX_ATTEMPTS and our own setting.
    return Config(
        retries={"mode": "adaptive", "total_max_attempts": attempts},
        user_agent_extra=USER_AGENT_EXTRA,
        **overrides,
    )


def client(service: str, region: str | None = None, session: Any = None, *, max_attempts: int | None = None) -> Any:
    """A boto3 client for ``service``; ``session`` (a ``boto3.Session``) defaults to boto3's default one."""
    if session is None:
        import boto3

        session = boto3
    return session.client(service, region_name=region, config=client_config(max_attempts))


def ec2_client(region: str | None = None, session: Any = None, *, max_attempts: int | None = None) -> Any:
    return client("ec2", region, session, max_attempts=max_attempts)


def s3_client(region: str | None = None, session: Any = None, *, max_attempts: int | None = None) -> Any:
    return client("s3", region, session, max_attempts=max_attempts)


def ssm_client(region: str | None = None, session: Any = None, *, max_attempts: int | None = None) -> Any:
    return client("ssm", region, session, max_attempts=max_attempts)


def sqs_client(region: str | None = None, session: Any = None, *, max_attempts: int | None = None) -> Any:
    return client("sqs", region, session, max_attempts=max_attempts)


def events_client(region: str | None = None, session: Any = None, *, max_attempts: int | None = None) -> Any:
    return client("events", region, session, max_attempts=max_attempts)
