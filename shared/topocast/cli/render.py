"""``topocast render``: load a graph or model, render formats, write or print."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

from topocast.errors import InvalidGraphError, RenderError
from topocast.model.fabric import shared_views
from topocast.model.graph import TopologyGraph, graph_from_json, load_graph
from topocast.model.placement import notes_report, set_aside_report
from topocast.renderers import RENDERERS, Artifact, RenderOptions, render, render_many, renderer
from topocast.safeio.files import UnsafePathError, out_directory, write_file
from topocast.safeio.limits import MAX_YAML_BYTES, read_capped
from topocast.safeio.validation import validate


def load_options(path: Path | None) -> dict:
    if path is None:
        return {}
    try:
        with path.open("rb") as fh:
            text = read_capped(fh, MAX_YAML_BYTES, f"{path}: options", RenderError)
    except OSError as exc:
        raise RenderError(f"{path}: cannot read options ({exc.strerror})") from None
    from topocast.safeio.yaml_input import load_yaml  # only options files need YAML: keeps `render` startup lean

    data = load_yaml(text, f"{path}: options", RenderError)  # YAML is a superset of JSON
    if not isinstance(data, dict):
        raise RenderError(f"{path}: options must be a mapping")
    return data


@dataclass(frozen=True)
class TargetFlags:
    """``render``'s flags for the Slurm the files are for; each one given wins over the options file."""

    slurm_version: str | None = None
    block_names: str | None = None
    no_topology_switch: bool = False


def build_options(
    base: dict,
    block_sizes: list[int] | None,
    skeleton: bool,
    topograph_compat: bool = False,
    source: str = "bad render options",
    target: TargetFlags | None = None,
) -> RenderOptions:
    data = dict(base)
    target = target or TargetFlags()
    if topograph_compat:
        data["topograph_compat"] = True
    if target.slurm_version is not None:
        data["slurm_version"] = target.slurm_version
    if target.block_names is not None:
        data["block_names"] = target.block_names
    if target.no_topology_switch:
        data["no_topology_switch"] = True
    if block_sizes is not None:
        data["block_sizes"] = block_sizes
    if skeleton:
        data["skeleton_only"] = True
    return validate(RenderOptions, data, source, RenderError)


def load_input(graph: Path | None, model: Path | None) -> TopologyGraph:
    if (graph is None) == (model is None):
        raise InvalidGraphError("give exactly one of --graph or --model")
    if model is not None:
        from topocast.providers.model import load_model

        return load_model(model)
    assert graph is not None
    if str(graph) == "-":
        return graph_from_json(sys.stdin.buffer.read(), "<stdin>")
    return load_graph(graph)


def expand_formats(formats: list[str]) -> list[str]:
    out: list[str] = []
    for f in formats:
        for part in f.split(","):
            part = part.strip()
            if part == "all":
                out.extend(RENDERERS)
            elif part not in RENDERERS:
                raise RenderError(f"unknown format {part!r}; known: {', '.join(RENDERERS)}, all")
            else:
                out.append(part)
    return list(dict.fromkeys(out))


def list_options(fmt: str | None = None) -> str:
    """Per format (``fmt``, or every format in ``--format all`` order), the ``RenderOptions`` fields it reads,
    printed like ``topocast discover --list-options`` prints a provider's (from the same field descriptions)."""
    from topocast.providers.options import describe_options

    lines: list[str] = []
    for name in expand_formats([fmt]) if fmt is not None else list(RENDERERS):
        reads = renderer(name).reads
        lines.extend(describe_options(name, RenderOptions, reads) if reads else [f"{name}: reads no options"])
    return "\n".join(lines) + "\n"


def run_render(
    graph_path: Path | None,
    model_path: Path | None,
    formats: list[str],
    block_sizes: list[int] | None,
    options_file: Path | None,
    skeleton: bool,
    out: Path | None,
    topograph_compat: bool = False,
    previous: Path | None = None,
    target: TargetFlags | None = None,
) -> None:
    fmts = expand_formats(formats)
    if previous is not None and "html" not in fmts:
        raise RenderError("--previous only applies to the html format (add -f html)")
    source = f"{options_file}: bad render options" if options_file is not None else "bad render options"
    options = build_options(load_options(options_file), block_sizes, skeleton, topograph_compat, source, target)
    with shared_views():  # the node columns the graph's checks build are the renderers' too
        _render_to(fmts, options, load_input(graph_path, model_path), previous, out)


