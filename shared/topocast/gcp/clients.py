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

from typing import Any

from topocast.providers.gcp.sdk import client_kwargs, is_local, resolve_endpoint

__all__ = ["storage_client", "tasks_client"]

TASKS_ENDPOINT_ENV = "TOPOCAST_CLOUDTASKS_ENDPOINT"
STORAGE_EMULATOR_ENV = "STORAGE_EMULATOR_HOST"


def storage_client(project: str | None = None, endpoint: str | None = None) -> Any:
    from google.cloud import storage  # type: ignore[attr-defined]

    url = resolve_endpoint(endpoint, STORAGE_EMULATOR_ENV)
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

    return tasks_v2.CloudTasksClient(transport="rest", **client_kwargs(resolve_endpoint(endpoint, TASKS_ENDPOINT_ENV)))
