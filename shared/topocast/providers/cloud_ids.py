"""Cloud resource IDs as switch IDs: kept as they are when Slurm can take them, else a stable short form.

An OCI OCID (``ocid1.computenetworkblock.oc1.<region>.<60 characters>``) is longer than the 64
characters a Slurm ``SwitchName`` may have (:data:`topocast.model.names.MAX_SWITCH_NAME`). Topograph renames
such switches ``switch.<tier>.<n>`` in order of appearance, so a name changes when a host is added;
here an ID that is only too long becomes ``<tier>-<first 12 hex of its sha256>``, the same on every run,
and the provider keeps the full ID in each node's ``labels`` so an operator can trace it back. An ID
with an unsafe character is returned as it is, so :func:`topocast.model.placement.place_nodes` sets its node
aside with the reason instead of a hash hiding it.
"""

from __future__ import annotations

import hashlib

from topocast.model.names import MAX_SWITCH_NAME, all_safe

__all__ = ["switch_id"]


def switch_id(tier: str, value: str) -> str:
    """``value``, or ``<tier>-<sha256[:12]>`` when it is a safe name longer than 64 characters."""
    if len(value) <= MAX_SWITCH_NAME or not all_safe((value,), 4096, cached=False):
        return value
    return f"{tier}-{hashlib.sha256(value.encode()).hexdigest()[:12]}"
