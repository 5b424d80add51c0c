"""GCP sub-block health: ``reservationSubBlocks`` ``healthInfo`` -> health records in the graph.

A VM in a reservation names the sub-block it runs in (``resourceStatus.reservationConsumptionInfo.
consumedReservationSubBlock``, a full resource name). One ``reservationSubBlocks.get`` per distinct sub-block
reads its ``healthInfo`` (``healthStatus``, ``healthyHostCount``, ``degradedHostCount``,
``healthyInfraCount``, ``degradedInfraCount``: infra is, e.g., the NVLink domain) and ``physicalTopology``
(``cluster``, ``block``, ``subBlock``), the IDs the VMs' ``physicalHostTopology`` carry (google-cloud-compute
1.57.0 ``ReservationSubBlock``). The record is on the graph object the sub-block became: the accelerator
domain (``domain_tier`` ``subblock``, the default), else the sub-block's switch.

``healthStatus``: ``HEALTHY`` -> no record; ``DEGRADED`` -> ``degraded``; ``UNHEALTHY`` / ``CRITICAL`` (named by
the detailed health docs, not by the v1 enum) -> ``impaired``; anything else -> ``unknown``. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from topocast.model.health import HealthRecord, HealthState

__all__ = ["SOURCE", "SubBlockRef", "parse_sub_block", "sub_block_record"]

SOURCE = "gcp-sub-block"
_STATES: dict[str, HealthState] = {"HEALTHY": "ok", "DEGRADED": "degraded", "UNHEALTHY": "impaired",
                                   "CRITICAL": "impaired"}  # fmt: skip
_NAME = re.compile(
    r"zones/(?P<zone>[^/]+)/reservations/(?P<reservation>[^/]+)/reservationBlocks/(?P<block>[^/]+)"
    r"/reservationSubBlocks/(?P<sub_block>[^/]+)$"
)

SubBlockRef = tuple[str, str, str, str]  # zone, reservation, block, sub-block


def parse_sub_block(name: str) -> SubBlockRef | None:
    """``.../zones/Z/reservations/R/reservationBlocks/B/reservationSubBlocks/S`` (a full resource name or URL)."""
    m = _NAME.search(name)
    return (m["zone"], m["reservation"], m["block"], m["sub_block"]) if m else None


def sub_block_record(sub: Any, kind: str, known: Iterable[str], now: datetime) -> HealthRecord | None:
    """The record of one ``ReservationSubBlock`` (None when healthy, or when its ``physicalTopology.subBlock``
    is none of the ``known`` graph IDs)."""
    health = sub.health_info if "health_info" in sub else None
    status = (health.health_status if health is not None and "health_status" in health else "") or ""
    state = _STATES.get(status, "unknown")
    topo_id = sub.physical_topology.sub_block if "physical_topology" in sub else ""
    if state == "ok" or not topo_id or topo_id not in set(known):
        return None
    reason = f"sub-block {sub.name} {status or 'health not reported'}"
    if health is not None:
        reason += (
            f": {health.degraded_host_count} of {health.healthy_host_count + health.degraded_host_count} host(s), "
            f"{health.degraded_infra_count} of {health.healthy_infra_count + health.degraded_infra_count} "
            "infra degraded"
        )
    return HealthRecord(kind=kind, id=topo_id, state=state, source=SOURCE, reason=reason, observed_at=now)  # type: ignore[arg-type]
