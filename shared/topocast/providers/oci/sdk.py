"""The OCI Python SDK (``oci``, the ``oci`` extra) as plain records for :mod:`topocast.providers.oci.provider`.

Below the providers, like :mod:`topocast.providers.aws.sdk`: the shell (``topocast discover``) hands
:func:`connect` to the provider as ``sdk_client("oci")``; the provider calls it with its options and
gets an :class:`OciReader`, whose methods page through the API and return dicts in the SDK's own
snake_case field names (``oci.util.to_dict`` of the SDK model classes). ``oci`` is imported inside
the functions: it is never in an AWS or GCP function archive.

Calls (SDK ``oci.core.ComputeClient``; OCI Core Services API reference, ``ListComputeHosts``
``GET /20160918/computeHosts``, ``GetComputeHost`` ``GET /20160918/computeHosts/{computeHostId}``,
``ListInstances`` ``GET /20160918/instances``): pages follow the ``opc-next-page`` header
(``response.next_page``); a page token the API hands back twice is an error, not a loop.

Credentials: ``auth=config`` reads an OCI config file (``config_file``, default ``~/.oci/config``,
section ``profile``), as the ``oci`` CLI does; ``auth=instance_principal`` signs as the instance
(a dynamic group with ``inspect compute-hosts`` / ``inspect instances``). ``endpoint`` replaces the
regional endpoint (a private endpoint, or a local fake in the tests). Every SDK failure becomes one
:class:`~topocast.errors.ProviderError` line: the status and code of a service error, the config
problem, or the endpoint that could not be reached.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from topocast.errors import ProviderError
from topocast.providers.means import SdkClient, ShellMeans, services

if TYPE_CHECKING:
    from topocast.providers.oci.provider import Connect
from topocast.safeio.paging import PageGuard

__all__ = ["OciConnection", "OciReader", "connect", "imds_get", "shell_clients"]


class OciConnection(Protocol):
    """What :func:`connect` reads of the provider's options."""

    # read-only (properties): the provider's frozen Options satisfy it with narrower types (``auth`` a Literal)
    @property
    def auth(self) -> str: ...
    @property
    def config_file(self) -> str | None: ...
    @property
    def profile(self) -> str: ...
    @property
    def endpoint(self) -> str | None: ...
    @property
    def region(self) -> str | None: ...
    @property
    def attempts(self) -> int: ...


def _explain(exc: Exception, what: str) -> ProviderError:
    import oci

    if isinstance(exc, oci.exceptions.ServiceError):
        hint = {401: " (check the API key / instance principal)", 404: " (wrong OCID, or no permission to see it)"}
        message = str(getattr(exc, "message", "") or "").splitlines()[0][:200] if exc.message else ""
        return ProviderError(
            f"OCI {what}: HTTP {exc.status} {exc.code}{hint.get(exc.status, '')}{': ' + message if message else ''}"
        )
    if isinstance(exc, oci.exceptions.ClientError):
        return ProviderError(f"OCI {what}: {str(exc).splitlines()[0][:300]}")
    return ProviderError(f"OCI {what}: cannot reach the endpoint ({type(exc).__name__}: {str(exc)[:200]})")


def _errors() -> tuple[type[Exception], ...]:
    import oci
    import requests

    return (
        oci.exceptions.ServiceError,
        oci.exceptions.ClientError,
        oci.exceptions.RequestException,
        oci.exceptions.ConnectTimeout,
        requests.exceptions.RequestException,
        ConnectionError,
    )


