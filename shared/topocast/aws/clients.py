"""boto3 clients with topocast's retry and user-agent settings.

Everything else comes from the standard AWS environment, which boto3 already
honours: credentials chain (env, profile, IRSA, Lambda role), ``AWS_PROFILE``,
``AWS_REGION``/``AWS_DEFAULT_REGION``, ``AWS_ENDPOINT_URL`` and per-service
``AWS_ENDPOINT_URL_EC2`` etc. (tests point these at moto). Each call has one
retry budget (:mod:`topocast.providers.aws.sdk`): botocore's *adaptive* mode
for EC2 (a client-side token bucket that slows down after
``RequestLimitExceeded``), topocast's own :mod:`.retry` for the stores' S3 /
SSM / DynamoDB / SQS calls, whose clients have botocore retries off.

boto3 is imported inside the functions: importing this module costs nothing,
so a Lambda that never talks to AWS on a given path does not pay ~100 ms.
Create clients once per process (module scope of the handler) and reuse them.
"""

from __future__ import annotations

import os
from typing import Any

from topocast.providers.aws.sdk import boto3_client  # the providers' own boto3 clients, one factory

__all__ = [
    "resolve_region",
    "s3_client",
    "use_region",
]


def s3_client(region: str | None = None, session: Any = None, *, max_attempts: int | None = None) -> Any:
    return boto3_client("s3", region, session, max_attempts=max_attempts)


def resolve_region(explicit: str | None = None) -> str | None:
    """The region, first found of: ``explicit`` (``--region``), ``AWS_REGION``, ``AWS_DEFAULT_REGION``, the
    profile's ``region``, and the instance metadata (IMDSv2, an EC2 head node's own region).

    boto3 itself reads only ``AWS_DEFAULT_REGION`` and the profile (``AWS_REGION`` is the Lambda runtime's and
    other SDKs'), and never the instance metadata, while a systemd unit with ``ProtectHome=true`` hides
    root's ``~/.aws/config``. The metadata is asked through botocore's own IMDS client (token, 1 s timeout,
    ``AWS_EC2_METADATA_DISABLED`` and ``AWS_EC2_METADATA_SERVICE_ENDPOINT`` honoured)."""
    region = explicit or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    if region:
        return region
    import botocore.session
    from botocore.utils import IMDSRegionProvider

    session = botocore.session.get_session()
    try:
        configured = session.get_config_variable("region")
    except Exception:  # a broken profile is boto3's to report when the client is made
        configured = None
    if configured:
        return str(configured)
    found = IMDSRegionProvider(session).provide()
    return str(found) if found else None


def use_region(explicit: str | None = None) -> str | None:
    """Resolve the region (:func:`resolve_region`) once and put it where every boto3 client of this process
    finds it (``AWS_DEFAULT_REGION``). Returns it, or None (boto3 then says ``NoRegionError``)."""
    region = resolve_region(explicit)
    if region:
        os.environ["AWS_DEFAULT_REGION"] = region
    return region
