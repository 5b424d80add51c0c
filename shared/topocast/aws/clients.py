"""boto3 clients with topocast's retry and user-agent settings.

Everything else comes from the standard AWS environment, which boto3 already
honours: credentials chain (env, profile, IRSA, Lambda role), ``AWS_PROFILE``,
``AWS_REGION``/``AWS_DEFAULT_REGION``, ``AWS_ENDPOINT_URL`` and per-service
``AWS_ENDPOINT_URL_EC2`` etc. (tests point these at moto). Each call has one
retry budget (:mod:`topocast.providers.aws_sdk`): botocore's *adaptive* mode
for EC2 (a client-side token bucket that slows down after
``RequestLimitExceeded``), topocast's own :mod:`.retry` for the stores' S3 /
SSM / DynamoDB / SQS calls, whose clients have botocore retries off.

boto3 is imported inside the functions: importing this module costs nothing,
so a Lambda that never talks to AWS on a given path does not pay ~100 ms.
Create clients once per process (module scope of the handler) and reuse them.
"""

from __future__ import annotations

from typing import Any

from topocast.providers.aws_sdk import (
    DEFAULT_MAX_ATTEMPTS,
    USER_AGENT_EXTRA,
    client_config,
    max_attempts_from_env,
)

__all__ = [
    "DEFAULT_MAX_ATTEMPTS",
    "USER_AGENT_EXTRA",
    "client",
    "client_config",
    "ec2_client",
    "max_attempts_from_env",
    "s3_client",
]


def client(service: str, region: str | None = None, session: Any = None, *, max_attempts: int | None = None) -> Any:
    """A boto3 client for ``service``; ``session`` (a ``boto3.Session``) defaults to boto3's default one."""
    if session is None:
        import boto3

        session = boto3
    return session.client(service, region_name=region, config=client_config(max_attempts, service=service))


def ec2_client(region: str | None = None, session: Any = None, *, max_attempts: int | None = None) -> Any:
    return client("ec2", region, session, max_attempts=max_attempts)


def s3_client(region: str | None = None, session: Any = None, *, max_attempts: int | None = None) -> Any:
    return client("s3", region, session, max_attempts=max_attempts)
