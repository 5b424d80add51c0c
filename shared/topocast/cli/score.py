"""``topocast score``, ``topocast capacity`` and ``topocast metrics``: how jobs landed and what is free.

* ``score``: a job's nodes (a hostlist, ``scontrol show job -d`` text or slurmrestd job JSON, or a
  Kubernetes pod list / Kueue Workload) against the best placement on the graph
  (:mod:`topocast.model.placement_score`). With ``--store`` the graph is the generation that was live when
  the job started (its start time from Slurm or the pods; ``--at`` overrides it).
* ``capacity``: free / allocated / drained nodes per NVLink domain, leaf and block, the largest job that fits
  in one, and the fragmentation figures (:mod:`topocast.model.capacity`), from the node states Slurm
  (``scontrol show nodes``, slurmrestd ``/nodes``) or Kubernetes (``kubectl get nodes/pods -o json``) reports.
* ``metrics``: the same as a Prometheus text exposition (node-exporter textfile collector).
"""

from __future__ import annotations

import json
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

from topocast.errors import TopocastError
from topocast.model.graph import TopologyGraph

__all__ = ["GraphSource", "run_capacity", "run_score"]


def _read(path: str, what: str) -> str:
    if path == "-":
        return sys.stdin.read()
    from topocast.safeio.limits import MAX_GRAPH_BYTES, read_capped

    try:
        with open(path, "rb") as fh:
            return read_capped(fh, MAX_GRAPH_BYTES, path, TopocastError).decode("utf-8", errors="replace")
    except OSError as exc:
        raise TopocastError(f"{what} {path}: cannot read ({exc.strerror or exc})") from None


class GraphSource:
    """``--graph FILE|URI`` or ``--store URI --cluster C`` (the generation live at a time)."""

    def __init__(self, graph: str | None, store: str | None, cluster: str) -> None:
        if (graph is None) == (store is None):
            raise TopocastError("give the graph: --graph FILE (or s3://, gs://, file:// URI) or --store URI")
        self.graph, self.store, self.cluster = graph, store, cluster

    def load(self, at: datetime | None) -> tuple[TopologyGraph, str]:
        if self.graph is not None:
            from topocast.cli.diff import load_source

            return load_source(self.graph), self.graph
        from topocast.cli.history import graph_live_at

        assert self.store is not None
        return graph_live_at(self.store, self.cluster, at)


def _job(nodes: str | None, slurm_job: str | None, pods: str | None) -> Any:
    from topocast.model.placement_score import JobNodes

    given = [x for x in (nodes, slurm_job, pods) if x is not None]
    if len(given) != 1:
        raise TopocastError("give the job once: --nodes HOSTLIST, --slurm-job FILE or --pods FILE")
    if nodes is not None:
        from topocast.model.hostlist import expand

        return JobNodes("(hostlist)", tuple(expand(nodes)), None)
    if slurm_job is not None:
        from topocast.slurm.jobs import parse_job

        return parse_job(
            _read(slurm_job, "--slurm-job"), "--slurm-job " + ("<stdin>" if slurm_job == "-" else slurm_job)
        )
    assert pods is not None
    from topocast.k8s.workloads import parse_workload

    return parse_workload(_read(pods, "--pods"), "--pods " + ("<stdin>" if pods == "-" else pods))


def run_score(source: GraphSource, nodes: str | None, slurm_job: str | None, pods: str | None,
              at_text: str | None, as_json: bool, job_name: str | None = None) -> int:  # fmt: skip
    from dataclasses import replace

    from topocast.cli.history import parse_time
    from topocast.model.placement_score import format_text, score_placement

    job = _job(nodes, slurm_job, pods)
    if job_name:
        job = replace(job, job=job_name)
    at = parse_time(at_text) if at_text else job.start
    graph, label = source.load(at)
    result = score_placement(graph, job.nodes)
    if result.unknown:
        from topocast.model.hostlist import compact_str

        print(f"topocast: warning: {len(result.unknown)} of the job's nodes are not in {label}, not scored: "
              f"{compact_str(result.unknown)}", file=sys.stderr)  # fmt: skip
    if as_json:
        doc = {
            "job": job.job,
            "start": job.start.isoformat() if job.start else None,
            "graph": label,
            **result.to_json(),
        }
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    else:
        sys.stdout.write(f"job {job.job}" + (f", started {job.start.isoformat()}" if job.start else "") + "\n")
        sys.stdout.write(format_text(result, label))
    return 0


