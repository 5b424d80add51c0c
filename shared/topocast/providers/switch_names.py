"""Switch display names from an operator's name map (``--switch-names FILE``, option ``switch_names``).

On-prem sources give switches by ID (ibnetdiscover: ``S-<guid>``; NetQ: the switch's host name).
A map file turns IDs into the names the operators use, for every Slurm file and the fabric view;
the tree renderers write ``SwitchName=<name>`` after a ``# <name>=<ID>`` comment. A name changes
only when the map does: the IDs the sources give never move.

The file: one switch a line, ``ID NAME`` or ``ID,NAME``; blank lines and ``#`` comments are skipped.
An ibnetdiscover GUID may be written ``S-2c5eab0300000240``, ``0x2c5eab0300000240`` or
``2c5eab0300000240``. What cannot be used is never silently dropped: a bad line is an error naming
the line; an unsafe name, two switches given one name, or IDs no switch of the graph has are
warnings, and those switches keep their IDs.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping

from topocast.errors import ProviderError, UnsafeNameError
from topocast.model.graph import TopologyGraph
from topocast.model.hostlist import compact_str
from topocast.model.names import MAX_SWITCH_NAME, check_name

_GUID = re.compile(r"(?:S-|0x)?([0-9A-Fa-f]{16})")
#: the value that asks ibnetdiscover for the names in the switches' own descriptions instead of a file
FROM_DESCRIPTIONS = "descriptions"


def switch_key(text: str) -> str:
    """An ID as the graph holds it: GUIDs as ``S-<16 lowercase hex>``, anything else as written."""
    m = _GUID.fullmatch(text)
    return f"S-{m.group(1).lower()}" if m else text


def parse_switch_names(text: str, source: str) -> dict[str, str]:
    """ID -> name from a map file's text; a malformed line or an ID given twice is an error naming it."""
    names: dict[str, str] = {}
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        parts = [p for p in re.split(r"[,\s]+", line) if p]
        if len(parts) != 2:
            raise ProviderError(f"{source}:{lineno}: expected 'ID NAME' (or 'ID,NAME'), got {line!r}")
        key = switch_key(parts[0])
        if key in names:
            raise ProviderError(f"{source}:{lineno}: switch {parts[0]!r} is named twice")
        names[key] = parts[1]
    return names


def apply_switch_names(graph: TopologyGraph, names: Mapping[str, str], source: str) -> tuple[TopologyGraph, list[str]]:
    """``graph`` with the display names of ``names`` for its switches, and the warnings about what was not used."""
    switches = {sw for node in graph.nodes for sw in node.fabric}
    warnings: list[str] = []
    usable: dict[str, str] = {}
    for sw, name in names.items():
        if sw not in switches:
            continue
        try:
            usable[sw] = check_name(name, "switch name", f"{source}: switch {sw!r}", MAX_SWITCH_NAME)
        except UnsafeNameError as exc:
            warnings.append(f"{exc}; the switch keeps its ID")
    unknown = sorted(set(names) - switches)
    if unknown:
        warnings.append(f"{source}: {len(unknown)} ID(s) name no switch of the graph: {compact_str(unknown)}")
    # a name two switches would share (or one an unnamed switch has as its ID) would be a duplicate SwitchName
    taken = Counter([*usable.values(), *(sw for sw in switches if sw not in usable)])
    clashing = sorted(sw for sw, name in usable.items() if taken[name] > 1)
    for sw in clashing:
        warnings.append(f"{source}: name {usable.pop(sw)!r} of switch {sw!r} is not unique; the switch keeps its ID")
    merged = {**graph.switch_names, **usable}
    return graph.model_copy(update={"switch_names": merged}), warnings
