"""``topocast synth``: write a synthetic fat tree as a graph JSON or a Topograph model YAML."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from topocast.errors import TopocastError

__all__ = ["run_synth"]

#: output kinds, and the file suffixes that choose one when ``--format`` is not given
KINDS = {"graph": (".json",), "model": (".yaml", ".yml")}


def _kind(fmt: str | None, out: Path | None) -> str:
    if fmt is not None:
        if fmt not in KINDS:
            raise TopocastError(f"--format {fmt!r}: expected graph or model")
        return fmt
    suffix = out.suffix.lower() if out is not None else ""
    return next((k for k, suffixes in KINDS.items() if suffix in suffixes), "graph")


def run_synth(n: int, shape: dict[str, Any], fmt: str | None, out: Path | None) -> str:
    """Write the cluster to ``out`` (stdout when None); returns the one-line summary printed on stderr."""
    kind = _kind(fmt, out)
    if kind == "graph":
        from topocast.model.graph import TopologyGraph, dump_graph
        from topocast.model.synth import synthetic_data

        # validated like any graph a provider makes, so a name pattern the schema refuses is caught here
        graph = TopologyGraph.model_validate(synthetic_data(n, **shape))
        text = dump_graph(graph)
        detail = f"{len(graph.nodes)} nodes, {len(graph.nodes_without_topology())} without topology"
    else:
        import yaml

        from topocast.model.synth import model_data

        model = model_data(n, **shape)
        dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)  # libyaml when built with it: 10x faster
        text = yaml.dump(model, Dumper=dumper, sort_keys=False, default_flow_style=None, width=120)
        detail = f"{n} nodes, {len(model['switches'])} upper switch(es), {len(model['blocks'])} block(s)"
    if out is None:
        sys.stdout.write(text)
    else:  # root may run it: through a temp file and a rename, never through a planted link
        from topocast.safeio.files import write_out

        write_out(out, text)
    return f"topocast: synth: {detail} ({kind}) -> {out or 'stdout'}"
