"""``topocast health show`` and ``topocast health apply``: fabric health on the map, and in the scheduler.

``show`` lists each object that is not ``ok`` (state, source, reason, since when) and the nodes that depend
on it. ``apply`` is one observation: it takes the graph's health records through the damper (kept in
``--state-file``), works out the blast radius and drains / resumes Slurm nodes, or taints / untaints
Kubernetes nodes, to match it (see :mod:`topocast.model.health_plan`, :mod:`topocast.slurm.drain`,
:mod:`topocast.k8s.taints`; docs/health.md).

Exit codes of ``apply``: 0 done (or nothing to do), 3 when the share guard held new marks or a node did
not end up as asked, 2 for bad input (one line).
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar

from pydantic import BaseModel

from topocast.errors import TopocastError
from topocast.model.graph import TopologyGraph
from topocast.model.health import SEVERITY, NodeHealth, dependents, node_health
from topocast.model.health_plan import (
    ApplyOutcome,
    DampingState,
    HealthPlan,
    HealthPolicy,
    Holding,
    observe,
    plan,
    slurm_reason,
)
from topocast.model.hostlist import compact_str, expand
from topocast.safeio.limits import read_capped
from topocast.safeio.validation import validate

__all__ = ["run_apply", "run_report_faulty", "run_show"]

MAX_STATE_BYTES = 4 * 1024 * 1024
StateModel = TypeVar("StateModel", bound=BaseModel)
EXIT_HELD = 3


def _rows(graph: TopologyGraph) -> list[tuple[str, list[str], str | None, dict[str, str]]]:
    return [(n.name, n.fabric, n.accelerator, n.labels) for n in graph.nodes]


def run_show(source: str, as_json: bool) -> int:
    from topocast.cli.diff import load_source

    graph = load_source(source)
    users = dependents(_rows(graph), (r.ref for r in graph.health))
    records = sorted(graph.health, key=lambda r: (-SEVERITY[r.state], r.ref))
    nodes = node_health(_rows(graph), graph.health)
    if as_json:
        data = {
            "objects": [{**r.model_dump(mode="json"), "object": str(r.ref), "nodes": users[r.ref]} for r in records],
            "nodes": {n: _node_json(h) for n, h in sorted(nodes.items())},
        }
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
        return 0
    if not records:
        print(f"{graph.cluster}: every fabric object ok ({len(graph.nodes)} nodes)")
        return 0
    for r in records:
        since = r.observed_at.isoformat().replace("+00:00", "Z")
        names = users[r.ref]
        who = f"{len(names)} node(s): {compact_str(names)}" if names else "no node"
        reason = f" ({r.reason})" if r.reason else ""
        print(f"{r.state:9} {r.ref}{reason}, {r.source} since {since}; {who}")
    counts = {s: sum(1 for h in nodes.values() if h.state == s) for s in ("impaired", "degraded", "unknown")}
    print(f"summary: {len(graph.nodes)} nodes, " + ", ".join(f"{v} {k}" for k, v in counts.items()))
    return 0


def _node_json(h: NodeHealth) -> dict[str, Any]:
    return {"state": h.state, "object": str(h.blame), "reason": h.reason}


def _load_json_state(path: Path, model: type[StateModel]) -> StateModel:
    """A state file as ``model``; a missing file is a fresh state, a bad one a one-line error naming it."""
    try:
        with path.open("rb") as fh:
            text = read_capped(fh, MAX_STATE_BYTES, str(path), TopocastError)
    except FileNotFoundError:
        return model()
    except OSError as exc:
        raise TopocastError(f"--state-file {path}: cannot read ({exc.strerror})") from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise TopocastError(f"--state-file {path}: not JSON ({exc}); remove it to start afresh") from None
    return validate(model, data, f"--state-file {path}", TopocastError)


class Scheduler(Protocol):
    """One scheduler as ``health apply`` sees it: its nodes and marks, and how to change them."""

    def read(self, exclude: Sequence[str]) -> tuple[set[str], Holding]: ...

    def mark_text(self, health: NodeHealth) -> str: ...

    def apply(self, plan: HealthPlan) -> ApplyOutcome: ...

    def close(self) -> None: ...


class SlurmScheduler:
    """Slurm through ``scontrol`` (``scontrol``, ``slurm_conf``) or slurmrestd (``via``: a connected client)."""

    def __init__(self, scontrol: str = "scontrol", slurm_conf: Path | None = None, via: Any = None) -> None:
        from topocast.slurm.drain import NodeControl, ScontrolControl

        self.control: NodeControl
        if via is not None:
            from topocast.slurm.drain_rest import RestControl

            self.control = RestControl(via)
        else:
            env = {**os.environ, "SLURM_CONF": str(slurm_conf)} if slurm_conf else None
            self.control = ScontrolControl(shlex.split(scontrol), env)

    def read(self, exclude: Sequence[str]) -> tuple[set[str], Holding]:
        from topocast.slurm.drain import holding

        nodes = self.control.read()
        return set(nodes), holding(nodes, exclude)

    def mark_text(self, health: NodeHealth) -> str:
        return slurm_reason(health)

    def apply(self, plan: HealthPlan) -> ApplyOutcome:
        from topocast.slurm.drain import apply_plan

        return apply_plan(plan, self.control)

    def close(self) -> None:
        pass


class KubernetesScheduler:
    def __init__(self, kubeconfig: Path | None) -> None:
        from topocast.k8s.client import K8sConnection, build_client

        conn = K8sConnection(auth="kubeconfig", kubeconfig=str(kubeconfig)) if kubeconfig else K8sConnection.from_env()
        self.kc = build_client(conn)
        self.nodes: dict[str, Any] = {}

    def read(self, exclude: Sequence[str]) -> tuple[set[str], Holding]:
        from topocast.k8s.taints import holding, read_nodes

        self.nodes = read_nodes(self.kc)
        return set(self.nodes), holding(self.nodes, exclude)

    def mark_text(self, health: NodeHealth) -> str:
        from topocast.k8s.taints import taint_value

        return taint_value(health)

    def apply(self, plan: HealthPlan) -> ApplyOutcome:
        from topocast.k8s.taints import apply_plan

        return apply_plan(self.kc, plan, self.nodes)

    def close(self) -> None:
        self.kc.close()


def run_apply(
    source: str,
    scheduler: Scheduler,
    *,
    state_file: Path,
    policy: HealthPolicy,
    exclude: Sequence[str] = (),
    pause_file: Path | None = None,
    dry_run: bool = False,
    as_json: bool = False,
) -> int:
    """One observation of ``source``'s health, acted on in ``scheduler`` (module doc)."""
    from topocast.cli.diff import load_source

    try:
        graph = load_source(source)
        state = _load_json_state(state_file, DampingState)
        damping = observe(state, graph.health, state.seq + 1, policy)
        return _apply(graph, damping, scheduler, state_file, policy, exclude, pause_file, dry_run, as_json)
    finally:
        scheduler.close()


