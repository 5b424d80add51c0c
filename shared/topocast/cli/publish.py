"""``topocast publish``: a graph, or a deployment's latest generation, to a Kubernetes cluster.

The same code path as the publish function: the publisher is built by the
publisher registry's factory (``build_publishers(["kubernetes"], PublisherInputs(...))``,
the call the composition roots make for ``TOPOCAST_PUBLISHERS``) and is given either

* the rendered files and manifest of a generation in a deployment's store
  (``--store s3://bucket/prefix`` or ``gs://bucket/prefix``, ``--cluster``,
  ``--generation`` or the latest), exactly what the publish stage hands it, with
  the stored graph for instance-ID matching; the graph is rendered here only if
  the manifest lists no Kubernetes format; or
* a graph file (``--graph``), rendered here with ``--options`` (RenderOptions).

The connection is a kubeconfig (``--kubeconfig``/``--context``, default
``$KUBECONFIG`` then ``~/.kube/config``), the in-cluster service account
(``--in-cluster``, for a CronJob), or ``TOPOCAST_K8S_*`` variables.
``--dry-run`` reads the cluster and prints the plan (nodes and objects to
change) without writing; with no cluster configured (no kubeconfig, no
``TOPOCAST_K8S_*``) or one that cannot be reached, it prints the plan from the
graph alone: the labels of every node and the objects as YAML, summarised past
50 lines with counts (``--json``: all of it). ``--server-dry-run`` also sends
every write with ``dryRun=All`` so the API server validates it. A server that
cannot be reached is one line (exit 1), and a long publish reports its progress
on stderr (a bar on a terminal, else a line every 5 s or 10 %).

Exit codes: 0 the cluster matches the graph (or the plan was printed), 1 the
publish is incomplete (an outage or an error, printed: run it again), 2 bad input
or configuration (also a cluster holding fewer than ``--min-node-share``, default 90 %, of
the graph's nodes: one line with the counts, nothing applied), 3 done with refusals:
every node the API server accepts is labelled, the nodes it refused (admission policy, validation) are printed one
line per refusal class (running it again gets the same answer: fix the cause).
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import urlparse

import yaml

from topocast.errors import TopocastError
from topocast.model.graph import TopologyGraph, load_graph
from topocast.renderers import kubernetes_formats
from topocast.renderers.base import RenderOptions
from topocast.safeio.validation import validate


@dataclass
class PublishArgs:
    graph: Path | None = None
    store: str | None = None
    cluster: str = "default"
    generation: int | None = None
    kubeconfig: str | None = None
    context: str | None = None
    in_cluster: bool = False
    formats: list[str] = field(default_factory=list)
    options: Path | None = None
    k8s_options: Path | None = None
    dry_run: bool = False
    server_dry_run: bool = False
    qps: float | None = None
    burst: int | None = None
    concurrency: int | None = None
    as_json: bool = False
    min_node_share: float | None = None


def read_mapping(path: Path, what: str) -> dict[str, Any]:
    """A JSON/YAML mapping from ``path``: capped before it is held, any byte sequence one line (never a traceback)."""
    from topocast.safeio.limits import MAX_YAML_BYTES, read_capped
    from topocast.safeio.yaml_input import load_yaml

    try:
        with path.open("rb") as fh:
            raw = read_capped(fh, MAX_YAML_BYTES, f"{what} {path}", TopocastError)
    except OSError as exc:
        raise TopocastError(f"{what} {path}: cannot read ({exc.strerror})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TopocastError(f"{what} {path}: not UTF-8 text (byte {exc.start})") from None
    data = load_yaml(text, f"{what} {path}: not JSON/YAML", TopocastError) or {}
    if not isinstance(data, dict):
        raise TopocastError(f"{what} {path}: expected a mapping")
    return data


def publisher_config(args: PublishArgs, render_options: RenderOptions) -> Any:
    """KubernetesPublisherConfig from ``--k8s-options`` plus the flags (flags win)."""
    from topocast.k8s.client import K8sConnection
    from topocast.publish.kubernetes import KubernetesPublisherConfig

    data = read_mapping(args.k8s_options, "--k8s-options") if args.k8s_options else {}
    data.setdefault("labels", render_options.labels.model_dump())
    if "connection" not in data:
        if args.in_cluster:
            data["connection"] = {"auth": "in-cluster"}
        elif args.kubeconfig or args.context:
            data["connection"] = {"auth": "kubeconfig", "kubeconfig": args.kubeconfig, "context": args.context}
        else:
            data["connection"] = K8sConnection.from_env().model_dump()
    client = dict(data.get("client") or {})
    for key in ("qps", "burst"):
        if getattr(args, key) is not None:
            client[key] = getattr(args, key)
    data["client"] = client
    if args.concurrency is not None:
        data["concurrency"] = args.concurrency
    if args.min_node_share is not None:
        data["min_node_share"] = args.min_node_share
    if args.formats:
        known = kubernetes_formats()
        unknown = sorted(set(args.formats) - set(known))
        if unknown:
            raise TopocastError(f"--format {', '.join(unknown)}: publish writes only {', '.join(known)}")
        data["formats"] = args.formats
    if args.dry_run or args.server_dry_run:
        data["dry_run"] = "server" if args.server_dry_run else "client"
    return validate(KubernetesPublisherConfig, data, "--k8s-options", TopocastError)


def _stores(uri: str, cluster: str) -> tuple[Any, Any]:
    """(graph store, artifact store) of a deployment's bucket."""
    parsed = urlparse(uri)
    bucket, prefix = parsed.netloc, parsed.path.strip("/")
    if not bucket:
        raise TopocastError(f"--store {uri!r}: expected s3://bucket/prefix or gs://bucket/prefix")
    if parsed.scheme == "s3":
        from topocast.aws.clients import s3_client
        from topocast.aws.s3_artifacts import S3ArtifactStore
        from topocast.aws.s3_store import S3GraphStore

        s3 = s3_client()
        return S3GraphStore(bucket, prefix, cluster, s3), S3ArtifactStore(bucket, prefix, cluster, s3)
    if parsed.scheme in ("gs", "gcs"):
        from topocast.gcp.clients import storage_client
        from topocast.gcp.gcs import GcsObjects
        from topocast.gcp.gcs_artifacts import GcsArtifactStore
        from topocast.gcp.gcs_store import GcsGraphStore

        objects = GcsObjects(bucket, storage_client())
        return GcsGraphStore(objects, prefix, cluster), GcsArtifactStore(objects, prefix, cluster)
    raise TopocastError(f"--store {uri!r}: the scheme must be s3:// or gs://")


