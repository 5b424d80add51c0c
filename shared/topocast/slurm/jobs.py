"""What Slurm says about jobs and nodes, read from its own output: a job's nodes and start time, and every
node's state, from ``scontrol`` text or slurmrestd JSON (``/slurm/v0.0.44/job/{id}``, ``/nodes``).

Pure parsers over text the caller read (a file, stdin, a REST answer): errors name the source and what is
wrong, one line. ``scontrol`` prints times in the controller host's local time without a zone; they are read
in this process's local time zone (run ``topocast score`` with the controller's ``TZ``).
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from topocast.errors import TopocastError
from topocast.model.capacity import NodeState
from topocast.model.hostlist import expand
from topocast.model.placement_score import JobNodes
from topocast.safeio.validation import validate

__all__ = ["JobNodes", "classify_state", "parse_job", "parse_node_states"]


class SlurmOutputError(TopocastError):
    """Slurm's output (scontrol text, slurmrestd JSON) is not what the parser expects."""


#: ``Key=value`` at a line start or after a space: ``NodeList=`` is not ``ReqNodeList=``
def _field(text: str, key: str) -> str | None:
    m = re.search(rf"(?:^|\s){key}=(\S*)", text)
    return m.group(1) if m else None


def _scontrol_time(value: str | None, where: str) -> datetime | None:
    if value in (None, "", "None", "Unknown", "N/A", "(null)"):
        return None
    assert value is not None
    try:
        return datetime.fromisoformat(value).astimezone(UTC)  # naive: this process's local time
    except ValueError:
        raise SlurmOutputError(f"{where}: StartTime={value!r} is not a time (expected 2026-12-01T10:00:00)") from None


def _nodes(expr: str, where: str) -> tuple[str, ...]:
    try:
        return tuple(expand(expr))
    except TopocastError as exc:
        raise SlurmOutputError(f"{where}: {exc}") from None


def parse_scontrol_job(text: str, where: str) -> JobNodes:
    """One job from ``scontrol show job -d <id>`` (the ``NodeList=`` allocation and ``StartTime=``)."""
    records = [r for r in re.split(r"(?=(?:^|\n)\s*JobId=)", text) if "JobId=" in r]
    if not records:
        raise SlurmOutputError(f"{where}: no JobId= record (expected the output of 'scontrol show job -d <id>')")
    het = {_field(r, "HetJobId") for r in records}
    if len(records) > 1 and (len(het) != 1 or None in het):
        ids = ", ".join(str(_field(r, "JobId")) for r in records[:5])
        raise SlurmOutputError(f"{where}: {len(records)} jobs ({ids}); give one job")
    # one job, or the components of one heterogeneous job (HetJobId=): their nodes together
    job = _field(records[0], "HetJobId") if len(records) > 1 else _field(records[0], "JobId")
    nodes: list[str] = []
    starts: list[datetime] = []
    for record in records:
        node_list = _field(record, "NodeList")
        if node_list in (None, "", "(null)"):
            state = _field(record, "JobState") or "unknown"
            raise SlurmOutputError(f"{where}: job {_field(record, 'JobId')} has no nodes (JobState={state})")
        assert node_list is not None
        nodes.extend(_nodes(node_list, where))
        start = _scontrol_time(_field(record, "StartTime"), where)
        if start is not None:
            starts.append(start)
    return JobNodes(job or "?", tuple(dict.fromkeys(nodes)), min(starts) if starts else None)


class _Number(BaseModel):
    model_config = ConfigDict(extra="ignore")
    set: bool = True
    infinite: bool = False
    number: int = 0


class _RestJob(BaseModel):
    model_config = ConfigDict(extra="ignore")
    job_id: int
    nodes: str = ""
    start_time: _Number | int | None = None
    job_state: list[str] | str = Field(default_factory=list)
    het_job_id: _Number | int | None = None

    def het(self) -> int:
        """The heterogeneous job this is a component of (0: none)."""
        h = self.het_job_id
        return h if isinstance(h, int) else (h.number if h is not None and h.set and not h.infinite else 0)


class _RestJobs(BaseModel):
    model_config = ConfigDict(extra="ignore")
    jobs: list[_RestJob]


