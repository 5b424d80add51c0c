"""Does the running controller place every node where the installed file says? Read it, and repair it.

The file on disk and the controller drift apart without anyone writing the file: a live move
whose undo went over a dead link stays in the controller; a ``State=CLOUD`` node moved live goes
back to the place of the file the controller last *read* when it powers down (26.05.5, its live
``Topology=`` cleared); an operator's ``scontrol update``. So the pull agent reads the controller on
every run, ``unchanged`` included, and compares it with the installed file:

* ``scontrol show topology`` (one call per tree/block topology) is the complete view: every node's
  leaf switch (the lowest level that lists it) and the path above it, or its block;
* slurmrestd has no topology view (26.05: no such endpoint); its node listing shows a node's live
  ``topology`` only, ``""`` for a node placed by the file the controller read. That view is partial:
  a node with a live place that differs from the file is drift, a node without one is not judged.

:func:`find_drift` is the pure comparison; :func:`converge` repairs: live moves to the file's place
(:class:`ControllerRepair`, which :class:`topocast.slurm.live.NodeUpdater` extends), a reconfigure
when a live move cannot do it (a power-saving node whose live place would not survive its next
power-down, a failed move), and when the policy forbids both it holds and says so. It reads the
controller again afterwards: what it reports as repaired is what the controller shows.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

from topocast.errors import TopocastError
from topocast.model.hostlist import compact_str
from topocast.slurm.scontrol import parse_show_blocks, parse_show_topology

__all__ = [
    "ControllerRepair",
    "ControllerView",
    "Convergence",
    "Drift",
    "converge",
    "find_drift",
    "shown_specs",
]

#: what a report line shows of a list: this many names, then a count
SAMPLE = 3


@dataclass(frozen=True)
class ControllerView:
    """node -> its place as the controller has it (a ``Topology=`` spec, ``""``: in no topology)."""

    specs: dict[str, str]
    #: True: every placed node is listed (scontrol); False: only nodes with a live ``Topology=`` (slurmrestd)
    complete: bool
    #: what was read ("scontrol show topology", "slurmrestd GET nodes")
    read_by: str


def _parts(spec: str) -> frozenset[str]:
    return frozenset(p for p in spec.split(",") if p)


def shown_specs(name: str, kind: str, shown_text: str) -> dict[str, str]:
    """node -> ``name:<root-first path>`` (tree) or ``name:<block>`` (block) from ``scontrol show topology``.

    Slurm lists every node below a switch, not only its direct children: a node's leaf is the
    lowest-level switch listing it, and its path runs up through the ``Switches=`` parents.
    """
    out: dict[str, str] = {}
    if kind == "block":
        for block, members in parse_show_blocks(shown_text).items():
            for node in members.nodes:
                out.setdefault(node, f"{name}:{block}")
        return out
    switches = parse_show_topology(shown_text)
    parent = {child: sw for sw, info in switches.items() for child in info.switches}
    leaf: dict[str, tuple[int, str]] = {}
    for sw, info in switches.items():
        for node in info.nodes:
            if node not in leaf or info.level < leaf[node][0]:
                leaf[node] = (info.level, sw)
    paths: dict[str, str] = {}  # leaf -> spec, walked once per leaf
    for node, (_, sw) in leaf.items():
        spec = paths.get(sw)
        if spec is None:
            path = [sw]
            while (up := parent.get(path[-1])) is not None and up not in path:
                path.append(up)
            spec = paths[sw] = f"{name}:{':'.join(reversed(path))}"
        out[node] = spec
    return out


class ControllerRepair(Protocol):
    """What :func:`converge` needs of a running controller: read where it places nodes, move them, reread
    its files. :class:`topocast.slurm.live.NodeUpdater` (``scontrol`` or slurmrestd) extends it.
    Every method raises :class:`TopocastError` with the cause."""

    def view(self, topologies: list[tuple[str, str]]) -> ControllerView:
        """Where the controller places nodes now, for the (name, kind) tree/block topologies of the file."""
        ...

    def move(self, hosts: str, spec: str) -> None:
        """Give the nodes of hostlist ``hosts`` the ``Topology=`` value ``spec`` ("" clears it)."""
        ...

    def reconfigure(self) -> None:
        """Make the controller reread its files, and wait until it answers again."""
        ...

    def power_saving(self, nodes: list[str]) -> list[str]:
        """Those of ``nodes`` that are cloud (``State=CLOUD``) or powered-down nodes."""
        ...


@dataclass(frozen=True)
class Drift:
    """Nodes the controller places elsewhere than the installed file: node -> (controller's place, file's)."""

    misplaced: dict[str, tuple[str, str]] = field(default_factory=dict)
    read_by: str = ""
    complete: bool = True
    #: how long the read took (seconds)
    seconds: float = 0.0

    def __bool__(self) -> bool:
        return bool(self.misplaced)

    def summary(self, sample: int = SAMPLE) -> str:
        """``2 node(s) placed elsewhere than the file (n1: default:root:s2:l3 -> default:root:s1:l1, ...)``."""
        shown = [f"{n}: {got or 'nowhere'} -> {want or 'nowhere'}" for n, (got, want) in list(self.misplaced.items())]
        more = f", ... (+{len(shown) - sample} more)" if len(shown) > sample else ""
        return f"{len(shown)} node(s) placed elsewhere than the file ({', '.join(shown[:sample])}{more})"

    def as_dict(self) -> dict[str, object]:
        return {
            "misplaced": len(self.misplaced),
            "sample": {n: list(v) for n, v in list(self.misplaced.items())[:SAMPLE]},
            "read_by": self.read_by,
            "complete": self.complete,
            "seconds": round(self.seconds, 3),
        }


def find_drift(file_specs: dict[str, str], view: ControllerView, nodes: Iterable[str] | None = None) -> Drift:
    """Nodes the file places that ``view`` shows elsewhere (the order of a topology.yaml node's parts
    does not matter).

    Only nodes the file names are judged: a node it does not name may be placed by its own
    ``NodeName=... Topology=`` or ``slurmd --conf Topology=`` (cloud and dynamic nodes), which no
    reconfigure with this file changes. ``nodes``: the nodes the controller defines; without it a
    node the controller shows nowhere is not judged (it may be one slurm.conf does not define).
    """
    known = set(nodes) if nodes is not None else None
    misplaced: dict[str, tuple[str, str]] = {}
    for node, want in sorted(file_specs.items()):
        if known is not None and node not in known:
            continue
        got = view.specs.get(node)
        if got is None:
            if not view.complete or known is None:
                continue  # slurmrestd: no live place, so the file the controller read places it
            got = ""
        if _parts(got) != _parts(want):
            misplaced[node] = (got, want)
    return Drift(misplaced, view.read_by, view.complete)


@dataclass
class Convergence:
    """What :func:`converge` found and did."""

    drift: Drift
    #: "live", "reconfigure", "held" (policy forbids what was needed), None (nothing to do)
    repair: str | None = None
    #: drift left after the repair (empty: the controller shows the file)
    left: Drift = field(default_factory=Drift)
    errors: list[str] = field(default_factory=list)
    #: the reason a reconfigure was chosen over live moves, or why nothing could be done
    why: str = ""

    @property
    def ok(self) -> bool:
        return not self.left

    def as_dict(self) -> dict[str, object]:
        """The ``--json`` line's ``drift`` field (docs/slurm-pull.md): counts and samples only."""
        return {
            **self.drift.as_dict(),
            "repair": self.repair,
            "left": len(self.left.misplaced),
            "left_sample": {n: list(v) for n, v in list(self.left.misplaced.items())[:SAMPLE]},
            "errors": len(self.errors),
        }

    def line(self) -> str:
        """One bounded sentence for the report."""
        found = f"the controller drifted from the installed file: {self.drift.summary()}, read by {self.drift.read_by}"
        errors = ""
        if self.errors:
            more = f" (+{len(self.errors) - SAMPLE} more)" if len(self.errors) > SAMPLE else ""
            errors = f"; errors: {'; '.join(e[:300] for e in self.errors[:SAMPLE])}{more}"
        if self.ok:
            how = f"by reconfigure because {self.why}" if self.repair == "reconfigure" else "live"
            return f"{found}; repaired {how}"
        left = self.left.summary().replace("placed elsewhere than the file", "still placed elsewhere")
        return (
            f"{found}; controller left inconsistent with the file: {left}{errors}"
            f"{'; ' + self.why if self.why else ''}; the next run repairs it"
        )