def _render(graph: TopologyGraph, formats: list[str], options: RenderOptions) -> list[Any]:
    from topocast.renderers import render

    return [render(graph, fmt, options) for fmt in formats]


def _inputs(
    args: PublishArgs, options: RenderOptions, formats: list[str]
) -> tuple[Any, Any, Callable[[int], TopologyGraph]]:
    """(manifest, artifacts, graph_source) as the publisher takes them."""
    if (args.graph is None) == (args.store is None):
        raise TopocastError("give exactly one of --graph FILE and --store s3://bucket/prefix | gs://bucket/prefix")
    if args.graph is not None:
        graph = load_graph(args.graph)
        return {"generation": args.generation, "graph": graph}, _render(graph, formats, options), lambda _: graph
    graphs, rendered = _stores(args.store or "", args.cluster)
    manifest = rendered.latest_manifest() if args.generation is None else rendered.get_manifest(args.generation)
    if manifest is None:
        raise TopocastError(f"{args.store}: no rendered generation of cluster {args.cluster!r} yet")

    def graph_source(generation: int) -> TopologyGraph:
        return graphs.get(generation).graph

    wanted = [e for e in manifest.artifacts if e.format in formats]
    if not wanted:  # a deployment that renders only Slurm files: render the Kubernetes side here
        graph = graph_source(manifest.generation)
        return {"generation": manifest.generation, "graph": graph}, _render(graph, formats, options), graph_source
    files = {e.file: rendered.get_artifact(manifest.generation, e.file) for e in wanted}
    return manifest, files, graph_source


