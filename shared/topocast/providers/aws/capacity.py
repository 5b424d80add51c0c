"""Topology before launch: nodes of a capacity reservation / Capacity Block that are not launched yet.

Slurm's power-saving cloud nodes are defined in ``slurm.conf`` before they exist and need their place
in ``topology.conf`` / the blocks before they boot. EC2's ``DescribeCapacityReservationTopology``
gives the network nodes (and the Capacity Block, the UltraServer / NVLink domain) of a reservation
*before* any instance runs in it. With ``reserved_nodes`` (reservation ID -> Slurm node names,
hostlist expressions allowed) discovery places every named node that no launched instance carries
yet under its reservation's switches; once an instance with that name runs, its own topology
replaces the placeholder.

A placeholder is a graph node without an instance ID, labelled ``capacity-reservation=<cr-id>`` and
``state=reserved``. A reservation that reports no network nodes (state other than active/pending,
an unsupported type) or that EC2 does not know places nothing and is named in the warnings.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from pydantic import ValidationError

from topocast.errors import ProviderError, TopocastError
from topocast.model.graph import Node
from topocast.model.hostlist import expand
from topocast.model.names import check_node_name

__all__ = ["RESERVED_LABEL", "parse_reserved_nodes", "reserved_nodes"]

RESERVED_LABEL = "capacity-reservation"
_RESERVATION_ID = re.compile(r"^cr-[0-9a-f]{8,17}$")


def parse_reserved_nodes(value: Any) -> dict[str, list[str]]:
    """``{"cr-...": "gpu-[001-018]" | [names]}`` (or ``"cr-..=hostlist;cr-..=hostlist"``) -> names per reservation.

    Raises ``ValueError`` naming the reservation or node that is wrong.
    """
    if value is None or value == "" or value == {}:
        return {}
    if isinstance(value, str):
        pairs: dict[str, Any] = {}
        for part in value.split(";"):
            cr, sep, names = part.strip().partition("=")
            if not sep:
                raise ValueError(f"reserved nodes {part!r}: expected cr-ID=HOSTLIST")
            pairs[cr.strip()] = names.strip()
        value = pairs
    if not isinstance(value, dict):
        raise ValueError("reserved nodes: expected a mapping of capacity reservation ID -> node names")
    out: dict[str, list[str]] = {}
    seen: dict[str, str] = {}
    for cr, names in value.items():
        if not isinstance(cr, str) or not _RESERVATION_ID.match(cr):
            raise ValueError(f"reserved nodes: {cr!r} is not a capacity reservation ID (cr-...)")
        items = [names] if isinstance(names, str) else names
        if not isinstance(items, list) or not all(isinstance(n, str) for n in items):
            raise ValueError(f"reserved nodes of {cr}: expected a hostlist or a list of names")
        expanded: list[str] = []
        for text in items:
            try:
                expanded += expand(text)
            except (TopocastError, ValueError) as exc:
                raise ValueError(f"reserved nodes of {cr}: {exc}") from None
        for name in expanded:
            try:
                check_node_name(name, f"reserved node of {cr}")
            except TopocastError as exc:
                raise ValueError(str(exc)) from None
            if name in seen and seen[name] != cr:
                raise ValueError(f"reserved node {name} is in both {seen[name]} and {cr}")
            seen[name] = cr
        out[cr] = expanded
    return out


def reserved_nodes(
    topology: dict[str, dict[str, Any]], missing: Iterable[str], reserved: dict[str, list[str]], taken: set[str]
) -> tuple[list[Node], list[str]]:
    """Placeholder nodes for the reserved names not in ``taken`` (names of launched instances).

    ``topology`` is DescribeCapacityReservationTopology's entries by reservation ID; ``missing`` the IDs
    EC2 does not know.
    """
    nodes: list[Node] = []
    silent: list[str] = []
    for cr, names in sorted(reserved.items()):
        entry = topology.get(cr)
        fabric = list(reversed((entry or {}).get("NetworkNodes") or []))
        waiting = [n for n in names if n not in taken]
        if not waiting:
            continue
        if not fabric:
            state = (entry or {}).get("State", "unknown")
            silent.append(f"{cr} ({state}, {len(waiting)} node(s))")
            continue
        labels = {RESERVED_LABEL: cr, "state": "reserved"}
        if entry and entry.get("AvailabilityZoneId"):
            labels["zone-id"] = entry["AvailabilityZoneId"]
        for name in waiting:
            try:
                nodes.append(
                    Node(
                        name=name,
                        id=None,  # not launched: no instance yet
                        fabric=fabric,
                        accelerator=(entry or {}).get("CapacityBlockId") or None,
                        zone=(entry or {}).get("AvailabilityZone"),
                        instance_type=(entry or {}).get("InstanceType"),
                        labels=labels,
                        subdomain=None,
                        accelerator_pending=False,
                    )
                )
            except (ValidationError, TopocastError) as exc:
                raise ProviderError(f"EC2 returned unusable topology for capacity reservation {cr}: {exc}") from None
    warnings = []
    gone = sorted(set(missing))
    if gone:
        warnings.append(f"capacity reservation(s) EC2 does not know; their nodes are not placed: {', '.join(gone)}")
    if silent:
        warnings.append("capacity reservation(s) without topology; their nodes are not placed: " + ", ".join(silent))
    return nodes, warnings
