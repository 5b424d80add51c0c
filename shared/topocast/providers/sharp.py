"""SHARP's view of the InfiniBand tree: the file ``sharp_cmd topology`` writes.

Azure CycleCloud's ``azslurm topology`` (and the AKS torset tool) run, on one node of the fabric::

    sharp_cmd topology --ib-dev mlx5_ib0:1 --guids_file guids.txt --topology_file topology.txt

``guids.txt`` lists the hosts' HCA port GUIDs; ``topology.txt`` comes back in Slurm's
``topology.conf`` syntax with port GUIDs where host names would be, one switch per line::

    SwitchName=ibsw2 Nodes=0x155dfffd341acb,0x155dfffd341b0b
    SwitchName=ibsw9 Switches=ibsw2,ibsw3

(SHARP prints GUIDs without the leading zeros ``ibstat`` shows: ``0x0015...`` is ``0x15...``; both
are normalized by :func:`topocast.providers.nvlink.normalize_guid`.) :func:`parse_sharp_topology`
turns that into each port GUID's switch path, closest first; the GUID -> host map comes from the
hosts' NVLink records (:mod:`topocast.providers.nvlink`, ``port_guids``). A line that is not
``SwitchName=... Nodes=|Switches=...``, a switch defined twice or with two parents, or a cycle is a
:class:`ProviderError` naming ``<file>:<line>``: the file is one cluster-wide answer, so a broken
one is not used at all (the discovery fails with that line and the last good graph stays). A GUID
under two switches is left out and reported (its host falls back to its placement path).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from topocast.errors import ProviderError, TopocastError
from topocast.model.hostlist import expand
from topocast.model.names import check_switch_name
from topocast.providers.nvlink import normalize_guid

__all__ = ["SharpTopology", "parse_sharp_topology"]

_LINE = re.compile(r"^SwitchName=(\S+)(?:\s+(Nodes|Switches)=(\S+))?\s*(?:#.*)?$")


@dataclass
class SharpTopology:
    """Port GUID -> switch path (closest first), and the GUIDs that could not be placed."""

    paths: dict[str, list[str]] = field(default_factory=dict)
    #: guid -> why it has no path
    ambiguous: dict[str, str] = field(default_factory=dict)


def parse_sharp_topology(text: str, source: str = "sharp topology") -> SharpTopology:
    parent: dict[str, str] = {}
    defined: dict[str, int] = {}
    leaves: dict[str, list[str]] = {}  # guid -> leaf switches listing it
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _LINE.match(line)
        if m is None:
            raise ProviderError(
                f"{source}:{number}: expected 'SwitchName=NAME Nodes=...|Switches=...', got {line[:80]!r}"
            )
        name, kind, members = m.group(1), m.group(2), m.group(3)
        try:
            check_switch_name(name, f"{source}:{number}")
        except TopocastError as exc:
            raise ProviderError(str(exc)) from None
        if name in defined:
            raise ProviderError(f"{source}:{number}: switch {name!r} is defined twice (first at line {defined[name]})")
        defined[name] = number
        if kind == "Nodes":
            for guid in members.split(","):
                try:
                    leaves.setdefault(normalize_guid(guid), []).append(name)
                except ProviderError as exc:
                    raise ProviderError(f"{source}:{number}: {exc}") from None
        elif kind == "Switches":
            try:
                children = expand(members)
            except TopocastError as exc:
                raise ProviderError(f"{source}:{number}: {exc}") from None
            for child in children:
                if child in parent:
                    raise ProviderError(
                        f"{source}:{number}: switch {child!r} has two parents ({parent[child]!r} and {name!r})"
                    )
                parent[child] = name
    out = SharpTopology()
    for guid, names in leaves.items():
        if len(names) > 1:
            out.ambiguous[guid] = f"port {guid} is listed under {len(names)} switches ({', '.join(names)})"
            continue
        path = [names[0]]
        while path[-1] in parent:
            up = parent[path[-1]]
            if up in path:
                raise ProviderError(f"{source}:{defined.get(up, 0)}: switch {up!r} is part of a cycle")
            path.append(up)
        out.paths[guid] = path
    if not out.paths and not out.ambiguous:
        raise ProviderError(f"{source}: no 'SwitchName=... Nodes=...' line (is this sharp_cmd topology output?)")
    return out