#: exit code of a publish that is done except for the nodes the API server refused
EXIT_REFUSED = 3


def print_refusals(report: Any, err: TextIO) -> None:
    """One line per refusal class: ``topocast: refused: 403 Forbidden: 16 node(s) gpu-[0000-0015]; gpu-0000: <its
    message>`` (the names compacted and cut at 120 characters, the message of the first node)."""
    from topocast.publish.kubernetes import sample_names

    for kind, nodes, message in report.refusals():
        line = f"topocast: refused: {kind}: {len(nodes)} node(s) {sample_names(nodes)}"
        print(line + (f"; {nodes[0]}: {message}" if message else ""), file=err)


#: lines of node changes a plan prints before it summarises (``--json`` has them all)
PLAN_NODE_LINES = 40
#: lines a plan from the graph alone prints in all before it summarises
PLAN_LINES = 50


def _more(shown: int, total: int, what: str) -> str:
    return f"  ... and {total - shown} more {what} (--json for all)"


def print_plan(report: Any, out: TextIO) -> None:
    """The dry run's plan: nodes and objects that a publish would change (node lines cut at
    :data:`PLAN_NODE_LINES`, with the count of the rest)."""
    print(f"dry run ({report.dry_run}): nothing was written", file=out)
    print(
        f"nodes to patch: {len(report.nodes_patched)} ({report.nodes_unchanged} already current, "
        f"{len(report.nodes_drifted)} drifted)",
        file=out,
    )
    changed = sorted(report.node_changes)
    for shown, node in enumerate(changed):
        if shown == PLAN_NODE_LINES:
            print(_more(shown, len(changed), "node(s)"), file=out)
            break
        change = report.node_changes[node]
        parts = [f"{k}={v}" for k, v in sorted(change["set"].items())]
        parts += [f"-{k}" for k in change["remove"]]
        parts += [f"@{k}={v}" for k, v in sorted(change["annotate"].items()) if not k.startswith("topocast.dev/")]
        print(f"  node/{node}: {' '.join(parts)}", file=out)
    for title, names in (
        ("objects to apply", report.objects_applied),
        ("objects to delete", report.objects_deleted),
        ("objects already current", report.objects_unchanged),
    ):
        print(f"{title}: {len(names)}", file=out)
        for name in names if title != "objects already current" else []:
            drift = report.objects_drifted.get(name)
            note = "  (drifted: " + ", ".join(drift) + ")" if drift else ""
            print(f"  {name}{note}", file=out)


def _label_words(labels: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in sorted(labels.items()))


def offline_plan(artifacts: list[Any], why: str) -> dict[str, Any]:
    """The plan from the graph alone (no cluster to compare with): every node's labels, every object."""
    nodes: dict[str, dict[str, Any]] = {}
    objects: list[dict[str, Any]] = []
    for art in artifacts:
        if art.format == "k8s-labels":
            nodes = {str(o["node"]): {"set": dict(o["labels"]), "keep": list(o.get("keep") or [])} for o in art.objects}
        else:
            objects += [{"format": art.format, "object": obj} for obj in art.objects]
    return {"dry_run": "graph", "cluster": None, "why": why, "nodes": nodes, "objects": objects}


