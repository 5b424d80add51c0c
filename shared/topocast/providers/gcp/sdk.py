"""The Compute clients the ``gcp`` provider calls (their retry budget: :mod:`topocast.providers.gcp.retry`).

They are built here (:func:`compute_client`,
:func:`sub_blocks_client`; the GCP shell's are the same), and its connector (:func:`shell_clients`).
Endpoints: the real API by default, else ``TOPOCAST_COMPUTE_ENDPOINT`` (or ``endpoint=``); an
``http://`` endpoint is a local emulator and gets anonymous credentials, so no token is ever sent
in clear text; otherwise application-default credentials (``google.auth.default``).
SDK imports happen inside the functions (google-cloud-compute alone takes seconds to import).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from topocast import __version__
from topocast.providers.means import SdkClient, ShellMeans, services

if TYPE_CHECKING:
    from topocast.providers.gcp.api import ComputeApi, SubBlocksApi

__all__ = [
    "COMPUTE_ENDPOINT_ENV",
    "USER_AGENT",
    "client_kwargs",
    "compute_client",
    "is_local",
    "resolve_endpoint",
    "shell_clients",
    "sub_blocks_client",
]

USER_AGENT = f"topocast/{__version__}"
COMPUTE_ENDPOINT_ENV = "TOPOCAST_COMPUTE_ENDPOINT"


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
