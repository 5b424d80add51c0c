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
    provider: Annotated[str, typer.Option(help="Topology source: aws (gcp, ibnetdiscover, netq: see docs).")] = "aws",
    cluster: Annotated[str, typer.Option(help="Cluster name written into the graph.")] = "default",
    region: Annotated[str | None, typer.Option(help="AWS region (default: the standard AWS environment).")] = None,
    filter_: Annotated[
        list[str] | None,
        typer.Option("--filter", help="EC2 filter NAME=V1,V2, e.g. tag:topocast:cluster=c1 (repeatable)."),
    ] = None,
    name_from: Annotated[
        str | None, typer.Option(help="Node names from tag:<key>, private-dns, instance-id or template:<fmt>.")
    ] = None,
    out: Annotated[Path | None, typer.Option(help="Write the graph here instead of stdout.")] = None,
) -> None:
    """One-shot discovery with your own credentials: prints the normalized graph JSON."""
    from topocast.discover_cli import run_discover

    try:
        run_discover(provider, cluster, region, filter_ or [], name_from, out)
    except TopocastError as exc:
        raise _fail(str(exc)) from None


@app.command()
def pull(
    source: Annotated[str, typer.Option(help="ssm:///topocast/<cluster>/slurm/topology-tree.conf, s3://..., file://...")],
    dest: Annotated[Path, typer.Option(help="Where Slurm reads it, e.g. /etc/slurm/topology.conf.")],
    reconfigure: Annotated[bool, typer.Option(help="Run scontrol reconfigure and verify; roll back on failure.")] = False,
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
    nodes: Annotated[int, typer.Option(min=1, help="GPU instances in the simulated cluster.")] = 256,
    events: Annotated[int | None, typer.Option(min=0, help="Launch events in the burst (default: one per node).")] = None,
    out: Annotated[Path, typer.Option(help="Output directory.")] = Path("out/demo"),
    report: Annotated[Path | None, typer.Option(help="JSON report path (default: OUT/report.json).")] = None,
    quiet: Annotated[float, typer.Option(help="Debounce quiet window in seconds.")] = 2.0,
) -> None:
    """Run the whole AWS pipeline locally on a simulated account (no credentials needed)."""
    from topocast.demo import run_demo, summary

    try:
        result = run_demo(nodes, events, out, report, quiet=quiet)
    except TopocastError as exc:
        raise _fail(str(exc)) from None
    typer.echo(summary(result, out))
    if not (result["pull"]["ok"] and result["idle"]):
        raise typer.Exit(1)


def main() -> None:  # console-script entry point
    app()


if __name__ == "__main__":
    main()
