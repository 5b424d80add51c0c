"""The Azure compute calls the ``azure`` provider makes, through the real ``azure-mgmt-compute`` client.

Thin on purpose: each call lists one collection (every page), returns the items as the wire JSON
(``Model.as_dict()``: ``properties.instanceView.placementGroupId``...), counts the pages, and turns
the SDK's exceptions into one :class:`ProviderError` line (401 authentication, 403, 404 resource
group, connection failures). ``azure-mgmt-compute`` / ``azure-identity`` are the optional extra
``azure``, imported only here and only when the Azure provider runs; no function archive has them.

Credentials: ``AZURE_ACCESS_TOKEN`` (a bearer token for ``https://management.azure.com/``, e.g.
``az account get-access-token --query accessToken -o tsv``) when set, else azure-identity's
``DefaultAzureCredential`` (managed identity on the head node, the Azure CLI login, workload
identity in a pod). ``endpoint`` overrides the ARM endpoint (sovereign clouds, tests); plain
``http://`` is allowed only for a loopback address (a local fake or proxy), never elsewhere.
"""

from __future__ import annotations

import os
import time
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from topocast.errors import ProviderError
from topocast.providers.azure.api import NvlinkUploads
from topocast.providers.means import SdkClient, ShellMeans, services, uploads

if TYPE_CHECKING:
    from topocast.providers.azure.provider import Connect
from topocast.safeio.paging import PageGuard

__all__ = ["TOKEN_ENV", "AzureCompute", "compute_client", "connect", "nvlink_uploads", "shell_clients"]

TOKEN_ENV = "AZURE_ACCESS_TOKEN"
ARM = "https://management.azure.com"
_LOOPBACK = {"127.0.0.1", "localhost", "::1"}


class _StaticToken:
    """A ``TokenCredential`` for a bearer token the operator already has."""

    def __init__(self, token: str) -> None:
        self.token = token

    def get_token(self, *scopes: str, **kwargs: Any) -> Any:
        from azure.core.credentials import AccessToken

        return AccessToken(self.token, int(time.time()) + 3600)


@dataclass
class AzureCompute:
    """The listings the provider needs, as plain JSON, with a page count per operation."""

    client: Any
    endpoint: str
    subscription_id: str
    #: per-call keyword arguments (``enforce_https=False`` for a loopback endpoint)
    call_kwargs: dict[str, Any] = field(default_factory=dict)
    calls: dict[str, int] = field(default_factory=dict)

    def scale_sets(self, group: str) -> list[dict[str, Any]]:
        return self._list("VirtualMachineScaleSets.List", group,
                          lambda: self.client.virtual_machine_scale_sets.list(group, **self.call_kwargs))  # fmt: skip

    def scale_set_vms(self, group: str, scale_set: str) -> list[dict[str, Any]]:
        """The VMs of one Uniform scale set, with their instance views (the scale-set VM API is Uniform-only)."""
        ops = self.client.virtual_machine_scale_set_vms
        return self._list("VirtualMachineScaleSetVMs.List", group,
                          lambda: ops.list(group, scale_set, expand="instanceView", **self.call_kwargs))  # fmt: skip

    def scale_set_members(self, group: str, scale_set_id: str) -> list[dict[str, Any]]:
        """The VMs of one Flexible scale set through the VM API, with their instance views: ARM takes
        ``$expand=instanceView`` on the VM list only with a ``$filter`` on the scale set (SDK docstring)."""
        where = f"'virtualMachineScaleSet/id' eq '{scale_set_id}'"
        return self._list("VirtualMachines.List", group,
                          lambda: self.client.virtual_machines.list(group, filter=where, expand="instanceView",
                                                                    **self.call_kwargs))  # fmt: skip

    def virtual_machines(self, group: str) -> list[dict[str, Any]]:
        """Every VM of the group, without instance views (ARM refuses ``$expand`` on an unfiltered list)."""
        return self._list("VirtualMachines.List", group,
                          lambda: self.client.virtual_machines.list(group, **self.call_kwargs))  # fmt: skip

    def _list(self, operation: str, group: str, start: Callable[[], Any]) -> list[dict[str, Any]]:
        from azure.core.exceptions import (
            ClientAuthenticationError,
            HttpResponseError,
            ResourceNotFoundError,
            ServiceRequestError,
        )

        out: list[dict[str, Any]] = []
        # ARM picks the page size; an ID (or name: unique in one listing) on two pages, an empty page or a
        # listing past the bound ends it (safeio.paging): the SDK itself follows nextLink forever
        guard = PageGuard(f"azure: {operation}")
        try:
            pages: Any = start().by_page()
            for page in pages:
                self.calls[operation] = self.calls.get(operation, 0) + 1
                items = [item.as_dict() for item in page]
                out.extend(items)
                if not guard.more((i.get("id") or i.get("name") for i in items), pages.continuation_token):
                    break
        except ClientAuthenticationError as exc:
            raise ProviderError(f"azure: {operation} at {self.endpoint}: authentication failed ({_why(exc)})") from None
        except ResourceNotFoundError as exc:
            raise ProviderError(
                f"azure: {operation}: resource group {group!r} of subscription {self.subscription_id} not found "
                f"({_why(exc)})"
            ) from None
        except HttpResponseError as exc:
            raise ProviderError(f"azure: {operation} at {self.endpoint} failed ({_why(exc)})") from None
        except ServiceRequestError as exc:
            raise ProviderError(f"azure: cannot reach {self.endpoint} ({' '.join(str(exc).split())[:200]})") from None
        return out


