"""AWS capacity block health: ``DescribeCapacityBlockStatus`` -> health records in the graph.

EC2 reports, per capacity block, ``InterconnectStatus`` (the high-bandwidth accelerator interconnect:
``ok``, ``impaired``, ``insufficient-data``) and how many instances of each of its capacity
reservations are unavailable (a failed system status check) (EC2 API reference; botocore's ec2 model,
``CapacityBlockStatus``). A block maps to graph nodes two ways: an UltraServer's ``CapacityBlockId``
is already its accelerator domain; any other instance names its ``CapacityReservationId`` in
``DescribeInstances``, which the status ties to its block, and the node carries the block in its
``capacity-block`` label.

Interconnect ``impaired`` -> ``impaired``, ``insufficient-data`` -> ``unknown``, ``ok`` -> no record.
Pure (the caller passes the time).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from topocast.model.health import HealthRecord, HealthState

__all__ = ["SOURCE", "block_records", "reservation_blocks"]

SOURCE = "aws-capacity-block"
_STATES: dict[str, HealthState] = {"ok": "ok", "impaired": "impaired", "insufficient-data": "unknown"}


def reservation_blocks(statuses: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """Capacity reservation ID -> the capacity block holding it."""
    return {
        cr["CapacityReservationId"]: status["CapacityBlockId"]
        for status in statuses
        for cr in status.get("CapacityReservationStatuses") or []
        if cr.get("CapacityReservationId") and status.get("CapacityBlockId")
    }


def block_records(statuses: Iterable[Mapping[str, Any]], used: set[str], now: datetime) -> list[HealthRecord]:
    """A record per block of ``used`` (the blocks the cluster's nodes are in) that is not ``ok``.

    An interconnect status EC2 may add later reads as ``unknown`` (shown, never acted on).
    """
    out: list[HealthRecord] = []
    for status in statuses:
        block = status.get("CapacityBlockId")
        if block not in used:
            continue
        raw = str(status.get("InterconnectStatus") or "insufficient-data")
        state = _STATES.get(raw, "unknown")
        if state == "ok":
            continue
        total, down = status.get("TotalCapacity") or 0, status.get("TotalUnavailableCapacity") or 0
        reason = f"interconnect {raw}; {down} of {total} instance(s) unavailable"
        out.append(HealthRecord(kind="capacity_block", id=block, state=state, source=SOURCE, reason=reason,
                                observed_at=now))  # fmt: skip
    return out
