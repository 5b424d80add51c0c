"""The Nebius Python SDK (``nebius``, the ``nebius`` extra) as plain records for :mod:`.provider`.

Below the providers, like :mod:`topocast.providers.oci.sdk`: the shell hands :func:`connect` to the
provider as ``sdk_client("nebius")``. Calls go through the SDK's gRPC stubs:
``nebius.api.nebius.compute.v1.InstanceServiceClient.list`` (service ``nebius.compute.v1.InstanceService``,
method ``List``; messages ``ListInstancesRequest{parent_id, page_size, page_token}`` ->
``ListInstancesResponse{items, next_page_token}``, ``Instance.status.infiniband_topology_path.path``,
from the SDK's ``nebius/compute/v1/instance.proto`` descriptors). Pages follow ``next_page_token``; a
token the API hands back twice is an error.

Credentials are the SDK's own: ``NEBIUS_IAM_TOKEN``, else the ``nebius`` CLI profile, or a service
account credentials file (``credentials_file``). ``endpoint`` sends every call to one address (a
private endpoint, or the tests' in-process gRPC fake with ``insecure``: plaintext, never for a real
endpoint). Every failure is one :class:`~topocast.errors.ProviderError` line with the gRPC status.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from topocast import __version__
from topocast.errors import ProviderError
from topocast.providers.means import SdkClient, ShellMeans, services

if TYPE_CHECKING:
    from topocast.providers.nebius.provider import Connect
from topocast.safeio.paging import PageGuard

__all__ = ["NebiusConnection", "NebiusReader", "connect", "shell_clients"]

USER_AGENT = f"topocast/{__version__}"


class NebiusConnection(Protocol):
    """What :func:`connect` reads of the provider's options."""

    endpoint: str | None
    insecure: bool
    credentials_file: str | None
    timeout: float


def _record(item: Any) -> dict[str, Any]:
    """The fields the provider reads of one ``nebius.compute.v1.Instance``."""
    meta, spec, status = item.metadata, item.spec, item.status
    path = list(status.infiniband_topology_path.path) if status.infiniband_topology_path is not None else []
    return {
        "id": meta.id,
        "name": meta.name,
        "labels": dict(meta.labels),
        "hostname": spec.hostname,
        "platform": spec.resources.platform if spec.resources is not None else "",
        "preset": spec.resources.preset if spec.resources is not None else "",
        "gpu_cluster": spec.gpu_cluster.id if spec.gpu_cluster is not None else "",
        "nvl_instance_group_id": spec.nvl_instance_group_id,
        "state": getattr(status.state, "name", str(status.state)),
        "infiniband_topology_path": path,
    }


@dataclass
class NebiusReader:
    """Paged ``InstanceService.List`` over one SDK channel, counted."""

    sdk: Any
    timeout: float = 60.0
    calls: dict[str, int] = field(default_factory=dict)

    def instances(self, project: str, page_size: int) -> list[dict[str, Any]]:
        from nebius.aio.service_error import RequestError
        from nebius.api.nebius.compute.v1 import InstanceServiceClient, ListInstancesRequest
        from nebius.base.error import SDKError

        service = InstanceServiceClient(self.sdk)
        out: list[dict[str, Any]] = []
        guard = PageGuard("Nebius InstanceService.List", page_size)
        token = ""
        while True:
            self.calls["InstanceService.List"] = self.calls.get("InstanceService.List", 0) + 1
            request = ListInstancesRequest(parent_id=project, page_size=page_size, page_token=token)
            try:
                response = service.list(request, timeout=self.timeout).wait()
            except RequestError as exc:
                status = exc.status
                code = getattr(status.code, "name", str(status.code))
                hint = {"UNAUTHENTICATED": " (check NEBIUS_IAM_TOKEN / the credentials file)",
                        "PERMISSION_DENIED": " (the service account needs compute.instance viewer on the project)",
                        "UNAVAILABLE": " (endpoint unreachable)"}.get(code, "")  # fmt: skip
                message = (status.message or "").splitlines()[0][:200] if status.message else ""
                raise ProviderError(
                    f"Nebius InstanceService.List: {code}{hint}{': ' + message if message else ''}"
                ) from None
            except (SDKError, OSError) as exc:
                raise ProviderError(f"Nebius InstanceService.List: {type(exc).__name__}: {str(exc)[:200]}") from None
            records = [_record(item) for item in response.items]
            out.extend(records)
            if not guard.more((r["id"] for r in records), response.next_page_token):
                return out
            token = response.next_page_token

    def close(self) -> None:
        self.sdk.sync_close()


def connect(options: NebiusConnection) -> NebiusReader:
    """A :class:`NebiusReader` with the SDK's credentials (``NEBIUS_IAM_TOKEN``, profile, or a file)."""
    try:
        from nebius.base.error import SDKError
        from nebius.sdk import SDK
    except ImportError:
        raise ProviderError("provider 'nebius' needs the Nebius SDK: pip install 'topocast[nebius]'") from None
    kwargs: dict[str, Any] = {"user_agent_prefix": USER_AGENT, "keepalive": False}
    if options.endpoint:
        from nebius.base.options import INSECURE
        from nebius.base.resolver import Constant

        kwargs["resolver"] = Constant(options.endpoint)
        if options.insecure:
            kwargs["address_options"] = {options.endpoint: [(INSECURE, True)]}
    if options.credentials_file:
        kwargs["credentials_file_name"] = options.credentials_file
    try:
        sdk = SDK(**kwargs)
    except (SDKError, OSError, ValueError) as exc:
        raise ProviderError(f"Nebius credentials: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}") from None
    return NebiusReader(sdk, options.timeout)


def shell_clients(means: ShellMeans, options: Mapping[str, Any]) -> SdkClient:
    """The ``nebius`` provider's connector: ``nebius`` is :func:`connect` (called with the validated options)."""
    reader: Connect = connect  # mypy: NebiusReader is the provider's NebiusApi
    return services("nebius", {"nebius": lambda: reader})
