"""The ``topocast`` command line.

Every command is a thin shell over the library: parse flags, call the core,
print. Errors from bad input exit non-zero with one line on stderr.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from topocast.errors import TopocastError

app = typer.Typer(
    name="topocast",
    help="Tell GPU schedulers where the wires are: discover, render and publish cluster topology.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _fail(message: str, code: int = 2) -> typer.Exit:
    typer.echo(f"topocast: error: {message}", err=True)
    return typer.Exit(code)


def _parse_sizes(text: str | None) -> list[int] | None:
    if not text:
        return None
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise _fail(f"--block-sizes must be comma-separated integers, got {text!r}") from None


@app.command()
def render(
    graph: Annotated[Path | None, typer.Option("--graph", help="Normalized graph JSON ('-' = stdin).")] = None,
    model: Annotated[Path | None, typer.Option("--model", help="Topograph simulation model YAML.")] = None,
    fmt: Annotated[
        list[str] | None,
        typer.Option("--format", "-f", help="Output format (repeatable, or 'all'). Default: slurm-tree."),
    ] = None,
    block_sizes: Annotated[str | None, typer.Option(help="Slurm BlockSizes, e.g. 18,72 (inferred if omitted).")] = None,
    options_file: Annotated[
        Path | None, typer.Option("--options", help="JSON/YAML file with RenderOptions (topologies, labels...).")
    ] = None,
    skeleton: Annotated[bool, typer.Option(help="Omit node lists (Slinky dynamic nodes).")] = False,
    out: Annotated[Path | None, typer.Option(help="Directory to write one file per format.")] = None,
    topograph_compat: Annotated[
        bool, typer.Option(help="Topograph's rules where topocast differs (BlockSizes from the smallest block).")
    ] = False,
) -> None:
    """Render a graph or a Topograph model to scheduler configs."""
    from topocast.render_cli import run_render

    try:
        run_render(
            graph,
            model,
            fmt or ["slurm-tree"],
            _parse_sizes(block_sizes),
            options_file,
            skeleton,
            out,
            topograph_compat=topograph_compat,
        )
    except TopocastError as exc:
        raise _fail(str(exc)) from None


_SLURM_ROOT_HELP = "Use the Slurm in this chroot/prefix (e.g. /var/cache/topocast/slurm-sid for 26.05)."


@app.command("validate-slurm")
def validate_slurm(
    topology: Annotated[Path, typer.Option(help="topology.conf (tree or block) or topology.yaml to check.")],
    slurm_conf: Annotated[
        Path | None, typer.Option(help="slurm.conf whose nodes the file must cover (default: a generated one).")
    ] = None,
    slurm_root: Annotated[Path | None, typer.Option(help=_SLURM_ROOT_HELP)] = None,
    slurmctld: Annotated[
        str | None, typer.Option(help="slurmctld binary to use (inside --slurm-root if given).")
    ] = None,
    scontrol: Annotated[str | None, typer.Option(help="scontrol binary to use (inside --slurm-root if given).")] = None,
) -> None:
    """Check a Slurm topology file with a throwaway slurmctld of the installed version, plus what Slurm accepts but
    should never ship."""
    from topocast.slurm_cli import run_validate_slurm

    try:
        code = run_validate_slurm(topology, slurm_conf, slurm_root=slurm_root, slurmctld=slurmctld, scontrol=scontrol)
    except TopocastError as exc:
        raise _fail(str(exc)) from None
    if code:
        raise typer.Exit(code)


@app.command("node-topology")
def node_topology(
    source: Annotated[str, typer.Option(help="The published topology file: ssm:///..., s3://, gcs://, file://.")],
    hostname: Annotated[str | None, typer.Option(help="Slurm node name (default: this host's short name).")] = None,
    instance_id: Annotated[str | None, typer.Option(help="Find the node by cloud instance ID (needs --graph).")] = None,
    graph: Annotated[
        str | None,
        typer.Option(help="The rendered graph.json (for --instance-id); '{generation}' = the source's generation."),
    ] = None,
    json_: Annotated[bool, typer.Option("--json", help="Print node, topology, source and sha256 as JSON.")] = False,
) -> None:
    """Print this node's Topology= value (for slurmd --conf "Topology=..." in cloud-node boot scripts)."""
    from topocast.slurm_cli import run_node_topology

    try:
        run_node_topology(source, hostname=hostname, instance_id=instance_id, graph_source=graph, as_json=json_)
    except TopocastError as exc:
        raise _fail(str(exc)) from None


