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


def main() -> None:  # console-script entry point
    app()


if __name__ == "__main__":
    main()
