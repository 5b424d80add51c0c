"""botocore settings shared by the AWS shell and the providers that take boto3 clients (below both).

One retry budget per call, named here (docs/architecture.md, "Retries"):

* **EC2 discovery calls** (and the NetQ secret reads) use botocore's *adaptive* mode, whose
  client-side token bucket slows down after ``RequestLimitExceeded``: ``TOPOCAST_AWS_MAX_ATTEMPTS``
  attempts in total (default 10), no retry layer of topocast's own on top.
* **S3 / SSM / DynamoDB / SQS** (the stores, the debouncer, the hand-offs) are retried by
  :mod:`topocast.aws.retry` (``TOPOCAST_AWS_STORE_ATTEMPTS``, default 4), which also recognises a
  conditional write whose response was lost; their clients therefore get botocore retries **off**
  (one attempt), so a call is never tried 4 x 10 times.

boto3 is imported inside the functions: importing this module costs nothing.
"""

from __future__ import annotations

import os
from typing import Any

from topocast import __version__

__all__ = [
    "DEFAULT_MAX_ATTEMPTS",
    "DEFAULT_STORE_ATTEMPTS",
    "OWN_RETRY_SERVICES",
    "USER_AGENT_EXTRA",
    "client_config",
    "max_attempts_from_env",
    "read_secret_arn",
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

    if service in OWN_RETRY_SERVICES and max_attempts is None:
        retries: dict[str, Any] = {"mode": "standard", "total_max_attempts": 1}  # topocast.aws.retry retries
    else:
        attempts = max_attempts if max_attempts is not None else max_attempts_from_env()
        # botocore's "max_attempts" counts retries only; "total_max_attempts" counts the first try too
        retries = {"mode": "adaptive", "total_max_attempts": attempts}
    return Config(retries=retries, user_agent_extra=USER_AGENT_EXTRA, **overrides)


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