@app.command()
def schema(
    out: Annotated[Path | None, typer.Option(help="Write the JSON Schema here instead of stdout.")] = None,
) -> None:
    """Print the JSON Schema of the topology graph."""
    from topocast.graph import json_schema

    text = json.dumps(json_schema(), indent=2) + "\n"
    if out:
        out.write_text(text)
    else:
        sys.stdout.write(text)


@app.command()
def discover(
    provider: Annotated[
        str, typer.Option(help="Topology source: aws, gcp, ibnetdiscover, netq or k8s-labels.")
    ] = "aws",
    cluster: Annotated[str, typer.Option(help="Cluster name written into the graph.")] = "default",
    region: Annotated[str | None, typer.Option(help="aws: region (default: the standard AWS environment).")] = None,
    filter_: Annotated[
        list[str] | None,
        typer.Option("--filter", help="aws: EC2 filter NAME=V1,V2, e.g. tag:topocast:cluster=c1 (repeatable)."),
    ] = None,
    name_from: Annotated[
        str | None,
        typer.Option(help="aws: tag:<key>, private-dns, instance-id, template:<fmt>; gcp: name, hostname, label:<k>."),
    ] = None,
    project: Annotated[str | None, typer.Option(help="gcp: project ID.")] = None,
    zone: Annotated[list[str] | None, typer.Option(help="gcp: zone (repeatable; default: all zones).")] = None,
    label: Annotated[
        list[str] | None, typer.Option(help="gcp: cluster label; k8s-labels: node label KEY=VALUE (repeatable).")
    ] = None,
    compute_endpoint: Annotated[
        str | None, typer.Option(help="gcp: Compute API endpoint override (tests, private endpoints).")
    ] = None,
    input_: Annotated[
        list[Path] | None, typer.Option("--input", help="ibnetdiscover: output file (repeatable).")
    ] = None,
    nodes: Annotated[str | None, typer.Option(help="ibnetdiscover/netq: only these hosts (hostlist).")] = None,
    host_regex: Annotated[str | None, typer.Option(help="ibnetdiscover: regex with group 'host'.")] = None,
    domains: Annotated[
        Path | None, typer.Option(help="ibnetdiscover/netq: NVLink domains (CSV host,domain or nvidia-smi -q).")
    ] = None,
    topograph_compat: Annotated[bool, typer.Option(help="ibnetdiscover: Topograph's leaf rule.")] = False,
    url: Annotated[str | None, typer.Option(help="netq: API base URL.")] = None,
    credentials: Annotated[str | None, typer.Option(help="netq: credentials file or secret ARN.")] = None,
    premise: Annotated[list[str] | None, typer.Option(help="netq: premise (repeatable).")] = None,
    insecure: Annotated[bool, typer.Option(help="netq: skip TLS verification (not recommended).")] = False,
    ca_file: Annotated[str | None, typer.Option(help="netq: CA bundle.")] = None,
    kubeconfig: Annotated[str | None, typer.Option(help="k8s-labels: kubeconfig (default $KUBECONFIG).")] = None,
    fabric_key: Annotated[
        list[str] | None, typer.Option(help="k8s-labels: node label of a switch tier, closest first (repeatable).")
    ] = None,
    accelerator_key: Annotated[str | None, typer.Option(help="k8s-labels: node label of the NVLink domain.")] = None,
    out: Annotated[Path | None, typer.Option(help="Write the graph here instead of stdout.")] = None,
) -> None:
    """One-shot discovery with your own credentials: prints the normalized graph JSON."""
    from topocast.discover_cli import DiscoverArgs, run_discover

    args = DiscoverArgs(
        provider=provider,
        cluster=cluster,
        region=region,
        filters=filter_ or [],
        name_from=name_from,
        project=project,
        zones=zone or [],
        labels=label or [],
        compute_endpoint=compute_endpoint,
        inputs=input_ or [],
        nodes=nodes,
        host_regex=host_regex,
        domains=domains,
        topograph_compat=topograph_compat,
        url=url,
        credentials=credentials,
        premises=premise or [],
        insecure=insecure,
        ca_file=ca_file,
        kubeconfig=kubeconfig,
        fabric_keys=fabric_key or [],
        accelerator_key=accelerator_key,
    )
    try:
        run_discover(args, out)
    except TopocastError as exc:
        raise _fail(str(exc)) from None