def _apply(
    graph: TopologyGraph,
    damping: DampingState,
    scheduler: Scheduler,
    state_file: Path,
    policy: HealthPolicy,
    exclude: Sequence[str],
    pause_file: Path | None,
    dry_run: bool,
    as_json: bool,
) -> int:
    from topocast.safeio.files import write_out

    known, held_now = scheduler.read([n for expr in exclude for n in expand(expr)])
    every = node_health(_rows(graph), damping.confirmed())
    radius = {n: h for n, h in every.items() if n in known}
    the_plan = plan(len(known), radius, held_now, policy, scheduler.mark_text)
    paused = pause_file is not None and pause_file.exists()
    report: dict[str, Any] = {
        "cluster": graph.cluster,
        "observation": damping.seq,
        "dry_run": dry_run,
        "paused": paused,
        "confirmed": [str(r.ref) for r in damping.confirmed()],
        "pending": [str(t.record.ref) for t in damping.objects if not t.confirmed],
        "plan": the_plan.to_json(),
        "not_in_scheduler": sorted(every.keys() - known),
    }
    code = EXIT_HELD if the_plan.held else 0
    if not dry_run and not paused:
        outcome = scheduler.apply(the_plan)
        report |= {"drained": outcome.drained, "resumed": outcome.resumed, "left": outcome.left,
                   "errors": outcome.errors}  # fmt: skip
        write_out(state_file, damping.model_dump_json(indent=2) + "\n", "--state-file")
        if outcome.errors:
            code = EXIT_HELD
    if as_json:
        sys.stdout.write(json.dumps(report, indent=2) + "\n")
    else:
        _print_report(report)
    return code


