"""google-api-core retry policy for Compute and Cloud Tasks calls (below the providers and the GCP shell).

"Try again later" answers (429, 500, 502, 503, 504, deadline) are retried with jittered
exponential backoff (google-api-core's ``Retry``) for at most ``RetryPolicy.timeout`` seconds: the
one retry budget of a Compute / Cloud Tasks call (the pager passes it to every page request).

The Compute clients the ``gcp`` provider calls are built here too (:func:`compute_client`,
:func:`sub_blocks_client`; the GCP shell's are the same), and its connector (:func:`shell_clients`).
Endpoints: the real API by default, else ``TOPOCAST_COMPUTE_ENDPOINT`` (or ``endpoint=``); an
``http://`` endpoint is a local emulator and gets anonymous credentials, so no token is ever sent
in clear text; otherwise application-default credentials (``google.auth.default``).
SDK imports happen inside the functions (google-cloud-compute alone takes seconds to import).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from topocast import __version__
from topocast.providers.means import SdkClient, ShellMeans, services

if TYPE_CHECKING:
    from topocast.providers.gcp.api import ComputeApi, SubBlocksApi

__all__ = [
    "COMPUTE_ENDPOINT_ENV",
    "USER_AGENT",
    "RetryPolicy",
    "client_kwargs",
    "compute_client",
    "is_local",
    "resolve_endpoint",
    "shell_clients",
    "sub_blocks_client",
    "transient_retry",
]

USER_AGENT = f"topocast/{__version__}"
COMPUTE_ENDPOINT_ENV = "TOPOCAST_COMPUTE_ENDPOINT"


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


def resolve_endpoint(explicit: str | None, env: str) -> str | None:
    """``explicit``, else the variable ``env``; without a trailing slash (None: the real API)."""
    value = explicit if explicit is not None else os.environ.get(env)
    return value.rstrip("/") if value else None


def is_local(endpoint: str | None) -> bool:
    return bool(endpoint) and str(endpoint).startswith("http://")


def client_kwargs(endpoint: str | None) -> dict[str, Any]:
    """A google-cloud client's ``client_info`` (topocast's user agent), endpoint and, for a local
    (``http://``) endpoint, anonymous credentials."""
    from google.api_core.client_options import ClientOptions
    from google.api_core.gapic_v1.client_info import ClientInfo

    kwargs: dict[str, Any] = {"client_info": ClientInfo(user_agent=USER_AGENT)}
    if endpoint:
        kwargs["client_options"] = ClientOptions(api_endpoint=endpoint)
    if is_local(endpoint):
        from google.auth.credentials import AnonymousCredentials

        kwargs["credentials"] = AnonymousCredentials()
    return kwargs


def compute_client(endpoint_url: str | None = None) -> ComputeApi:
    """``compute_v1.InstancesClient`` over REST (the only transport compute supports); mypy checks it
    against :class:`~topocast.providers.gcp.api.ComputeApi` here."""
    from google.cloud import compute_v1

    kwargs = client_kwargs(resolve_endpoint(endpoint_url, COMPUTE_ENDPOINT_ENV))
    return compute_v1.InstancesClient(transport="rest", **kwargs)


def sub_blocks_client(endpoint_url: str | None = None) -> SubBlocksApi:
    """``compute_v1.ReservationSubBlocksClient`` over REST, at the same endpoint as :func:`compute_client`."""
    from google.cloud import compute_v1

    kwargs = client_kwargs(resolve_endpoint(endpoint_url, COMPUTE_ENDPOINT_ENV))
    return compute_v1.ReservationSubBlocksClient(transport="rest", **kwargs)


def shell_clients(means: ShellMeans, options: Mapping[str, Any]) -> SdkClient:
    """The ``gcp`` provider's connector: ``compute`` and ``compute-sub-blocks`` at the shell's Compute
    endpoint, with application-default credentials."""
    return services(
        "gcp",
        {
            "compute": lambda: compute_client(means.compute_endpoint),
            "compute-sub-blocks": lambda: sub_blocks_client(means.compute_endpoint),
        },
    )
