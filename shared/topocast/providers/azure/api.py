"""The ARM calls the ``azure`` provider makes, as a Protocol: exactly these, nothing else.

:class:`AzureComputeApi` is what :mod:`topocast.providers.azure.provider` asks ``sdk_client("azure-compute")``
for (a client for its options, ``provider.Connect``); mypy checks :class:`topocast.providers.azure.sdk.AzureCompute`
against it (the typed assignment in :func:`topocast.providers.azure.sdk.shell_clients`). The records are the
wire JSON of each listed item (``Model.as_dict()``). :data:`NvlinkUploads` is ``sdk_client("nvlink-uploads")``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

__all__ = ["AzureComputeApi", "NvlinkUploads"]


class AzureComputeApi(Protocol):
    """The ARM listings this provider makes (``topocast.providers.azure.sdk.AzureCompute``; mypy checks it there)."""

    @property
    def calls(self) -> Mapping[str, int]: ...

    def scale_sets(self, group: str) -> list[dict[str, Any]]: ...

    def scale_set_vms(self, group: str, scale_set: str) -> list[dict[str, Any]]: ...

    def scale_set_members(self, group: str, scale_set_id: str) -> list[dict[str, Any]]: ...

    def virtual_machines(self, group: str) -> list[dict[str, Any]]: ...


#: what the shell supplies as ``sdk_client("nvlink-uploads")``: the good ``collect nvlink`` records under a
#: bucket prefix URI, ``{uri: bytes}`` (a bad one quarantined by the shell, its host's last good one standing in)
NvlinkUploads = Callable[[str], Mapping[str, bytes]]