def _print_report(r: dict[str, Any]) -> None:
    p = r["plan"]
    mode = " (paused: nothing done)" if r["paused"] else " (dry run: nothing done)" if r["dry_run"] else ""
    print(f"{r['cluster']}: observation {r['observation']}{mode}")
    if r["confirmed"]:
        print(f"bad: {', '.join(r['confirmed'])}")
    if r["pending"]:
        print(f"bad, not acted on yet (damped): {', '.join(r['pending'])}")
    print(f"blast radius: {len(p['radius'])} node(s){': ' + compact_str(p['radius']) if p['radius'] else ''}")
    by_text: dict[str, list[str]] = {}
    for node, text in p["mark"].items():
        by_text.setdefault(text, []).append(node)
    for text, nodes in sorted(by_text.items()):
        print(f"mark {compact_str(nodes)}: {text}")
    if p["unmark"]:
        print(f"unmark {compact_str(p['unmark'])}")
    if p["foreign"]:
        print(f"left alone (held by someone else or excluded): {compact_str(p['foreign'])}")
    if p["held"]:
        print(f"topocast: warning: held: {p['held_reason']}: {compact_str(p['held'])}", file=sys.stderr)
    if r["not_in_scheduler"]:
        print(f"not in the scheduler: {compact_str(r['not_in_scheduler'])}")
    for line in r.get("errors", []):
        print(f"topocast: warning: {line}", file=sys.stderr)
    if "drained" in r:
        print(f"summary: {len(r['drained'])} marked, {len(r['resumed'])} unmarked")


def run_report_faulty(
    source: str,
    *,
    project: str,
    state_file: Path,
    send: bool = False,
    max_per_hour: int = 2,
    cooldown_hours: float = 24.0,
    audit_log: Path | None = None,
    compute_endpoint: str | None = None,
) -> int:
    """GCP repair reporting for the graph's unhealthy sub-blocks (:mod:`topocast.gcp.repair`); dry run unless
    ``send``. Exit 0, or 3 when the rate limit held a report back or a call failed."""
    from datetime import UTC, datetime, timedelta

    from topocast.cli.diff import load_source
    from topocast.gcp.repair import RepairLimits, RepairState, plan_reports, send_reports
    from topocast.safeio.files import write_out

    if max_per_hour < 1 or cooldown_hours < 0:
        raise TopocastError("--max-per-hour is at least 1 and --cooldown-hours not negative")
    graph = load_source(source)
    state = _load_json_state(state_file, RepairState)
    now = datetime.now(UTC)
    reports = plan_reports(graph, state, RepairLimits(max_per_hour, timedelta(hours=cooldown_hours)), now)
    lines: list[str] = []

    def audit(line: str) -> None:
        print(line)
        lines.append(line)

    client = None
    if send and any(r.held is None for r in reports):
        from topocast.providers.gcp.sdk import sub_blocks_client

        client = sub_blocks_client(compute_endpoint)
    new = send_reports(client, project, reports, state, now, send=send, audit=audit)
    if audit_log is not None and lines:
        try:
            with audit_log.open("a") as fh:
                fh.write("".join(line + "\n" for line in lines))
        except OSError as exc:
            raise TopocastError(f"--audit-log {audit_log}: cannot append ({exc.strerror})") from None
    if send:
        write_out(state_file, new.model_dump_json(indent=2) + "\n", "--state-file")
    if not reports:
        print(f"{graph.cluster}: no unhealthy sub-block to report", file=sys.stderr)
    failed = any('"error"' in line or '"held"' in line for line in lines)
    return EXIT_HELD if failed else 0