@dataclass
class OciReader:
    """Paged reads over one ``oci.core.ComputeClient``, counted per API operation."""

    client: Any
    #: the tenancy (root compartment) OCID of the credentials: where OCI keeps compute hosts
    tenancy: str | None = None
    calls: dict[str, int] = field(default_factory=dict)

    def _pages(self, operation: str, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Iterator[Any]:
        guard = PageGuard(f"OCI {operation}", kwargs.get("limit"))
        page: str | None = None
        while True:
            self.calls[operation] = self.calls.get(operation, 0) + 1
            try:
                response = call(*args, **({**kwargs, "page": page} if page else kwargs))
            except _errors() as exc:
                raise _explain(exc, operation) from None
            data = response.data
            items = list(data.items if hasattr(data, "items") and not isinstance(data, list) else data)
            more = guard.more((getattr(i, "id", None) for i in items), response.next_page)
            yield from items
            if not more:
                return
            page = response.next_page

    def compute_hosts(
        self, compartment: str, availability_domain: str | None, limit: int, *, in_subtree: bool = False
    ) -> list[dict[str, Any]]:
        """``ListComputeHosts`` of ``compartment`` (one availability domain, or all), every page.

        ``in_subtree`` is the API's ``computeHostInSubtree``: the hosts of the tenancy and every compartment
        under it (SDK docstring: "all the compartments in the tenancy are traversed")."""
        import oci

        kwargs: dict[str, Any] = {"limit": limit}
        if availability_domain:
            kwargs["availability_domain"] = availability_domain
        if in_subtree:
            kwargs["compute_host_in_subtree"] = True
        pages = self._pages("ListComputeHosts", self.client.list_compute_hosts, compartment, **kwargs)
        return [oci.util.to_dict(h) for h in pages]

    def instances(self, compartment: str, limit: int) -> list[dict[str, Any]]:
        """``ListInstances`` of ``compartment``, every page."""
        import oci

        pages = self._pages("ListInstances", self.client.list_instances, compartment, limit=limit)
        return [oci.util.to_dict(i) for i in pages]

    def compute_host(self, host_id: str) -> dict[str, Any]:
        """``GetComputeHost`` (the full record: ``additional_data`` holds the rack)."""
        import oci

        self.calls["GetComputeHost"] = self.calls.get("GetComputeHost", 0) + 1
        try:
            return dict(oci.util.to_dict(self.client.get_compute_host(host_id).data))
        except _errors() as exc:
            raise _explain(exc, f"GetComputeHost {host_id}") from None


def connect(options: OciConnection) -> OciReader:
    """An :class:`OciReader` with the operator's credentials (config file or instance principal)."""
    try:
        import oci
    except ImportError:
        raise ProviderError("provider 'oci' needs the OCI SDK: pip install 'topocast[oci]'") from None
    # the SDK's own retry (429, 5xx, connection errors: exponential backoff with jitter), bounded by attempts;
    # its default strategy would keep a dead endpoint's caller waiting for minutes
    strategy = oci.retry.RetryStrategyBuilder(
        max_attempts_check=True, max_attempts=options.attempts, total_elapsed_time_check=True,
        total_elapsed_time_seconds=120, service_error_check=True,
    ).get_retry_strategy()  # fmt: skip
    kwargs: dict[str, Any] = {"retry_strategy": strategy}
    if options.endpoint:
        kwargs["service_endpoint"] = options.endpoint.rstrip("/")
    try:
        if options.auth == "instance_principal":
            signer = oci.auth.signers.InstancePrincipalsSecurityTokenSigner()
            config: dict[str, Any] = {"region": options.region or signer.region}
            kwargs["signer"] = signer
            tenancy = getattr(signer, "tenancy_id", None)
        else:
            location = options.config_file or oci.config.DEFAULT_LOCATION
            config = oci.config.from_file(location, options.profile)
            if options.region:
                config["region"] = options.region
            tenancy = config.get("tenancy")
        client = oci.core.ComputeClient(config, **kwargs)
    except _errors() as exc:
        raise _explain(exc, f"credentials ({options.auth})") from None
    return OciReader(client, str(tenancy) if tenancy else None)


def imds_get(url: str, timeout: float = 5.0) -> str:
    """GET one OCI instance metadata (IMDSv2) URL with ``Authorization: Bearer Oracle``; at most 1 MiB is read,
    within ``timeout`` seconds in all, no redirect followed (:mod:`topocast.safeio.http`)."""
    from topocast.safeio.http import CallPolicy, HttpCallError, call

    what = f"OCI IMDS {url}"
    try:
        answer = call("GET", url, what=what, policy=CallPolicy(deadline=timeout, max_answer_bytes=1 << 20),
                      headers={"Authorization": "Bearer Oracle"})  # fmt: skip
    except HttpCallError as exc:
        if exc.kind in ("connect", "deadline", "protocol"):
            raise ProviderError(
                f"{what}: cannot reach it ({exc.detail or exc.kind}); run on an OCI instance or use input"
            ) from None
        raise ProviderError(str(exc)) from None
    if answer.status != 200:
        raise ProviderError(f"{what}: HTTP {answer.status} (not an OCI instance, or IMDSv2 disabled?)")
    return answer.body.decode("utf-8", "replace")


def shell_clients(means: ShellMeans, options: Mapping[str, Any]) -> SdkClient:
    """The ``oci`` provider's connector: ``oci`` is :func:`connect` (the provider calls it with its validated
    options) and ``oci-imds`` is :func:`imds_get` (the instance's own metadata)."""
    reader: Connect = connect  # mypy: OciReader is the provider's OciApi, its options an OciConnection
    return services("oci", {"oci": lambda: reader, "oci-imds": lambda: imds_get})
