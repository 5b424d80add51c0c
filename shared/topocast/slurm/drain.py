"""Fabric-health actions on Slurm: read who drained what, drain and resume through ``scontrol``.

* :func:`read_nodes` reads every node's state and drain reason (``scontrol show node --json`` where
  the controller speaks JSON, 23.02 and later; the one-line text form otherwise).
* :func:`holding` says which drains are topocast's own (the reason starts ``topocast:``) and which are
  someone else's (any other reason: an operator, Slurm itself for a node not responding, another tool).
* :func:`apply_plan` drains with ``scontrol update NodeName=<hostlist> State=DRAIN Reason=<reason>``
  (one call per reason) and resumes with ``State=RESUME``, but only nodes whose reason, read again right
  before, is still topocast's: a node an operator re-drained in between is left alone.

Draining lets running jobs finish and keeps new jobs off the node; resuming makes it schedulable again.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from itertools import groupby

from topocast.model.health_plan import ApplyOutcome, HealthPlan, Holding, is_ours
from topocast.model.hostlist import compact_str
from topocast.slurm.scontrol import Command, SlurmControllerError, run_scontrol

__all__ = ["SlurmNode", "apply_plan", "holding", "parse_show_nodes", "read_nodes"]


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


def _update(scontrol: Command, env: dict[str, str] | None, timeout: float, args: list[str]) -> list[str]:
    """``scontrol update ARGS``; what it complained about (nothing when it exited 0)."""
    code, out, err = run_scontrol(scontrol, ["update", *args], env, timeout)
    if code != 0:
        return [f"scontrol update {' '.join(args[:2])}: {(err or out).strip() or f'exit status {code}'}"]
    return []


def apply_plan(
    plan: HealthPlan, scontrol: Command = "scontrol", env: dict[str, str] | None = None, timeout: float = 30.0
) -> ApplyOutcome:
    """Drain and resume what ``plan`` says; what counts is what the controller reports afterwards."""
    outcome = ApplyOutcome()
    said: list[str] = []  # scontrol's complaints, quoted when a node did not end up as asked
    by_reason = sorted(plan.mark.items(), key=lambda kv: (kv[1], kv[0]))
    for reason, group in groupby(by_reason, key=lambda kv: kv[1]):
        names = [n for n, _ in group]
        said += _update(scontrol, env, timeout, [f"NodeName={compact_str(names)}", "State=DRAIN", f"Reason={reason}"])
    if plan.unmark:
        now = read_nodes(scontrol, env, timeout)
        still = [n for n in plan.unmark if n in now and is_ours(now[n].reason)]
        outcome.left = sorted(set(plan.unmark) - set(still))
        if still:
            # Slurm 22.05 answers "Invalid node state specified" for a node that never registered, yet
            # clears its drain: the state read back below decides
            said += _update(scontrol, env, timeout, [f"NodeName={compact_str(still)}", "State=RESUME"])
    after = read_nodes(scontrol, env, timeout)
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