@app.command()
def publish(
    graph: Annotated[Path | None, typer.Option("--graph", help="Normalized graph JSON to publish.")] = None,
    store: Annotated[
        str | None, typer.Option(help="A deployment's store: s3://bucket/prefix or gs://bucket/prefix.")
    ] = None,
    cluster: Annotated[str, typer.Option(help="--store: the cluster name.")] = "default",
    generation: Annotated[int | None, typer.Option(help="--store: this generation (default: the latest).")] = None,
    kubeconfig: Annotated[str | None, typer.Option(help="kubeconfig (default $KUBECONFIG, ~/.kube/config).")] = None,
    context: Annotated[str | None, typer.Option(help="kubeconfig context.")] = None,
    in_cluster: Annotated[bool, typer.Option(help="Use the pod's service account (CronJob).")] = False,
    fmt: Annotated[
        list[str] | None, typer.Option("--format", "-f", help="k8s-labels, kueue, kai, volcano, slinky.")
    ] = None,
    options_file: Annotated[Path | None, typer.Option("--options", help="RenderOptions JSON/YAML file.")] = None,
    k8s_options: Annotated[Path | None, typer.Option(help="KubernetesPublisherConfig JSON/YAML file.")] = None,
    dry_run: Annotated[bool, typer.Option(help="Read the cluster and print the plan; write nothing.")] = False,
    server_dry_run: Annotated[bool, typer.Option(help="Like --dry-run, writes sent with dryRun=All.")] = False,
    qps: Annotated[float | None, typer.Option(help="Client-side requests per second (default 50).")] = None,
    burst: Annotated[int | None, typer.Option(help="Client-side burst (default 100).")] = None,
    concurrency: Annotated[int | None, typer.Option(help="Node PATCHes in flight (default 8).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the full report as JSON.")] = False,
) -> None:
    """Publish a graph (or a deployment's latest generation) to Kubernetes with your kubeconfig."""
    from topocast.publish_cli import PublishArgs, run_publish

    args = PublishArgs(
        graph, store, cluster, generation, kubeconfig, context, in_cluster, fmt or [], options_file, k8s_options,
        dry_run, server_dry_run, qps, burst, concurrency, as_json,
    )  # fmt: skip
    try:
        code = run_publish(args)
    except TopocastError as exc:
        raise _fail(str(exc)) from None
    raise typer.Exit(code)


events_app = typer.Typer(help="What the functions do with cloud events (docs/events.md).", no_args_is_help=True)
app.add_typer(events_app, name="events")


@events_app.command("explain")
def events_explain(
    delivery: Annotated[
        Path | None, typer.Argument(help="One delivery as a function receives it ('-' = stdin).")
    ] = None,
    uploads: Annotated[str | None, typer.Option(help="s3://bucket/<prefix>/<cluster>/uploads (S3 uploads).")] = None,
) -> None:
    """One JSON line per event: cloud, kind, action, instances, reason. Exit 2 if it would be dead-lettered."""
    from topocast.events_cli import explain

    raise typer.Exit(explain(delivery, uploads))


collect_app = typer.Typer(help="Collect raw fabric data on a fabric-attached host and upload it.", no_args_is_help=True)
app.add_typer(collect_app, name="collect")


@collect_app.command("ibnetdiscover")
def collect_ibnetdiscover(
    upload: Annotated[str, typer.Option(help="s3://bucket/<prefix>/<cluster>/uploads or gs://...")],
    input_: Annotated[Path | None, typer.Option("--input", help="Read this file instead of running the tool.")] = None,
    command: Annotated[str, typer.Option(help="The command to run.")] = "ibnetdiscover",
    host: Annotated[str | None, typer.Option(help="Name of this collector (default: hostname).")] = None,
    timeout: Annotated[float, typer.Option(help="Seconds the command may take.")] = 300.0,
) -> None:
    """Run ibnetdiscover (or read --input), upload it with its fabric checksum; unchanged fabrics upload nothing."""
    from topocast.collect import collect_ibnetdiscover as collect

    try:
        result = collect(input_, upload, command=command, host=host, timeout=timeout)
    except TopocastError as exc:
        raise _fail(str(exc), 1) from None
    state = "uploaded" if result.uploaded else "unchanged, not uploaded"
    typer.echo(f"{result.uri}: {state} (fabric sha256 {result.sha256[:16]}, {result.size} bytes)")


