"""``topocast health show`` and ``topocast health apply``: fabric health on the map, and in the scheduler.

``show`` lists each object that is not ``ok`` (state, source, reason, since when) and the nodes that depend
on it. ``apply`` is one observation: it takes the graph's health records through the damper (kept in
``--state-file``), works out the blast radius and drains / resumes Slurm nodes to match it (see
:mod:`topocast.model.health_plan` and :mod:`topocast.slurm.drain`; docs/health.md).

Exit codes of ``apply``: 0 done (or nothing to do), 3 when the share guard held new drains or a node did
not end up as asked, 2 for bad input (one line).
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from topocast.errors import TopocastError
from topocast.model.graph import TopologyGraph
from topocast.model.health import SEVERITY, NodeHealth, ObjectRef, node_health, objects_of
from topocast.model.health_plan import DampingState, HealthPolicy, observe, plan, slurm_reason
from topocast.model.hostlist import compact_str, expand
from topocast.safeio.limits import read_capped
from topocast.safeio.validation import validate

__all__ = ["run_apply", "run_show"]

MAX_STATE_BYTES = 4 * 1024 * 1024
EXIT_HELD = 3


def _rows(graph: TopologyGraph) -> list[tuple[str, list[str], str | None, dict[str, str]]]:
    return [(n.name, n.fabric, n.accelerator, n.labels) for n in graph.nodes]


def affected(graph: TopologyGraph) -> dict[ObjectRef, list[str]]:
    """Each object with a health record -> the graph's nodes that depend on it (sorted)."""
    wanted = {r.ref for r in graph.health}
    out: dict[ObjectRef, list[str]] = {ref: [] for ref in sorted(wanted)}
    for name, fabric, accelerator, labels in _rows(graph):
        for ref in objects_of(name, fabric, accelerator, labels):
            if ref in wanted:
                out[ref].append(name)
    return {ref: sorted(names) for ref, names in out.items()}


def run_show(source: str, as_json: bool) -> int:
    from topocast.cli.diff import load_source

    graph = load_source(source)
    users = affected(graph)
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


def _load_state(path: Path) -> DampingState:
    try:
        with path.open("rb") as fh:
            text = read_capped(fh, MAX_STATE_BYTES, str(path), TopocastError)
    except FileNotFoundError:
        return DampingState()
    except OSError as exc:
        raise TopocastError(f"--state-file {path}: cannot read ({exc.strerror})") from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise TopocastError(f"--state-file {path}: not JSON ({exc}); remove it to start afresh") from None
    return validate(DampingState, data, f"--state-file {path}", TopocastError)


def run_apply(
    source: str,
    *,
    target: str,
    state_file: Path,
    policy: HealthPolicy,
    scontrol: str = "scontrol",
    slurm_conf: Path | None = None,
    exclude: Sequence[str] = (),
    pause_file: Path | None = None,
    dry_run: bool = False,
    as_json: bool = False,
) -> int:
    """One observation of ``source``'s health, acted on in the scheduler (module doc)."""
    from topocast.cli.diff import load_source
    from topocast.safeio.files import write_out
    from topocast.slurm.drain import apply_plan, holding, read_nodes

    if target != "slurm":
        raise TopocastError(f"--target {target}: only slurm is supported by `health apply`")
    graph = load_source(source)
    state = _load_state(state_file)
    damping = observe(state, graph.health, state.seq + 1, policy)
    command: list[str] = shlex.split(scontrol)
    env = {**os.environ, "SLURM_CONF": str(slurm_conf)} if slurm_conf else None
    slurm = read_nodes(command, env)
    skip = [n for expr in exclude for n in expand(expr)]
    radius = {n: h for n, h in node_health(_rows(graph), damping.confirmed()).items() if n in slurm}
    the_plan = plan(len(slurm), radius, holding(slurm, skip), policy, slurm_reason)
    paused = pause_file is not None and pause_file.exists()
    report: dict[str, Any] = {
        "cluster": graph.cluster,
        "observation": damping.seq,
        "dry_run": dry_run,
        "paused": paused,
        "confirmed": [str(r.ref) for r in damping.confirmed()],
        "pending": [str(t.record.ref) for t in damping.objects if not t.confirmed],
        "plan": the_plan.to_json(),
        "not_in_slurm": sorted(n for n in node_health(_rows(graph), damping.confirmed()) if n not in slurm),
    }
    code = EXIT_HELD if the_plan.held else 0
    if not dry_run and not paused:
        outcome = apply_plan(the_plan, command, env)
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
    for node, reason in p["mark"].items():
        print(f"drain {node}: {reason}")
    if p["unmark"]:
        print(f"resume {compact_str(p['unmark'])}")
    if p["foreign"]:
        print(f"left alone (drained by someone else or excluded): {compact_str(p['foreign'])}")
    if p["held"]:
        print(f"held: {p['held_reason']}: {compact_str(p['held'])}", file=sys.stderr)
    if r["not_in_slurm"]:
        print(f"not in Slurm: {compact_str(r['not_in_slurm'])}")
    for line in r.get("errors", []):
        print(f"topocast: warning: {line}", file=sys.stderr)
    if "drained" in r:
        print(f"summary: {len(r['drained'])} drained, {len(r['resumed'])} resumed")