def parse_rest_job(data: Any, where: str) -> JobNodes:
    """One job from slurmrestd's ``GET /slurm/v0.0.44/job/{id}`` answer (``jobs[0].nodes``, ``start_time``)."""
    answer = validate(_RestJobs, data, where, SlurmOutputError)
    het = {j.het() for j in answer.jobs}
    if not answer.jobs or (len(answer.jobs) > 1 and (len(het) != 1 or 0 in het)):
        raise SlurmOutputError(f"{where}: {len(answer.jobs)} jobs in 'jobs'; give one job")
    nodes: list[str] = []
    epochs: list[int] = []
    for rest in answer.jobs:  # one job, or the components of one heterogeneous job: their nodes together
        if not rest.nodes:
            raise SlurmOutputError(f"{where}: job {rest.job_id} has no nodes (job_state={rest.job_state})")
        nodes.extend(_nodes(rest.nodes, where))
        start = rest.start_time
        epoch = start if isinstance(start, int) else (start.number if start and start.set and not start.infinite else 0)
        if epoch:
            epochs.append(epoch)
    job = str(answer.jobs[0].het() or answer.jobs[0].job_id) if len(answer.jobs) > 1 else str(answer.jobs[0].job_id)
    return JobNodes(job, tuple(dict.fromkeys(nodes)), datetime.fromtimestamp(min(epochs), UTC) if epochs else None)


def parse_job(text: str, where: str) -> JobNodes:
    """A Slurm job from either form: slurmrestd JSON (starts with ``{``) or ``scontrol show job -d`` text."""
    if text.lstrip().startswith("{"):
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise SlurmOutputError(f"{where}: not valid JSON ({exc})") from None
        return parse_rest_job(data, where)
    return parse_scontrol_job(text, where)


#: base states and flags that take a node out of service (``scontrol`` / slurmrestd spell them alike)
_OUT = {
    "DOWN", "DRAIN", "DRAINED", "DRAINING", "FAIL", "FAILING", "MAINT", "NOT_RESPONDING", "NO_RESPOND",
    "FUTURE", "UNKNOWN", "ERROR", "INVALID", "INVALID_REG", "REBOOT_ISSUED", "REBOOT_REQUESTED",
    "POWERING_DOWN", "POWER_DOWN",
}  # fmt: skip
_BUSY = {"ALLOCATED", "ALLOC", "MIXED", "MIX", "COMPLETING", "RESERVED", "RESV"}


def classify_state(state: str | list[str]) -> NodeState:
    """``IDLE+DRAIN`` / ``["MIXED"]`` -> drained / allocated / free (out of service wins over busy).

    An idle node powered down by power saving (``IDLE+CLOUD+POWERED_DOWN``) is free: Slurm starts it for
    a job. sinfo's suffixes (``idle*``, ``alloc~``) are stripped; ``*`` (not responding) is out of service.
    """
    parts = state if isinstance(state, list) else re.split(r"[+|]", state)
    flags = set()
    for part in parts:
        word = part.strip().upper()
        if word.endswith("*"):
            flags.add("NOT_RESPONDING")
        flags.add(word.rstrip("*~#!%$@^-"))
    if flags & _OUT:
        return "drained"
    if flags & _BUSY:
        return "allocated"
    return "free"


class _RestNode(BaseModel):
    model_config = ConfigDict(extra="ignore")
    name: str
    state: list[str] | str


class _RestNodes(BaseModel):
    model_config = ConfigDict(extra="ignore")
    nodes: list[_RestNode]


def parse_node_states(text: str, where: str) -> dict[str, NodeState]:
    """Every node's state from ``scontrol show nodes`` (either layout, ``-o`` too) or slurmrestd ``/nodes`` JSON."""
    if text.lstrip().startswith("{"):
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise SlurmOutputError(f"{where}: not valid JSON ({exc})") from None
        answer = validate(_RestNodes, data, where, SlurmOutputError)
        return {n.name: classify_state(n.state) for n in answer.nodes}
    out: dict[str, NodeState] = {}
    for record in re.split(r"(?=(?:^|\s)NodeName=)", text):
        name = _field(record, "NodeName")
        if name is None:
            continue
        state = _field(record, "State")
        if not state:
            raise SlurmOutputError(f"{where}: node {name} has no State=")
        out[name] = classify_state(state)
    if not out:
        raise SlurmOutputError(f"{where}: no NodeName= record (expected 'scontrol show nodes' or slurmrestd /nodes)")
    return out
