"""Where a Slurm topology file puts each node, for ``topocast diff`` of two topology.conf or topology.yaml files.

Read the way slurmctld reads them, with the repo's own parsers (:mod:`topocast.slurm.topofile`,
:mod:`topocast.slurm.topoyaml`): a file slurmctld would refuse (a syntax error, a cycle, a node in two
leaves) is refused here too, with its first problem. A node's place is its path, closest first:

* ``topology/tree``: its leaf switch, then each switch above it (``("leaf-1", "spine-1")``);
* ``topology/block``: its block (``("block-3",)``);
* ``topology.yaml``: the path in each topology that places it, each switch or block named
  ``<topology>:<name>`` (a node in tree ``fab`` then block topology ``blk``:
  ``("blk:b1", "fab:leaf-1", "fab:spine-1")``, printed root first as ``fab:spine-1 > fab:leaf-1 > blk:b1``);
  ``flat`` topologies place nothing.
"""

from __future__ import annotations

from topocast.errors import TopocastError
from topocast.slurm.topofile import TopologyFile, check_structure, parse_topology
from topocast.slurm.topoyaml import looks_like_yaml, parse_topology_yaml

__all__ = ["SlurmFileError", "placements"]


class SlurmFileError(TopocastError):
    """A topology file slurmctld would not read."""


def placements(text: str, source: str) -> dict[str, tuple[str, ...]]:
    """Node -> its path (closest first) in the topology.conf or topology.yaml ``text``."""
    if looks_like_yaml(text, source):
        doc = parse_topology_yaml(text, source)
        _refuse(doc.errors, source)
        placed: dict[str, tuple[str, ...]] = {}
        for topology in reversed(doc.topologies):  # printed root first: the file's first topology first
            if topology.file is None:
                continue
            for node, path in _file_paths(topology.file).items():
                placed[node] = placed.get(node, ()) + tuple(f"{topology.name}:{p}" for p in path)
        return placed
    topo = parse_topology(text, source)
    if not topo.errors:
        check_structure(topo)
    _refuse(topo.errors, source)
    return _file_paths(topo)


def _refuse(errors: list[str], source: str) -> None:
    if errors:
        more = f" (and {len(errors) - 1} more problems)" if len(errors) > 1 else ""
        raise SlurmFileError(f"{errors[0]}{more}; check it with 'topocast validate-slurm --topology {source}'")


def _file_paths(topo: TopologyFile) -> dict[str, tuple[str, ...]]:
    if topo.kind == "block":
        return {node: (block.name,) for block in topo.blocks.values() for node in block.nodes}
    parent = {child: sw.name for sw in topo.switches.values() for child in sw.children}
    paths: dict[str, tuple[str, ...]] = {}
    for sw in topo.switches.values():
        if not sw.nodes:
            continue
        path = [sw.name]
        while path[-1] in parent:  # check_structure refused cycles
            path.append(parent[path[-1]])
        for node in sw.nodes:
            paths.setdefault(node, tuple(path))
    return paths
