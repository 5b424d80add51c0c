"""Fabric-health actions on Slurm: read who drained what, drain and resume through ``scontrol``.

* :func:`read_nodes` reads every node's state and drain reason (``scontrol show node --json`` where
  the controller speaks JSON, 23.02 and later; the one-line text form otherwise).
* :func:`holding` says which drains are topocast's own (the reason starts ``topocast:``) and which are
  someone else's (any other reason: an operator, Slurm itself for a node not responding, another tool).
* :func:`apply_plan` drains (one call per reason) and resumes through a :class:`NodeControl`: ``scontrol
  update NodeName=<hostlist> State=DRAIN Reason=<reason>`` / ``State=RESUME`` (:class:`ScontrolControl`), or
  slurmrestd's bulk ``POST nodes/`` (:mod:`topocast.slurm.drain_rest`); it resumes only nodes whose reason,
  read again right before, is still topocast's: a node an operator re-drained in between is left alone.

Draining lets running jobs finish and keeps new jobs off the node; resuming makes it schedulable again.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from itertools import groupby
from typing import Protocol

from topocast.model.health_plan import ApplyOutcome, HealthPlan, Holding, is_ours
from topocast.model.hostlist import compact_str
from topocast.slurm.scontrol import Command, SlurmControllerError, run_scontrol

__all__ = ["NodeControl", "ScontrolControl", "SlurmNode", "apply_plan", "holding", "parse_show_nodes", "read_nodes"]


@dataclass(frozen=True)
class SlurmNode:
    """One node as the controller reports it: its state flags (``IDLE``, ``DRAIN``, ...) and reason."""

    name: str
    state: tuple[str, ...]
    reason: str | None


_NODE = re.compile(r"^NodeName=(\S+)")
_STATE = re.compile(r"\sState=(\S+)")
# the reason is the last field of the one-line form, followed by who set it and when: ` [root@2026-12-04T15:29:11]`
_REASON = re.compile(r"\sReason=(.*?)(?:\s\[[^\]\s]*@[^\]\s]*\])?$")


def parse_show_nodes(text: str) -> dict[str, SlurmNode]:
    """``scontrol show node --json`` or ``scontrol show node -o`` output -> node name -> :class:`SlurmNode`."""
    stripped = text.lstrip()
    if stripped.startswith("{"):
        try:
            data = json.loads(stripped)
            rows = data["nodes"]
            return {n["name"]: SlurmNode(n["name"], tuple(n.get("state") or ()), n.get("reason") or None) for n in rows}
        except (ValueError, KeyError, TypeError) as exc:
            raise SlurmControllerError(f"scontrol show node --json: unexpected answer ({exc})") from None
    out: dict[str, SlurmNode] = {}
    for line in text.splitlines():
        name = _NODE.match(line)
        if name is None:
            continue
        state = _STATE.search(line)
        reason = _REASON.search(line)
        flags = tuple(f for f in re.split(r"[+*~#!%$@^-]", state.group(1)) if f) if state else ()
        out[name.group(1)] = SlurmNode(name.group(1), flags, reason.group(1) if reason else None)
    return out


def read_nodes(
    scontrol: Command = "scontrol", env: dict[str, str] | None = None, timeout: float = 30.0
) -> dict[str, SlurmNode]:
    """Every node's state and reason from the running controller."""
    code, out, err = run_scontrol(scontrol, ["show", "node", "--json"], env, timeout)
    if code == 0 and out.lstrip().startswith("{"):
        return parse_show_nodes(out)
    code, out, err = run_scontrol(scontrol, ["show", "node", "-o"], env, timeout)
    if code != 0 or not out.strip():
        raise SlurmControllerError(f"scontrol show node failed: {(err or out).strip() or f'exit status {code}'}")
    return parse_show_nodes(out)


def holding(nodes: Mapping[str, SlurmNode], exclude: Iterable[str] = ()) -> Holding:
    """What Slurm holds: topocast's drains (reason -> text) and everyone else's; ``exclude``d nodes count as
    someone else's, so they are never touched (an operator's override)."""
    ours = {n.name: n.reason for n in nodes.values() if n.reason is not None and is_ours(n.reason)}
    foreign = {n.name for n in nodes.values() if n.reason is not None and not is_ours(n.reason)}
    skip = set(exclude)
    return Holding(
        {k: v for k, v in ours.items() if k not in skip and v is not None}, frozenset(foreign | (skip & nodes.keys()))
    )


class NodeControl(Protocol):
    """How one controller is read and told: ``scontrol`` (:class:`ScontrolControl`) or slurmrestd
    (:class:`topocast.slurm.drain_rest.RestControl`). ``drain`` / ``resume`` return what the controller
    complained about (nothing on success); the state read back afterwards decides."""

    def read(self) -> dict[str, SlurmNode]: ...

    def drain(self, names: list[str], reason: str) -> list[str]: ...

    def resume(self, names: list[str]) -> list[str]: ...


@dataclass(frozen=True)
class ScontrolControl:
    """``scontrol show node`` / ``scontrol update NodeName=<hostlist> State=DRAIN|RESUME``."""

    scontrol: Command = "scontrol"
    env: dict[str, str] | None = None
    timeout: float = 30.0

    def read(self) -> dict[str, SlurmNode]:
        return read_nodes(self.scontrol, self.env, self.timeout)

    def drain(self, names: list[str], reason: str) -> list[str]:
        return self._update([f"NodeName={compact_str(names)}", "State=DRAIN", f"Reason={reason}"])

    def resume(self, names: list[str]) -> list[str]:
        # Slurm 22.05 answers "Invalid node state specified" for a node that never registered, yet
        # clears its drain: the state read back decides
        return self._update([f"NodeName={compact_str(names)}", "State=RESUME"])

    def _update(self, args: list[str]) -> list[str]:
        code, out, err = run_scontrol(self.scontrol, ["update", *args], self.env, self.timeout)
        if code != 0:
            return [f"scontrol update {' '.join(args[:2])}: {(err or out).strip() or f'exit status {code}'}"]
        return []


def apply_plan(plan: HealthPlan, control: NodeControl) -> ApplyOutcome:
    """Drain and resume what ``plan`` says; what counts is what the controller reports afterwards."""
    outcome = ApplyOutcome()
    said: list[str] = []  # the controller's complaints, quoted when a node did not end up as asked
    by_reason = sorted(plan.mark.items(), key=lambda kv: (kv[1], kv[0]))
    for reason, group in groupby(by_reason, key=lambda kv: kv[1]):
        said += control.drain([n for n, _ in group], reason)
    if plan.unmark:
        now = control.read()
        still = [n for n in plan.unmark if n in now and is_ours(now[n].reason)]
        outcome.left = sorted(set(plan.unmark) - set(still))
        if still:
            said += control.resume(still)
    after = control.read()
    failed: list[str] = []
    for node, reason in plan.mark.items():
        ok = node in after and after[node].reason == reason and "DRAIN" in after[node].state
        (outcome.drained if ok else failed).append(node)
    for node in plan.unmark:
        if node not in outcome.left:
            ok = node in after and not is_ours(after[node].reason)
            (outcome.resumed if ok else failed).append(node)
    if failed:
        why = f" ({'; '.join(said)})" if said else ""
        outcome.errors.append(f"{compact_str(failed)}: not drained or resumed as asked{why}")
    outcome.drained.sort()
    outcome.resumed.sort()
    return outcome
