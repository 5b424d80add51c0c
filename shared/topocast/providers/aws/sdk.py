"""botocore settings shared by the AWS shell and the providers that take boto3 clients (below both).

One retry budget per call, named here (docs/architecture.md, "Retries"):

* **EC2 discovery calls** (and the NetQ secret reads) use botocore's *adaptive* mode, whose
  client-side token bucket slows down after ``RequestLimitExceeded``: ``TOPOCAST_AWS_MAX_ATTEMPTS``
  attempts in total (default 10), no retry layer of topocast's own on top.
* **S3 / SSM / DynamoDB / SQS** (the stores, the debouncer, the hand-offs) are retried by
  :mod:`topocast.aws.retry` (``TOPOCAST_AWS_STORE_ATTEMPTS``, default 4), which also recognises a
  conditional write whose response was lost; their clients therefore get botocore retries **off**
  (one attempt), so a call is never tried 4 x 10 times.

The ``aws`` provider's connector (:func:`shell_clients`) is here too: the EC2 client ``topocast discover``
hands it, built by :func:`boto3_client` (which the AWS shell's clients also are). boto3 is imported inside
the functions: importing this module costs nothing.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from topocast import __version__
from topocast.providers.means import SdkClient, ShellMeans, services

if TYPE_CHECKING:
    import boto3

    from topocast.providers.aws.api import Ec2Api

__all__ = [
    "DEFAULT_MAX_ATTEMPTS",
    "DEFAULT_STORE_ATTEMPTS",
    "OWN_RETRY_SERVICES",
    "USER_AGENT_EXTRA",
    "boto3_client",
    "client_config",
    "ec2_client",
    "max_attempts_from_env",
    "read_secret_arn",
    "shell_clients",
    "store_attempts_from_env",
]

#: Attempts per call (first try + retries) in botocore's adaptive mode; TOPOCAST_AWS_MAX_ATTEMPTS.
DEFAULT_MAX_ATTEMPTS = 10
#: Attempts per call of topocast's own retry layer (stores, debouncer); TOPOCAST_AWS_STORE_ATTEMPTS.
DEFAULT_STORE_ATTEMPTS = 4
#: services whose calls go through :mod:`topocast.aws.retry`: botocore retries off for them
OWN_RETRY_SERVICES = frozenset({"s3", "ssm", "dynamodb", "sqs"})
USER_AGENT_EXTRA = f"topocast/{__version__}"


def _attempts(var: str, default: int) -> int:
    raw = os.environ.get(var)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{var} must be an integer, got {raw!r}") from None
    if value < 1:
        raise ValueError(f"{var} must be >= 1, got {value}")
    return value


def max_attempts_from_env(default: int = DEFAULT_MAX_ATTEMPTS) -> int:
    return _attempts("TOPOCAST_AWS_MAX_ATTEMPTS", default)


def store_attempts_from_env(default: int = DEFAULT_STORE_ATTEMPTS) -> int:
    return _attempts("TOPOCAST_AWS_STORE_ATTEMPTS", default)


def client_config(max_attempts: int | None = None, *, service: str | None = None, **overrides: Any) -> Any:
    """A ``botocore.config.Config`` with the topocast user agent and the service's one retry budget."""
    from botocore.config import Config

    if service in OWN_RETRY_SERVICES and max_attempts is None:  # topocast.aws.retry retries
        return Config(
            retries={"mode": "standard", "total_max_attempts": 1}, user_agent_extra=USER_AGENT_EXTRA, **overrides
        )
    attempts = max_attempts if max_attempts is not None else max_attempts_from_env()
    # botocore's "max_attempts" counts retries only; "total_max_attempts" counts the first try too
    return Config(
        retries={"mode": "adaptive", "total_max_attempts": attempts}, user_agent_extra=USER_AGENT_EXTRA, **overrides
    )


def boto3_client(
    service: str, region: str | None = None, session: Any = None, *, max_attempts: int | None = None
) -> Any:
    """A boto3 client for ``service``; ``session`` (a ``boto3.Session``) defaults to boto3's default one."""
    if session is None:
        import boto3

        session = boto3
    return session.client(service, region_name=region, config=client_config(max_attempts, service=service))


def ec2_client(
    region: str | None = None, session: boto3.Session | None = None, *, max_attempts: int | None = None
) -> Ec2Api:
    """The EC2 client discovery calls (adaptive retries, ``TOPOCAST_AWS_MAX_ATTEMPTS``).

    Typed: with ``types-boto3[ec2]`` (dev extra) mypy checks boto3's ``EC2Client`` against :class:`Ec2Api` here.
    """
    import boto3

    config = client_config(max_attempts, service="ec2")
    if session is None:
        return boto3.client("ec2", region_name=region, config=config)
    return session.client("ec2", region_name=region, config=config)


def shell_clients(means: ShellMeans, options: Mapping[str, Any]) -> SdkClient:
    """The ``aws`` provider's connector: ``ec2`` in the options' ``region`` (else boto3's), with boto3's
    default credentials chain (environment, profile, ``AWS_ENDPOINT_URL``, instance role)."""
    return services("aws", {"ec2": lambda: ec2_client(options.get("region"))})


def read_secret_arn(ref: str, *, session: Any = None) -> tuple[str, str | None]:
    """The text of a Secrets Manager secret or SSM parameter ARN, and the parameter's type (None: a secret)."""
    from topocast.errors import ProviderError

    parts = ref.split(":", 5)
    if len(parts) < 6 or parts[2] not in ("secretsmanager", "ssm"):
        raise ProviderError(f"{ref}: not a Secrets Manager secret or SSM parameter ARN")
    region = parts[3] or None
    if session is None:
        import boto3

        session = boto3
    if parts[2] == "secretsmanager":
        sm = session.client("secretsmanager", region_name=region, config=client_config())
        try:
            secret = sm.get_secret_value(SecretId=ref)
        except Exception as exc:  # botocore ClientError and friends; the message names the cause
            raise ProviderError(f"{ref}: cannot read secret ({exc})") from None
        return secret.get("SecretString") or "", None
    resource = parts[5]
    if not resource.startswith("parameter/"):
        raise ProviderError(f"{ref}: SSM ARN must name a parameter (…:parameter/NAME)")
    name = resource.removeprefix("parameter")
    name = name if name.count("/") > 1 else name.lstrip("/")  # "/a/b" keeps its slash, "a" has none
    ssm = session.client("ssm", region_name=region, config=client_config())
    try:
        param = ssm.get_parameter(Name=name, WithDecryption=True)["Parameter"]
    except Exception as exc:
        raise ProviderError(f"{ref}: cannot read parameter ({exc})") from None
    return param.get("Value", ""), param.get("Type")
