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
change) without writing; ``--server-dry-run`` also sends every write with
``dryRun=All`` so the API server validates it.

Exit codes: 0 the cluster matches the graph (or the plan was printed), 1 the
publish is incomplete (an outage or an error, printed: run it again), 2 bad input
or configuration, 3 done with refusals: every node the API server accepts is
labelled, the nodes it refused (admission policy, validation) are printed one
line per refusal class (running it again gets the same answer: fix the cause).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import urlparse

import yaml

from topocast.errors import TopocastError
from topocast.graph import TopologyGraph, load_graph
from topocast.renderers.base import RenderOptions
from topocast.validation import validate

K8S_FORMATS = ("k8s-labels", "kueue", "kai", "volcano", "slinky")


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


def _read_mapping(path: Path, what: str) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except OSError as exc:
        raise TopocastError(f"{what} {path}: cannot read ({exc.strerror})") from None
    except yaml.YAMLError as exc:
        raise TopocastError(f"{what} {path}: not JSON/YAML ({exc})") from None
    if not isinstance(data, dict):
        raise TopocastError(f"{what} {path}: expected a mapping")
    return data


def publisher_config(args: PublishArgs, render_options: RenderOptions) -> Any:
    """KubernetesPublisherConfig from ``--k8s-options`` plus the flags (flags win)."""
    from topocast.k8s.client import K8sConnection
    from topocast.publish.kubernetes import KubernetesPublisherConfig

    data = _read_mapping(args.k8s_options, "--k8s-options") if args.k8s_options else {}
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
    if args.formats:
        unknown = sorted(set(args.formats) - set(K8S_FORMATS))
        if unknown:
            raise TopocastError(f"--format {', '.join(unknown)}: publish writes only {', '.join(K8S_FORMATS)}")
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
    from topocast.k8s.publisher import sample_names

    for kind, nodes, message in report.refusals():
        line = f"topocast: refused: {kind}: {len(nodes)} node(s) {sample_names(nodes)}"
        print(line + (f"; {nodes[0]}: {message}" if message else ""), file=err)


def print_plan(report: Any, out: TextIO) -> None:
    """The dry run's plan: nodes and objects that a publish would change."""
    print(f"dry run ({report.dry_run}): nothing was written", file=out)
    print(
        f"nodes to patch: {len(report.nodes_patched)} ({report.nodes_unchanged} already current, "
        f"{len(report.nodes_drifted)} drifted)",
        file=out,
    )
    for node in sorted(report.node_changes):
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
        options = validate(RenderOptions, _read_mapping(args.options, "--options"), str(args.options), TopocastError)
    config = publisher_config(args, options)
    formats = [f for f in config.formats if f in K8S_FORMATS]
    manifest, artifacts, graph_source = _inputs(args, options, formats)
    publisher = _publisher(args, config, options, graph_source)
    try:
        result = publisher.publish(manifest, artifacts)
    except TopocastError:
        raise
    except Exception as exc:  # the command line shows one line, never a traceback
        raise TopocastError(f"publishing to Kubernetes failed: {type(exc).__name__}: {exc}") from None
    report = result.report
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


__all__ = ["EXIT_REFUSED", "PublishArgs", "print_plan", "print_refusals", "publisher_config", "run_publish"]
