"""The Nebius calls the ``nebius`` provider makes, as a Protocol: exactly these, nothing else.

:class:`NebiusApi` is what :mod:`topocast.providers.nebius.provider` asks ``sdk_client("nebius")`` for (a
reader for its options, ``provider.Connect``); mypy checks :class:`topocast.providers.nebius.sdk.NebiusReader`
against it (the typed assignment in :func:`topocast.providers.nebius.sdk.shell_clients`). The records are
plain dicts of the ``nebius.compute.v1.Instance`` fields the provider reads.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

__all__ = ["NebiusApi"]


class NebiusApi(Protocol):
    """The Nebius reads this provider makes (``topocast.providers.nebius.sdk.NebiusReader``; mypy checks it there)."""

    @property
    def calls(self) -> Mapping[str, int]: ...

    def instances(self, project: str, page_size: int) -> list[dict[str, Any]]: ...

    def close(self) -> None: ...
