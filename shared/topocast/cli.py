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
) -> None:
    """Render a graph or a Topograph model to scheduler configs."""
    from topocast.render_cli import run_render

    try:
        run_render(graph, model, fmt or ["slurm-tree"], _parse_sizes(block_sizes), options_file, skeleton, out)
    except TopocastError as exc:
        raise _fail(str(exc)) from None


@app.command("validate-slurm")
def validate_slurm(
    topology: Annotated[Path, typer.Option(help="topology.conf to check.")],
    slurm_conf: Annotated[
        Path | None, typer.Option(help="slurm.conf whose nodes the file must cover (default: a generated one).")
    ] = None,
) -> None:
    """Check a topology.conf with a throwaway slurmctld, plus what Slurm accepts but should never ship."""
    from topocast.slurm.validate import validate_topology_file

    try:
        result = validate_topology_file(topology, slurm_conf)
    except TopocastError as exc:
        raise _fail(str(exc)) from None
    for warning in result.warnings:
        typer.echo(f"warning: {warning}", err=True)
    if result.ok:
        typer.echo(f"{topology}: valid ({result.summary})")
        return
    for reason in result.errors:
        typer.echo(f"invalid: {reason}", err=True)
    raise typer.Exit(1)


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
    provider: Annotated[str, typer.Option(help="Topology source: aws, gcp, ibnetdiscover or netq.")] = "aws",
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
    label: Annotated[list[str] | None, typer.Option(help="gcp: cluster label KEY=VALUE (repeatable).")] = None,
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
    )
    try:
        run_discover(args, out)
    except TopocastError as exc:
        raise _fail(str(exc)) from None


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
) -> None:
    """Head-node pull agent: fetch, verify sha256, validate, install atomically, reconfigure."""
    from topocast.pull import pull as run_pull

    try:
        outcome = run_pull(
            source, dest, reconfigure=reconfigure, validate=validate, slurm_conf=slurm_conf, state_file=state_file
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
    from topocast.demo_cli import missing_demo_extra

    if cloud not in ("aws", "gcp"):
        raise _fail(f"--cloud must be aws or gcp, got {cloud!r}")
    if why := missing_demo_extra(cloud):
        raise _fail(why)
    from topocast_sim.demo import run_demo, summary

    target = out or Path("out/demo" if cloud == "aws" else "out/demo-gcp")
    try:
        if cloud == "aws":
            result = run_demo(nodes, events, target, report, quiet=quiet)
        else:
            from topocast_sim.gcp_demo import run_gcp_demo

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