def _why(exc: Any) -> str:
    code = getattr(getattr(exc, "error", None), "code", None)
    status = getattr(exc, "status_code", None)
    message = getattr(getattr(exc, "error", None), "message", None) or getattr(exc, "message", "") or str(exc)
    head = " ".join(str(p) for p in (status, code) if p)
    text = " ".join(str(message).split())[:200]
    return f"{head}: {text}" if head else text


def compute_client(
    subscription_id: str, endpoint: str | None = None, credential: Any = None, *, retries: int = 3
) -> AzureCompute:
    """The provider's ``sdk_client("azure-compute")``: the SDK client with the operator's credentials."""
    try:
        from azure.mgmt.compute import ComputeManagementClient
    except ImportError:
        raise ProviderError("the azure provider needs the 'azure' extra: pip install 'topocast[azure]'") from None
    base = (endpoint or ARM).rstrip("/")
    url = urllib.parse.urlsplit(base)
    kwargs: dict[str, Any] = {}
    if url.scheme == "http":
        if url.hostname not in _LOOPBACK:
            raise ProviderError(f"azure endpoint {base!r}: plain http is allowed only for a loopback address")
        kwargs["enforce_https"] = False  # the bearer token never leaves this machine
    elif url.scheme != "https" or not url.hostname:
        raise ProviderError(f"azure endpoint {base!r}: expected https://HOST")
    if credential is None:
        token = os.environ.get(TOKEN_ENV)
        if token:
            credential = _StaticToken(token.strip())
        else:
            try:
                from azure.identity import DefaultAzureCredential
            except ImportError:
                raise ProviderError(f"no Azure credentials: set {TOKEN_ENV} or install azure-identity") from None
            credential = DefaultAzureCredential()
    scopes = [f"{ARM}/.default"] if endpoint is None else [f"{base}/.default"]
    # no redirect followed: the bearer token stays with ARM (azure-core would follow one, dropping only
    # Authorization on a change of domain); docs/security.md
    client = ComputeManagementClient(credential, subscription_id, base_url=base, credential_scopes=scopes,
                                     retry_total=retries, permit_redirects=False)  # fmt: skip
    return AzureCompute(client, base, subscription_id, kwargs)


def connect(options: Any) -> AzureCompute:
    """``sdk_client("azure-compute")`` of the CLI: the client for the provider's validated options
    (``subscription_id``, ``endpoint``; :class:`topocast.providers.azure.provider.Options`)."""
    return compute_client(options.subscription_id, options.endpoint)


def nvlink_uploads(means: ShellMeans) -> NvlinkUploads:
    """``sdk_client("nvlink-uploads")``: the shell's bucket reads of ``collect nvlink`` records, through the
    functions' quarantine (each record checked as discovery reads it)."""
    read = uploads(means, "azure")

    def good(prefix_uri: str) -> Mapping[str, bytes]:
        from topocast.providers.nvlink import RECORD_NAME, check_record

        return read(prefix_uri, check_record, RECORD_NAME)

    return good


def shell_clients(means: ShellMeans, options: Mapping[str, Any]) -> SdkClient:
    """The ``azure`` provider's connector: ``azure-compute`` is :func:`connect` (called with the validated
    options), ``nvlink-uploads`` the NVLink records under the ``uploads`` prefix, read by the shell."""
    client: Connect = connect  # mypy: AzureCompute is the provider's AzureComputeApi
    return services("azure", {"azure-compute": lambda: client, "nvlink-uploads": lambda: nvlink_uploads(means)})