def _object_name(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    where = f"{meta['namespace']}/" if meta.get("namespace") else ""
    return f"{obj.get('apiVersion', '?')} {obj.get('kind', '?')} {where}{meta.get('name', '?')}"


def print_offline_plan(plan: dict[str, Any], out: TextIO) -> None:
    """At most :data:`PLAN_LINES` lines: node label lines, then the objects as YAML while they fit (else
    one line per object), then the counts of what was left out."""
    nodes, objects = plan["nodes"], plan["objects"]
    lines = [f"dry run (no cluster: {plan['why']}): the plan from the graph alone; nothing was written"]
    keys = {k for change in nodes.values() for k in change["set"]}
    lines.append(
        f"nodes to label: {len(nodes)} ({len(keys)} label key(s); a cluster's nodes already current are not known)"
    )
    names = sorted(nodes)
    room = min(len(names), PLAN_NODE_LINES // 2 if objects else PLAN_LINES - 4)
    lines += [f"  node/{n}: {_label_words(nodes[n]['set'])}" for n in names[:room]]
    if room < len(names):
        lines.append(_more(room, len(names), "node(s)"))
    lines.append(f"objects to apply: {len(objects)}")
    texts = [yaml.safe_dump(o["object"], sort_keys=False, default_flow_style=None, width=120) for o in objects]
    total = sum(t.count("\n") + 1 for t in texts)
    budget = PLAN_LINES - len(lines) - 1
    if total <= budget:
        for text in texts:
            lines += ["---", *text.rstrip("\n").splitlines()]
    else:  # one line per kind, with its count and a sample of names
        groups: dict[str, list[str]] = {}
        for o in objects:
            obj = o["object"]
            key = f"{o['format']}: {obj.get('apiVersion', '?')} {obj.get('kind', '?')}"
            groups.setdefault(key, []).append(str((obj.get("metadata") or {}).get("name", "?")))
        for key, members in groups.items():
            from topocast.publish.kubernetes import sample_names

            lines.append(f"  {key}: {len(members)} ({sample_names(members)})")
    full = 2 + len(names) + 1 + total
    note = f"; {len(lines) + 1} of {full} lines shown, --json for the whole plan" if full > len(lines) + 1 else ""
    lines.append(f"plan: {len(nodes)} node(s) to label, {len(objects)} object(s) to apply{note}")
    out.write("\n".join(lines) + "\n")


def _explicit_connection(args: PublishArgs) -> bool:
    """A cluster the operator named (flags, --k8s-options' connection, TOPOCAST_K8S_*), not only the
    kubeconfig a fresh machine does not have."""
    named = args.kubeconfig or args.context or args.in_cluster
    return bool(named or any(k.startswith("TOPOCAST_K8S_") for k in os.environ) or _options_connection(args))


def _options_connection(args: PublishArgs) -> bool:
    return bool(args.k8s_options and "connection" in read_mapping(args.k8s_options, "--k8s-options"))


def cluster_problem(config: Any, timeout: float = 3.0) -> tuple[str | None, str | None]:
    """(why no cluster can be used, its server): the configuration cannot be loaded, or a TCP connect to
    the server fails within ``timeout`` (one line now, instead of every request's retries later)."""
    from topocast.k8s.client import build_client

    try:
        kc = build_client(config.connection, config.client)
    except TopocastError as exc:
        return str(exc), None
    server = kc.server
    kc.close()
    parsed = urlparse(server)
    if not parsed.hostname:
        return None, server
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    try:
        socket.create_connection((parsed.hostname, port), timeout=timeout).close()
    except OSError as exc:
        return f"cannot reach the API server {server} ({exc.strerror or type(exc).__name__})", server
    return None, server


class Progress:
    """``progress(done, total)`` of the node PATCHes on ``err``: a bar on a terminal, else (after the first
    ``every`` seconds) a line every ``every`` seconds or 10 % (what a journal or a CI log can hold)."""

    def __init__(self, err: TextIO, every: float = 5.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.err, self.every, self.clock = err, every, clock
        self.tty = bool(getattr(err, "isatty", lambda: False)())
        self.started = self.last = clock()
        self.step = 0

    def __call__(self, done: int, total: int) -> None:
        now = self.clock()
        if self.tty:
            filled = 30 * done // max(total, 1)
            end = "\n" if done == total else ""
            self.err.write(f"\r  node labels [{'#' * filled}{'.' * (30 - filled)}] {done}/{total}{end}")
            self.err.flush()
            return
        step = 10 * done // max(total, 1)
        if now - self.started < self.every:  # a short publish says nothing more than its result
            self.step = step
            return
        stepped = step > self.step and now - self.last >= 1.0  # not a step line right after a time line
        if done == total or now - self.last >= self.every or stepped:
            self.last, self.step = now, step
            print(f"topocast: progress: {done}/{total} node(s) labelled, {now - self.started:.0f} s", file=self.err)


def _publisher(
    args: PublishArgs, config: Any, options: RenderOptions, graph_source: Callable[[int], TopologyGraph]
) -> Any:
    """The Kubernetes publisher exactly as the publish function builds it: the publisher registry's
    factory (``build_publishers(["kubernetes"], PublisherInputs(...))``) over settings that carry the
    flags' configuration as ``TOPOCAST_K8S_OPTIONS`` would, and the graph source."""
    from topocast.config import Settings
    from topocast.publish import PublisherInputs, build_publishers

    settings = Settings(
        cluster=args.cluster,
        publishers=["kubernetes"],
        render_options=options,
        k8s_options=config.model_dump(),
    )
    (publisher,) = build_publishers(settings.publishers, PublisherInputs(settings, graph_source))
    return publisher


def run_publish(args: PublishArgs, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Publish and print; returns the exit code (TopocastError propagates for the CLI's exit 2)."""
    out = out or sys.stdout
    err = err or sys.stderr
    options = RenderOptions()
    if args.options is not None:
        options = validate(RenderOptions, read_mapping(args.options, "--options"), str(args.options), TopocastError)
    config = publisher_config(args, options)
    formats = list(config.formats)  # Kubernetes formats only (KubernetesPublisherConfig refuses any other)
    manifest, artifacts, graph_source = _inputs(args, options, formats)
    problem, server = cluster_problem(config)
    if problem is not None:
        needs_cluster = not args.dry_run or args.server_dry_run
        if server is not None and needs_cluster:  # an outage: exit 1, run it again
            print(f"topocast: error: {problem}; nothing was published (run it again when it answers)", file=err)
            return 1
        if server is None and (needs_cluster or _explicit_connection(args)):  # a configuration to fix: exit 2
            raise TopocastError(problem)
        if server is not None:
            print(f"topocast: warning: {problem}: the plan below is from the graph alone", file=err)
        if isinstance(artifacts, dict):  # a stored generation: its files, decoded as the publisher would
            from topocast.k8s.inputs import decode_files

            artifacts = list(decode_files(manifest, artifacts, formats).values())
        for art in artifacts:
            for warning in art.warnings:
                print(f"topocast: warning: {art.format}: {warning}", file=err)
        plan = offline_plan(artifacts, problem)
        if args.as_json:
            json.dump(plan, out, indent=2, sort_keys=True, default=str)
            out.write("\n")
        else:
            print_offline_plan(plan, out)
        return 0
    publisher = _publisher(args, config, options, graph_source)
    publisher.progress = Progress(err)
    try:
        result = publisher.publish(manifest, artifacts)
    except TopocastError:
        raise
    except Exception as exc:  # the command line shows one line, never a traceback
        raise TopocastError(f"publishing to Kubernetes failed: {type(exc).__name__}: {exc}") from None
    report = result.report
    if report.refused_cluster:  # another cluster than the graph's: a configuration to fix, nothing was applied
        raise TopocastError(report.refused_cluster)
    for warning in report.warnings:
        print(f"topocast: warning: {warning}", file=err)
    if args.as_json:
        json.dump(report.as_dict(), out, indent=2, sort_keys=True, default=str)
        out.write("\n")
    elif report.dry_run != "off":
        print_plan(report, out)
    print_refusals(report, err)
    for problem in report.errors:
        print(f"topocast: error: {problem}", file=err)
    print(f"topocast: {result.detail}", file=err)
    if not result.published:
        return 1
    return EXIT_REFUSED if report.nodes_refused else 0


__all__ = [
    "EXIT_REFUSED",
    "PublishArgs",
    "print_plan",
    "print_refusals",
    "publisher_config",
    "read_mapping",
    "run_publish",
]
