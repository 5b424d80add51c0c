"""The OCI calls the ``oci`` provider makes, as a Protocol: exactly these, nothing else.

:class:`OciApi` is what :mod:`topocast.providers.oci.provider` asks ``sdk_client("oci")`` for (a reader for
its options, ``provider.Connect``); mypy checks :class:`topocast.providers.oci.sdk.OciReader` against it (the
typed assignment in :func:`topocast.providers.oci.sdk.shell_clients`). The records are plain dicts in the
SDK's own snake_case field names (``oci.util.to_dict``). :data:`ImdsGet` is ``sdk_client("oci-imds")``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

__all__ = ["ImdsGet", "OciApi"]


class OciApi(Protocol):
    """The OCI reads this provider makes (``topocast.providers.oci.sdk.OciReader``; mypy checks it there)."""

    @property
    def tenancy(self) -> str | None: ...

    @property
    def calls(self) -> Mapping[str, int]: ...

    def instances(self, compartment: str, limit: int) -> list[dict[str, Any]]: ...

    def compute_hosts(
        self, compartment: str, availability_domain: str | None, limit: int, *, in_subtree: bool = False
    ) -> list[dict[str, Any]]: ...

    def compute_host(self, host_id: str) -> dict[str, Any]: ...


#: what the shell supplies as ``sdk_client("oci-imds")``: GET of an IMDS URL -> body text
ImdsGet = Callable[[str], str]