def converge(
    file_specs: dict[str, str],
    topologies: list[tuple[str, str]],
    updater: ControllerRepair,
    *,
    allow_live: bool,
    allow_reconfigure: bool,
    nodes: list[str] | None = None,
) -> Convergence:
    """Read the controller through ``updater`` (``topologies``: the file's (name, kind) tree and block
    topologies), and repair drift from ``file_specs``: live moves where
    ``allow_live`` and a move can hold, else a reconfigure where ``allow_reconfigure``, else hold.

    Raises :class:`TopocastError` when the controller cannot be read at all (the caller reports it).
    """

    def read() -> ControllerView:
        return updater.view(topologies)

    started = time.monotonic()
    drift = find_drift(file_specs, read(), nodes)
    drift = Drift(drift.misplaced, drift.read_by, drift.complete, time.monotonic() - started)
    if not drift:
        return Convergence(drift)
    result = Convergence(drift)

    def left() -> Drift:  # read again after a repair: one that cannot be read is not repaired
        try:
            return find_drift(file_specs, read(), nodes)
        except TopocastError as exc:
            result.errors.append(str(exc))
            return drift

    why = _needs_reconfigure(drift, updater) if allow_live else "live moves are off (--live not given)"
    if why is None:
        result.repair = "live"
        by_dest: dict[str, list[str]] = defaultdict(list)
        for node, (_, want) in drift.misplaced.items():
            by_dest[want].append(node)
        for spec, group in sorted(by_dest.items()):
            try:
                updater.move(compact_str(group), spec)
            except TopocastError as exc:
                result.errors.append(str(exc))
        if result.errors:
            why = f"{len(result.errors)} live move(s) failed"
        else:
            result.left = left()
            if result.left:
                why = "the live moves did not take"
    if why is not None:
        result.why = why
        if not allow_reconfigure:
            result.repair = "held"
            result.left = result.left or drift
            result.why = f"ALARM: the repair needs a reconfigure ({why}) but reconfigure is forbidden"
            return result
        result.repair = "reconfigure"
        try:
            updater.reconfigure()
        except TopocastError as exc:
            result.errors.append(str(exc))
            result.left = drift
            return result
        result.left = left()
    return result


def _needs_reconfigure(drift: Drift, updater: ControllerRepair) -> str | None:
    """Why live moves cannot repair ``drift`` for good, or None."""
    try:
        saving = updater.power_saving(list(drift.misplaced))
    except TopocastError:
        return None  # the moves say whether the controller answers; a failed one leads to a reconfigure
    if saving:
        return power_saving_reason(saving)
    return None


def power_saving_reason(nodes: list[str]) -> str:
    """Why power-saving nodes are moved by reconfigure (26.05.5, docs/slurm-rest.md)."""
    sample = ", ".join(nodes[:SAMPLE]) + (", ..." if len(nodes) > SAMPLE else "")
    return (
        f"{len(nodes)} of the nodes are power-saving (State=CLOUD or powered down: {sample}); a live move "
        "is undone when such a node powers down, the place of the file the controller read is kept"
    )