@app.command()
def pull(
    source: Annotated[
        str, typer.Option(help="ssm:///topocast/<cluster>/slurm/topology-tree.conf, s3://..., file://...")
    ],
    dest: Annotated[Path, typer.Option(help="Where Slurm reads it, e.g. /etc/slurm/topology.conf.")],
    reconfigure: Annotated[
        bool, typer.Option(help="Run scontrol reconfigure and verify; roll back on failure.")
    ] = False,
    validate: Annotated[bool, typer.Option(help="Check with a throwaway slurmctld before installing.")] = True,
    slurm_conf: Annotated[Path | None, typer.Option(help="slurm.conf (node list for validation, SLURM_CONF).")] = None,
    state_file: Annotated[Path | None, typer.Option(help="Remember the installed generation here.")] = None,
    live: Annotated[
        bool, typer.Option(help="Apply by scontrol update when only nodes are added or moved (Slurm >= 25.05).")
    ] = False,
    forbid_reconfigure: Annotated[
        bool, typer.Option(help="With --live: never reconfigure; hold and exit 1 with an ALARM instead.")
    ] = False,
    live_max_share: Annotated[
        float, typer.Option(min=0.0, max=1.0, help="With --live: most nodes (share) that may move live.")
    ] = 0.1,
    slurm_root: Annotated[Path | None, typer.Option(help=_SLURM_ROOT_HELP)] = None,
) -> None:
    """Head-node pull agent: fetch, verify sha256, validate, install atomically, reconfigure or update live."""
    from topocast.pull import pull as run_pull
    from topocast.slurm_cli import find_slurm

    try:
        outcome = run_pull(
            source,
            dest,
            reconfigure=reconfigure,
            validate=validate,
            slurm_conf=slurm_conf,
            state_file=state_file,
            live=live,
            allow_reconfigure=not forbid_reconfigure,
            live_max_share=live_max_share,
            slurm=find_slurm(slurm_root, None, None),
        )
    except TopocastError as exc:
        raise _fail(str(exc)) from None
    typer.echo(f"{dest}: {outcome.action} (generation {outcome.generation}): {outcome.detail}")
    if not outcome.ok:
        raise typer.Exit(1)


@app.command()
def demo(
    cloud: Annotated[str, typer.Option(help="Which pipeline to run: aws or gcp.")] = "aws",
    nodes: Annotated[int, typer.Option(min=1, help="GPU instances in the simulated cluster.")] = 256,
    events: Annotated[
        int | None, typer.Option(min=0, help="Instance events in the burst (default: per cloud).")
    ] = None,
    out: Annotated[Path | None, typer.Option(help="Output directory (default: out/demo or out/demo-gcp).")] = None,
    report: Annotated[Path | None, typer.Option(help="JSON report path (default: OUT/report.json).")] = None,
    quiet: Annotated[float, typer.Option(help="Debounce quiet window in seconds.")] = 2.0,
) -> None:
    """Run the whole pipeline locally on a simulated cloud account (no credentials needed)."""
    from topocast.demo import run_demo, summary

    if cloud not in ("aws", "gcp"):
        raise _fail(f"--cloud must be aws or gcp, got {cloud!r}")
    target = out or Path("out/demo" if cloud == "aws" else "out/demo-gcp")
    try:
        if cloud == "aws":
            result = run_demo(nodes, events, target, report, quiet=quiet)
        else:
            from topocast.gcp.demo import run_gcp_demo

            result = run_gcp_demo(nodes, events, target, report, quiet)
    except TopocastError as exc:
        raise _fail(str(exc)) from None
    typer.echo(summary(result, target))
    if not (result["pull"]["ok"] and result["idle"]):
        raise typer.Exit(1)


@app.command()
def package(
    out: Annotated[Path, typer.Option(help="Output directory.")] = Path("dist"),
    cloud: Annotated[str, typer.Option(help="aws, gcp or all.")] = "all",
    python_version: Annotated[str, typer.Option(help="Function runtime Python (Terraform: lambda_runtime).")] = "3.12",
    platform: Annotated[
        str, typer.Option(help="Lambda architecture x86_64 or arm64, or a pip platform tag.")
    ] = "x86_64",
) -> None:
    """Build one deployable archive per function: dist/aws/<stage>.zip (Lambda), dist/gcp/<stage>.zip (sources)."""
    from topocast.package import build_packages

    try:
        built = build_packages(out, cloud, python_version, platform)
    except TopocastError as exc:
        raise _fail(str(exc), 1) from None
    for name, path in built.items():
        typer.echo(f"{name}: {path} ({path.stat().st_size / 1e6:.1f} MB)")


def main() -> None:  # console-script entry point
    app()


if __name__ == "__main__":
    main()
