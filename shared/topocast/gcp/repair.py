"""GCP repair reporting: ``reservationSubBlocks.reportFaulty`` for a sub-block topocast sees unhealthy.

Opt-in and careful, because a report starts Google's repair (hosts may be taken out of the sub-block):

* **dry run by default**: without ``send`` nothing is called; the audit line says what would be;
* **what is reported**: each ``gcp-sub-block`` health record (``degraded`` or ``impaired``), once, as the
  sub-block its nodes run in (their ``gcp-sub-block`` label, ``sub_block_health``); the failure component is
  ``NVLINK_SWITCH`` when the record counts degraded infra (the NVLink domain), else ``MULTIPLE_FAULTY_HOSTS``;
* **rate limit**: at most ``max_per_hour`` reports in any hour, and one sub-block at most once per
  ``cooldown`` (the state file keeps what was sent); what the limit holds back is audited as ``held``;
* **an audit line per call** (JSON: when, which sub-block, component, dry run or the operation's name and
  status, or the error), printed and appended to the audit log.

``instances.reportHostAsFaulty`` is not used yet (no source reports one host as faulty on GCP).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from topocast.model.graph import TopologyGraph
from topocast.model.health import objects_of
from topocast.providers.gcp.health import SOURCE, parse_sub_block
from topocast.providers.gcp.provider import SUB_BLOCK_LABEL

__all__ = ["RepairLimits", "RepairState", "Report", "plan_reports", "send_reports"]

_INFRA = re.compile(r"(\d+) of \d+ infra degraded")


class Sent(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    sub_block: str
    at: AwareDatetime


class RepairState(BaseModel):
    """What was reported, for the rate limit (the state file)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    sent: list[Sent] = Field(default_factory=list)


@dataclass(frozen=True)
class RepairLimits:
    max_per_hour: int = 2
    cooldown: timedelta = timedelta(hours=24)


@dataclass(frozen=True)
class Report:
    """One sub-block to report (``held``: the rate limit holds it back, with why)."""

    sub_block: str
    component: str
    reason: str
    held: str | None = None


def plan_reports(graph: TopologyGraph, state: RepairState, limits: RepairLimits, now: datetime) -> list[Report]:
    """The sub-blocks to report now (pure)."""
    bad = {r.ref: r for r in graph.health if r.source == SOURCE and r.state in ("degraded", "impaired")}
    wanted: dict[str, Report] = {}
    for n in graph.nodes:
        path = n.labels.get(SUB_BLOCK_LABEL)
        if path is None or parse_sub_block(path) is None:
            continue
        for ref in objects_of(n.name, n.fabric, n.accelerator, n.labels):
            rec = bad.get(ref)
            if rec is not None and path not in wanted:
                m = _INFRA.search(rec.reason)
                component = "NVLINK_SWITCH" if m and int(m.group(1)) > 0 else "MULTIPLE_FAULTY_HOSTS"
                wanted[path] = Report(path, component, f"{rec.ref} {rec.state}: {rec.reason}")
    recent = [s for s in state.sent if now - s.at < timedelta(hours=1)]
    budget = max(0, limits.max_per_hour - len(recent))
    out: list[Report] = []
    for path, report in sorted(wanted.items()):
        last = max((s.at for s in state.sent if s.sub_block == path), default=None)
        if last is not None and now - last < limits.cooldown:
            out.append(Report(path, report.component, report.reason, f"reported {last.isoformat()}, cooldown"))
        elif budget == 0:
            out.append(Report(path, report.component, report.reason, f"{limits.max_per_hour} report(s) an hour"))
        else:
            budget -= 1
            out.append(report)
    return out


def send_reports(
    client: Any, project: str, reports: list[Report], state: RepairState, now: datetime, *, send: bool,
    audit: Callable[[str], None],
) -> RepairState:  # fmt: skip
    """Report what is not held (``send``) or say what would be; one audit line per report. Returns the new state."""
    from google.cloud import compute_v1

    sent = list(state.sent)
    for report in reports:
        line: dict[str, Any] = {"at": now.isoformat(), "call": "reservationSubBlocks.reportFaulty", "project": project,
                                "sub_block": report.sub_block, "failure_component": report.component,
                                "reason": report.reason, "dry_run": not send}  # fmt: skip
        ref = parse_sub_block(report.sub_block)
        if report.held is not None or ref is None:
            audit(json.dumps({**line, "held": report.held or "not a sub-block name"}))
            continue
        if send:
            zone, reservation, block, name = ref
            nvlink = report.component == "NVLINK_SWITCH"
            why = compute_v1.ReservationSubBlocksReportFaultyRequestFaultReason(
                behavior="NVSWITCH_FAULT_DEGRADED_BANDWIDTH" if nvlink else "PERFORMANCE",
                description=report.reason[:200],
            )
            body = compute_v1.ReservationSubBlocksReportFaultyRequest(
                failure_component=report.component, disruption_schedule="IMMEDIATE", fault_reasons=[why]
            )
            try:
                op = client.report_faulty_unary(
                    project=project, zone=zone, parent_name=f"reservations/{reservation}/reservationBlocks/{block}",
                    reservation_sub_block=name, reservation_sub_blocks_report_faulty_request_resource=body,
                )  # fmt: skip
            except Exception as exc:  # the audit says what failed; the next run tries again
                audit(json.dumps({**line, "error": f"{type(exc).__name__}: {str(exc)[:300]}"}))
                continue
            line |= {"operation": op.name, "status": str(op.status.name if hasattr(op.status, "name") else op.status)}
            sent.append(Sent(sub_block=report.sub_block, at=now))
        audit(json.dumps(line))
    return RepairState(sent=sent)