def _states(slurm_nodes: str | None, k8s_nodes: str | None, k8s_pods: str | None) -> dict[str, Any]:
    if (slurm_nodes is None) == (k8s_nodes is None):
        raise TopocastError("give the node states once: --slurm-nodes FILE or --k8s-nodes FILE (with --k8s-pods)")
    if slurm_nodes is not None:
        if k8s_pods is not None:
            raise TopocastError("--k8s-pods goes with --k8s-nodes, not --slurm-nodes")
        from topocast.slurm.jobs import parse_node_states

        return dict(parse_node_states(_read(slurm_nodes, "--slurm-nodes"), f"--slurm-nodes {slurm_nodes}"))
    assert k8s_nodes is not None
    from topocast.k8s.workloads import node_states

    pods_text = _read(k8s_pods, "--k8s-pods") if k8s_pods is not None else None
    return dict(node_states(_read(k8s_nodes, "--k8s-nodes"), f"--k8s-nodes {k8s_nodes}", pods_text,
                            f"--k8s-pods {k8s_pods}"))  # fmt: skip


def capacity_of(graph: TopologyGraph, states: dict[str, Any], block_sizes: list[int] | None) -> Any:
    from topocast.model.capacity import cluster_capacity

    blocks: list[tuple[str, tuple[str, ...]]] = []
    sizes: list[int] = []
    if any(n.accelerator is not None for n in graph.nodes):
        from topocast.renderers.base import RenderOptions
        from topocast.renderers.slurm_block import cluster_layout

        layout = cluster_layout(graph, RenderOptions(block_sizes=block_sizes))
        blocks = [(name, b.nodes) for name, b in zip(layout.names, layout.blocks, strict=True)]
        sizes = layout.sizes
    return cluster_capacity(graph, states, blocks, sizes)


def run_capacity(source: GraphSource, slurm_nodes: str | None, k8s_nodes: str | None, k8s_pods: str | None,
                 block_sizes: list[int] | None, as_json: bool, prometheus: bool, out: Path | None,
                 html: Path | None = None) -> int:  # fmt: skip
    states = _states(slurm_nodes, k8s_nodes, k8s_pods)
    graph, _ = source.load(None)
    cap = capacity_of(graph, states, block_sizes)
    if cap.not_in_graph:
        from topocast.model.hostlist import compact_str

        print(f"topocast: warning: {len(cap.not_in_graph)} node(s) the scheduler reports are not in the graph: "
              f"{compact_str(cap.not_in_graph)}", file=sys.stderr)  # fmt: skip
    if html is not None:  # the fabric view with an occupancy panel and each node marked by its state
        from topocast.renderers.base import RenderOptions
        from topocast.renderers.html import render_page, with_occupancy
        from topocast.safeio.files import write_out

        page = render_page(graph, None, RenderOptions(block_sizes=block_sizes))
        write_out(html, with_occupancy(page, states), "--html")
    if prometheus:
        from topocast.model.prometheus import capacity_families, exposition

        text = exposition(capacity_families(cap))
    elif as_json:
        text = json.dumps(cap.to_json(), indent=2) + "\n"
    else:
        text = _capacity_text(cap)
    if out is None:
        sys.stdout.write(text)
    else:  # the textfile collector reads whole files: written to a temporary file and renamed
        from topocast.safeio.files import write_out

        write_out(out, text)
    return 0


def _capacity_text(cap: Any) -> str:
    t = cap.totals
    lines = [
        f"cluster {cap.cluster}: {sum(t.values())} nodes: {t['free']} free, {t['allocated']} allocated, "
        f"{t['drained']} drained, {t['unknown']} not reported",
        "largest job that fits in one: "
        + (", ".join(f"{level} {n}" for level, n in cap.largest_free.items()) or "(no groups)"),
        "fragmentation: block "
        + ("n/a (no NVLink domains)" if cap.block_fragmentation is None else str(cap.block_fragmentation))
        + f", tree {cap.tree_fragmentation} (nodes)",
        f"{'level':<14} {'group':<24} {'free':>5} {'alloc':>5} {'drain':>5} {'unkn':>5}",
    ]
    for d in cap.domains:
        c = d.counts
        lines.append(
            f"{d.level:<14} {d.name:<24} {c['free']:>5} {c['allocated']:>5} {c['drained']:>5} {c['unknown']:>5}"
        )
    return "\n".join(lines) + "\n"
