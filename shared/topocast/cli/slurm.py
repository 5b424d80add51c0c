"""The Slurm commands' logic: ``validate-slurm`` and ``node-topology`` (``cli.py`` only parses options).

Each function takes plain arguments, prints its result and returns the exit
status; errors are :class:`~topocast.errors.TopocastError` for the CLI to print.
"""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path

from topocast.errors import TopocastError
from topocast.slurm.controller import SlurmInstall

__all__ = ["find_slurm", "run_node_topology", "run_validate_slurm"]


def find_slurm(root: Path | None, slurmctld: str | None, scontrol: str | None) -> SlurmInstall:
    """The Slurm to use: a chroot/prefix ``root`` (binaries inside it), explicit binaries, or this host's."""
    return SlurmInstall.find(root, slurmctld, scontrol)


def run_validate_slurm(
    topology: Path,
    slurm_conf: Path | None,
    *,
    slurm_root: Path | None = None,
    slurmctld: str | None = None,
    scontrol: str | None = None,
) -> int:
    """Validate a topology.conf (tree/block) or topology.yaml; 0 valid, 1 invalid."""
    from topocast.slurm.validate import validate_topology_file

    chosen = slurm_root is not None or slurmctld is not None
    install = find_slurm(slurm_root, slurmctld, scontrol)
    # a controller named on the command line must run and be new enough; the default one may be missing
    result = validate_topology_file(topology, slurm_conf, install=install, controller=True if chosen else None)
    for warning in result.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    if result.ok and not result.controller_checked:
        # only our structural checks ran (no controller here, or one too old for this format): say so on
        # stdout too, where a script reads the verdict, not just in the stderr warning
        print(
            f"{topology}: structure valid, not judged by slurmctld ({result.summary}); "
            "use --slurm-root or --slurmctld with a Slurm that reads this format for a full check"
        )
        return 0
    if result.ok:
        print(f"{topology}: valid ({result.summary})")
        return 0
    for reason in result.errors:
        print(f"invalid: {reason}", file=sys.stderr)
    return 1


def _node_by_instance(graph_source: str, instance_id: str) -> str:
    from topocast.agents.pull import fetch
    from topocast.model.graph import graph_from_json

    graph = graph_from_json(fetch(graph_source).content, graph_source)
    for node in graph.nodes:
        if node.id == instance_id:
            return node.name
    raise TopocastError(f"instance {instance_id!r} is not in the graph {graph_source}")


def run_node_topology(
    source: str,
    *,
    hostname: str | None = None,
    instance_id: str | None = None,
    graph_source: str | None = None,
    as_json: bool = False,
) -> int:
    """Print the ``Topology=`` value for one node from a published topology file (for ``slurmd --conf``)."""
    from topocast.agents.pull import fetch
    from topocast.slurm.live import node_spec

    if instance_id is not None and hostname is not None:
        raise TopocastError("give --instance-id or --hostname, not both")
    pulled = fetch(source)
    if instance_id is not None:
        if graph_source is None:
            raise TopocastError("--instance-id needs --graph (the published graph.json) to find the node name")
        if "{generation}" in graph_source:
            if pulled.generation is None:
                raise TopocastError(f"--graph names {{generation}} but {source} carries no generation")
            # the graph of exactly the generation the topology file was rendered from
            graph_source = graph_source.replace("{generation}", f"{pulled.generation:012d}")
        node = _node_by_instance(graph_source, instance_id)
    else:
        node = hostname or socket.gethostname().split(".", 1)[0]
    spec = node_spec(pulled.content.decode("utf-8", errors="replace"), node, source)
    if as_json:
        print(json.dumps({"node": node, "topology": spec, "source": source, "sha256": pulled.sha256}))
    else:
        print(spec)
    return 0
