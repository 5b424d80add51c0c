"""Google Cloud clients with topocast's endpoints, credentials and retry policy.

Endpoints: the real APIs by default; each can be pointed elsewhere (tests, a
local emulator, a Private Service Connect endpoint):

* Compute Engine: ``TOPOCAST_COMPUTE_ENDPOINT`` (or ``endpoint=``), e.g.
  ``http://127.0.0.1:8089`` or ``https://compute-myendpoint.p.googleapis.com``;
* Cloud Storage: ``STORAGE_EMULATOR_HOST`` (the variable google-cloud-storage
  itself honours) or ``endpoint=``;
* Cloud Tasks: ``TOPOCAST_CLOUDTASKS_ENDPOINT`` (or ``endpoint=``).

Credentials: application-default credentials (``google.auth.default``: the
function's service account, ``GOOGLE_APPLICATION_CREDENTIALS``, ``gcloud auth
application-default login``), except that an ``http://`` endpoint is treated as
a local emulator and gets anonymous credentials, so no token is ever sent in
clear text.

Retries: Compute and Cloud Tasks calls retry 429, 500, 502, 503, 504 and
deadline errors with jittered exponential backoff (google-api-core's
``Retry``); the compute pager passes the same policy to every page request.
All SDK imports happen inside the functions (cold start: google-cloud-compute
alone takes seconds to import).
"""

from __future__ import annotations

import os
from typing import Any

from topocast import __version__
from topocast.providers.gcp.sdk import RetryPolicy, transient_retry

__all__ = ["RetryPolicy", "compute_client", "is_local", "storage_client", "tasks_client", "transient_retry"]

USER_AGENT = f"topocast/{__version__}"
COMPUTE_ENDPOINT_ENV = "TOPOCAST_COMPUTE_ENDPOINT"
TASKS_ENDPOINT_ENV = "TOPOCAST_CLOUDTASKS_ENDPOINT"
STORAGE_EMULATOR_ENV = "STORAGE_EMULATOR_HOST"


def _endpoint(explicit: str | None, env: str) -> str | None:
    value = explicit if explicit is not None else os.environ.get(env)
    return value.rstrip("/") if value else None


def is_local(endpoint: str | None) -> bool:
    return bool(endpoint) and str(endpoint).startswith("http://")


def _client_kwargs(endpoint: str | None) -> dict[str, Any]:
    from google.api_core.client_options import ClientOptions
    from google.api_core.gapic_v1.client_info import ClientInfo

    kwargs: dict[str, Any] = {"client_info": ClientInfo(user_agent=USER_AGENT)}
    if endpoint:
        kwargs["client_options"] = ClientOptions(api_endpoint=endpoint)
    if is_local(endpoint):
        from google.auth.credentials import AnonymousCredentials

        kwargs["credentials"] = AnonymousCredentials()
    return kwargs


def compute_client(endpoint: str | None = None) -> Any:
    """``compute_v1.InstancesClient`` over REST (the only transport compute supports)."""
    from google.cloud import compute_v1

    return compute_v1.InstancesClient(transport="rest", **_client_kwargs(_endpoint(endpoint, COMPUTE_ENDPOINT_ENV)))


def sub_blocks_client(endpoint: str | None = None) -> Any:
    """``compute_v1.ReservationSubBlocksClient`` over REST, at the same endpoint as :func:`compute_client`."""
    from google.cloud import compute_v1

    kwargs = _client_kwargs(_endpoint(endpoint, COMPUTE_ENDPOINT_ENV))
    return compute_v1.ReservationSubBlocksClient(transport="rest", **kwargs)


def storage_client(project: str | None = None, endpoint: str | None = None) -> Any:
    from google.cloud import storage  # type: ignore[attr-defined]

    url = _endpoint(endpoint, STORAGE_EMULATOR_ENV)
    kwargs: dict[str, Any] = {"project": project}
    if url:
        if not url.startswith(("http://", "https://")):
            url = "http://" + url  # STORAGE_EMULATOR_HOST is often given as host:port
        kwargs["client_options"] = {"api_endpoint": url}
    if is_local(url):
        from google.auth.credentials import AnonymousCredentials

        kwargs["credentials"] = AnonymousCredentials()
        kwargs["project"] = project or "local"
    return storage.Client(**kwargs)


def tasks_client(endpoint: str | None = None) -> Any:
    """``tasks_v2.CloudTasksClient`` over REST (one wire protocol for the real API and the local fake)."""
    from google.cloud import tasks_v2

    return tasks_v2.CloudTasksClient(transport="rest", **_client_kwargs(_endpoint(endpoint, TASKS_ENDPOINT_ENV)))