def slurm_checks(graph: TopologyGraph, options: RenderOptions, artifacts: list[Artifact]) -> list[str]:
    """``validate-slurm``'s structural warnings for the tree and block files of ``graph`` (rendered if not yet).

    Each file is checked as the records its renderer wrote it from (the text re-read was most of
    a 100k-node page's time), or as its text where that might read otherwise
    (:func:`~topocast.slurm.topofile.topology_from_records`).
    """
    from topocast.renderers import slurm_block, slurm_tree
    from topocast.slurm.topofile import TopologyFile, topology_from_records
    from topocast.slurm.validate import structure_messages

    have = {a.format: a for a in artifacts}
    files: list[tuple[str, str] | TopologyFile] = []
    for fmt in ("slurm-tree", "slurm-block"):
        art = have.get(fmt)
        if art is None:
            try:
                art = render(graph, fmt, options)
            except RenderError:  # NotApplicableError included: a graph without that kind of topology
                continue
        if fmt == "slurm-tree":
            read = topology_from_records(art.filename, switches=slurm_tree.file_records(graph, options))
        else:
            blocks, sizes = slurm_block.file_records(graph, options)
            read = topology_from_records(art.filename, blocks=blocks, block_sizes=sizes)
        files.append((art.filename, art.content) if read is None else read)
    return structure_messages(files)


def _render_to(
    fmts: list[str], options: RenderOptions, graph: TopologyGraph, previous: Path | None, out: Path | None
) -> None:
    before = load_graph(previous) if previous is not None else None
    missing = graph.nodes_without_topology()
    if missing:
        shown = ", ".join(missing[:10]) + (f" and {len(missing) - 10} more" if len(missing) > 10 else "")
        print(f"topocast: warning: {len(missing)} node(s) without topology: {shown}", file=sys.stderr)
    aside = set_aside_report(graph)
    if aside:  # what discovery set aside (the graph's ``unplaced``), with the reasons
        print(f"topocast: warning: {aside[0]}", file=sys.stderr)
        print("\n".join(aside[1:]), file=sys.stderr)
    notes = notes_report(graph)
    if notes:  # per-node notes (merged sources disagreeing): placed, but worth a look
        print(f"topocast: note: {notes[0]}", file=sys.stderr)
        print("\n".join(notes[1:]), file=sys.stderr)
    # render all before writing any; the page once, last: it shows what validate-slurm says about the
    # Slurm files just rendered
    artifacts = render_many(graph, [f for f in fmts if f != "html"], options, objects=False)
    if "html" in fmts:
        from topocast.renderers.html import render_with_previous

        page = render_with_previous(graph, before, options, slurm_checks(graph, options, artifacts))
        artifacts.insert(fmts.index("html"), page)
    for art in artifacts:
        for w in art.warnings:
            print(f"topocast: warning: {art.format}: {w}", file=sys.stderr)
    if out is None:
        if len(artifacts) != 1:
            raise RenderError("several formats need --out DIR")
        sys.stdout.write(artifacts[0].content)
        return
    try:
        out_directory(out)  # root may run this: no directory another user could plant links in
        manifest = [
            {
                "format": a.format,
                "file": a.filename,
                "sha256": _write(out / a.filename, a.content),
                "nodes": a.node_count,
            }
            for a in artifacts
        ]
        data: dict[str, object] = {"artifacts": manifest}
        if graph.unplaced:  # left out when nothing was set aside: the manifest is what it always was
            data["set_aside"] = graph.nodes_set_aside()
        if graph.notes:
            data["notes"] = dict(sorted(graph.notes.items()))
        write_file(out / "manifest.json", json.dumps(data, indent=2) + "\n")
    except OSError as exc:
        where = exc.filename or out
        raise RenderError(f"--out {out}: cannot write {where} ({exc.strerror or exc})") from None
    except UnsafePathError as exc:
        raise RenderError(f"--out {out}: {exc}") from None
    print(f"wrote {len(artifacts)} file(s) to {out}", file=sys.stderr)


def _write(path: Path, text: str, chunk: int = 1 << 20) -> str:
    """Write ``text`` as UTF-8 a megabyte at a time and return its sha256 (``Artifact.sha256``):
    a 27 MB labels file is never held twice (str and bytes), which a 100k-node render pays in page faults.
    Through a temp file and a rename (:func:`topocast.safeio.files.write_file`): a planted link is replaced."""
    return write_file(path, (text[start : start + chunk].encode() for start in range(0, len(text), chunk)))
