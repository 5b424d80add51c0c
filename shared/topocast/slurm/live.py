"""Apply a new topology to a running slurmctld without ``scontrol reconfigure`` when that is safe.

Slurm >= 25.05 moves a node on a running controller with
``scontrol update NodeName=<hostlist> Topology=<topology>:<unit>[,...]`` (the
"dynamic topology" of the topology guide). Checked on 26.05 (see
docs/slurm-pull.md for the transcript):

* tree: the unit is the root-first switch path, ``default:root:spine9:leaf9``;
  missing switches on the path are created below an existing one (a new root is
  refused: "Don't know where to add switch"), an existing switch is never moved.
* block: the unit is an existing block, ``default:b2``; a block that does not
  exist yet is refused ("Requested topology configuration is not available").
* topology.yaml: ``tree1:root:s1,block1:b2``; the value **replaces every**
  topology of the node, so a node's spec always lists all topologies it is in.

:func:`plan_live` compares the installed file with the new one. The live path is
taken only if every difference is a node added or moved: no switch or block
deleted, no switch with another parent, no new block, no node removed, the same
topologies and BlockSizes, the controller >= 25.05, and at most ``max_share`` of
the cluster's nodes changing. Otherwise the reason says why the controller must
reconfigure.

:func:`apply_topology` is the whole install: the file is swapped in atomically
first (via :func:`topocast.slurm.install.install_topology`, so a restart reads
what the controller runs), then one ``scontrol update`` per destination, then
``scontrol show topology`` must show exactly the new file. Any failure puts the
nodes back where they were and the previous file back. When reconfigure is
needed but forbidden the agent holds: nothing is written, and the result is a
failure with an alarm-worthy message. After a failed live update (nodes moved
back, file restored) the controller is reconfigured with the previous file when
reconfigure is allowed, because switches the updates created would otherwise
stay in it.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from topocast.errors import TopocastError
from topocast.model.hostlist import compact_str, expand
from topocast.slurm import scontrol as sc
from topocast.slurm.conffile import slurm_conf_nodes
from topocast.slurm.controller import SlurmInstall
from topocast.slurm.converge import ControllerRepair, ControllerView, find_drift, power_saving_reason, shown_specs
from topocast.slurm.install import InstallResult, install_topology, sample_errors, wait_until
from topocast.slurm.scontrol import SlurmControllerError
from topocast.slurm.topofile import TopologyFile
from topocast.slurm.topoyaml import TopologyYaml
from topocast.slurm.validate import format_version, parse_candidate, validate_topology_text, verify_shown

__all__ = [
    "DYNAMIC_TOPOLOGY",
    "LIVE_MAX_SHARE",
    "Costs",
    "LivePlan",
    "MoveOutcome",
    "NodeChanges",
    "NodeUpdater",
    "Placements",
    "ScontrolUpdater",
    "apply_moves",
    "apply_topology",
    "cheaper_plan",
    "node_changes",
    "node_spec",
    "placements",
    "plan_live",
    "power_saving_plan",
]

#: first Slurm with ``scontrol update NodeName=... Topology=...``
DYNAMIC_TOPOLOGY = (25, 5)
#: the most nodes (a share of the cluster) one change may move live before it becomes a reconfigure
#: (``topocast pull --live-max-share``; None anywhere a share is passed means this)
LIVE_MAX_SHARE = 0.1
#: the name topology.conf's topology has in a ``Topology=`` spec
DEFAULT = "default"


@dataclass
class _Shape:
    """What a node update cannot change about one topology."""

    kind: str
    #: tree: switch -> parent (None for a root); block: block -> None
    units: dict[str, str | None] = field(default_factory=dict)
    #: block: names in file order (order is part of a block topology); BlockSizes
    order: list[str] = field(default_factory=list)
    sizes: list[int] | None = None
    #: tree: switches with at least one node below them
    populated: set[str] = field(default_factory=set)


@dataclass
class Placements:
    """Where a topology file puts each node, as the ``Topology=`` spec slurmctld takes."""

    kind: str
    specs: dict[str, str]
    shapes: dict[str, _Shape]
    #: (name, kind, cluster_default) per topology, in file order
    topologies: list[tuple[str, str, bool]]
    #: reasons this file cannot be reached by node updates at all (e.g. a switch with two parents)
    problems: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def _tree(topo: TopologyFile, name: str, parts: dict[str, list[str]], problems: list[str]) -> _Shape:
    shape = _Shape("tree")
    parents: dict[str, list[str]] = defaultdict(list)
    for sw in topo.switches.values():
        for child in sw.children:
            parents[child].append(sw.name)
    for sw_name in topo.switches:
        ups = parents.get(sw_name, [])
        if len(ups) > 1:
            problems.append(f"switch {sw_name!r} of topology {name!r} has {len(ups)} parents")
        shape.units[sw_name] = ups[0] if ups else None
    leaf_of: dict[str, list[str]] = defaultdict(list)
    for sw in topo.switches.values():
        for node in dict.fromkeys(sw.nodes):
            leaf_of[node].append(sw.name)
    spec_of: dict[str, str] = {}  # leaf -> "<topology>:<root-first path>", walked once per leaf
    for node, leaves in leaf_of.items():
        if len(leaves) > 1:
            problems.append(f"node {node!r} is in {len(leaves)} leaf switches of topology {name!r}")
        spec = spec_of.get(leaves[0])
        if spec is None:
            path = [leaves[0]]
            while (up := shape.units.get(path[-1])) is not None and up not in path:
                path.append(up)
            shape.populated.update(path)
            spec = spec_of[leaves[0]] = f"{name}:{':'.join(reversed(path))}"
        parts[node].append(spec)
    return shape


def _block(topo: TopologyFile, name: str, parts: dict[str, list[str]]) -> _Shape:
    shape = _Shape("block", units=dict.fromkeys(topo.blocks), order=list(topo.blocks), sizes=topo.block_sizes)
    for block in topo.blocks.values():
        for node in dict.fromkeys(block.nodes):
            parts[node].append(f"{name}:{block.name}")
    return shape


def placements(text: str, source: str = "topology.conf") -> Placements:
    """Each node's ``Topology=`` spec in a topology.conf (``default:...``) or topology.yaml file."""
    parsed = parse_candidate(text, source)
    parts: dict[str, list[str]] = defaultdict(list)
    problems: list[str] = []
    shapes: dict[str, _Shape] = {}
    topologies: list[tuple[str, str, bool]] = []
    if isinstance(parsed, TopologyYaml):
        kind = "yaml"
        for t in parsed.topologies:
            topologies.append((t.name, t.kind, t.default))
            if t.file is None:
                shapes[t.name] = _Shape("flat")
            elif t.kind == "tree":
                shapes[t.name] = _tree(t.file, t.name, parts, problems)
            else:
                shapes[t.name] = _block(t.file, t.name, parts)
    else:
        kind = parsed.kind
        topologies.append((DEFAULT, kind, True))
        if kind == "tree":
            shapes[DEFAULT] = _tree(parsed, DEFAULT, parts, problems)
        elif kind == "block":
            shapes[DEFAULT] = _block(parsed, DEFAULT, parts)
    specs = {node: ",".join(p) for node, p in parts.items()}
    return Placements(kind, specs, shapes, topologies, problems, list(parsed.errors))


def node_spec(text: str, node: str, source: str = "topology file") -> str:
    """The ``Topology=`` value that puts ``node`` where ``text`` says (for ``slurmd --conf``)."""
    found = placements(text, source)
    if found.errors:
        raise TopocastError(f"{source}: {found.errors[0]}")
    spec = found.specs.get(node)
    if not spec:
        raise TopocastError(f"node {node!r} is in no switch or block of {source}")
    return spec


@dataclass(frozen=True)
class NodeChanges:
    """Where nodes went between two topology files, by their ``Topology=`` specs (one differ for the
    live plan and the pull agent's report)."""

    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    #: node -> (old place, new place); a place is the switch path root first (``spine1:leaf3``) or the
    #: block, each prefixed by its topology's name when the file is a topology.yaml
    moved: dict[str, tuple[str, str]] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.added or self.removed or self.moved)

    def as_dict(self) -> dict[str, object]:
        return {"added": self.added, "removed": self.removed, "moved": {n: list(m) for n, m in self.moved.items()}}

    def summary(self, sample: int = 3) -> str:
        """``1 added (n13), 0 removed, 2 moved (n4: root:spine1:leaf1 -> root:spine2:leaf3, ...)``."""
        if not self:
            return "no node changes place"
        moves = [f"{n}: {old} -> {new}" for n, (old, new) in list(self.moved.items())[:sample]]

        def names(nodes: list[str]) -> str:  # a hostlist when it is short, else a sample: the line stays short
            text = compact_str(nodes)
            if len(text) > 120:
                text = ", ".join(nodes[:sample]) + (", ..." if len(nodes) > sample else "")
            return f" ({text})" if nodes and sample else ""

        parts = [
            f"{len(self.added)} added" + names(self.added),
            f"{len(self.removed)} removed" + names(self.removed),
            f"{len(self.moved)} moved"
            + (f" ({', '.join(moves)}{', ...' if len(self.moved) > sample else ''})" if moves else ""),
        ]
        return ", ".join(parts)


def _diff(old: Placements, new: Placements) -> NodeChanges:
    def place(spec: str) -> str:  # "default:" says nothing in a topology.conf
        return ",".join(p.removeprefix(f"{DEFAULT}:") for p in spec.split(",")) if new.kind != "yaml" else spec

    added = sorted(n for n, spec in new.specs.items() if spec and not old.specs.get(n))
    removed = sorted(n for n, spec in old.specs.items() if spec and not new.specs.get(n))
    moved = {
        n: (place(old.specs[n]), place(spec))
        for n, spec in sorted(new.specs.items())
        if old.specs.get(n) and spec and old.specs[n] != spec
    }
    return NodeChanges(added, removed, moved)


def node_changes(old_text: str | None, new_text: str, source: str = "topology file") -> NodeChanges:
    """Nodes added, removed and moved from ``old_text`` (None: nothing installed) to ``new_text``."""
    new = placements(new_text, source)
    old = placements(old_text, f"{source} (installed)") if old_text is not None else None
    if new.errors:
        raise TopocastError(f"{source}: {new.errors[0]}")
    if old is None or old.errors:  # nothing (readable) was installed: every node is new
        old = Placements(new.kind, {}, {}, [])
    return _diff(old, new)


@dataclass(frozen=True)
class Costs:
    """What the controller part of each path took on earlier runs (seconds; None: not measured yet).

    The pull agent keeps them in its state file per destination (:meth:`learn` after each install), so
    a live change is chosen only while it is cheaper than the reconfigure it replaces: one move call per
    destination plus the check grows with the change, a reconfigure does not (26.05, 10,000 nodes,
    1,000 moved to 100 leaves: live 5.6 s, reconfigure 2.5 s).
    """

    reconfigure: float | None = None
    move_call: float | None = None
    check: float | None = None

    @classmethod
    def from_dict(cls, raw: object) -> Costs:
        data = raw if isinstance(raw, dict) else {}

        def seconds(key: str) -> float | None:
            value = data.get(key)
            return float(value) if isinstance(value, int | float) and 0 <= value < 3600 else None

        return cls(seconds("reconfigure"), seconds("move_call"), seconds("check"))

    def as_dict(self) -> dict[str, float]:
        return {k: round(v, 4) for k, v in vars(self).items() if v is not None}

    def learn(self, timings: dict[str, float]) -> Costs:
        """These costs with what one install measured (the newest measurement wins)."""
        fresh = {k: v for k, v in timings.items() if k in ("reconfigure", "move_call", "check")}
        return Costs(**{**vars(self), **fresh})

    def live(self, calls: int) -> float | None:
        """The estimated seconds of ``calls`` live moves and their check."""
        if self.move_call is None:
            return None
        return self.move_call * calls + (self.check or 0.0)


def cheaper_plan(plan: LivePlan, costs: Costs | None) -> LivePlan:
    """``plan``, or a reconfigure when earlier runs measured it cheaper than this many live calls."""
    if not plan.live or not plan.moves or costs is None or costs.reconfigure is None:
        return plan
    live = costs.live(len(plan.moves))
    if live is None or live <= costs.reconfigure:
        return plan
    return LivePlan(
        False,
        f"{len(plan.changed)} node(s) in {len(plan.moves)} live call(s) would take about {live:.1f} s, "
        f"a reconfigure {costs.reconfigure:.1f} s (both measured on earlier runs)",
    )


@dataclass
class LivePlan:
    #: True: node updates; False: reconfigure
    live: bool
    reason: str
    #: (hostlist, spec) per destination, in a stable order
    moves: list[tuple[str, str]] = field(default_factory=list)
    #: node -> spec before (None: the node was in no topology)
    before: dict[str, str | None] = field(default_factory=dict)
    changed: list[str] = field(default_factory=list)


def _shape_change(old: Placements, new: Placements) -> str | None:
    """Why ``new`` cannot be reached from ``old`` by node updates, or None."""
    if old.kind != new.kind:
        return f"the file changes from {old.kind} to {new.kind}"
    if [t[:2] for t in old.topologies] != [t[:2] for t in new.topologies]:
        return "the set of topologies (or their kinds) changes"
    if [t[2] for t in old.topologies] != [t[2] for t in new.topologies]:
        return "cluster_default changes"
    if new.problems:
        return new.problems[0]
    for name, before in old.shapes.items():
        after = new.shapes[name]
        label = "" if name == DEFAULT else f" of topology {name!r}"
        if before.kind == "block":
            gone = [b for b in before.order if b not in after.units]
            if gone:
                return f"block {gone[0]!r}{label} would be deleted"
            added = [b for b in after.order if b not in before.units]
            if added:
                return f"block {added[0]!r}{label} is new (a node update cannot create a block)"
            if before.order != after.order:
                return f"the order of blocks{label} changes (Slurm pairs adjacent blocks)"
            if before.sizes != after.sizes:
                return f"BlockSizes{label} change"
        elif before.kind == "tree":
            for sw, parent in before.units.items():
                if sw not in after.units:
                    return f"switch {sw!r}{label} would be deleted"
                if after.units[sw] != parent:
                    return f"switch {sw!r}{label} moves from {parent or 'the top'} to {after.units[sw] or 'the top'}"
            roots = [sw for sw, up in after.units.items() if sw not in before.units and up is None]
            if roots:
                # 26.05: "Don't know where to add switch X" -- dynamic switches hang below a known one
                return f"new root switch {roots[0]!r}{label} (a node update cannot add a root)"
            empty = [sw for sw in after.units if sw not in before.units and sw not in after.populated]
            if empty:
                return f"new switch {empty[0]!r}{label} has no nodes (a node update creates switches on its path only)"
    return None


def plan_live(
    old_text: str | None,
    new_text: str,
    version: tuple[int, int] | None,
    *,
    max_share: float | None = None,
    source: str = "topology file",
    defined: list[str] | None = None,
) -> LivePlan:
    """Decide between node updates and a reconfigure (see the module doc for the rules)."""
    if version is None or version < DYNAMIC_TOPOLOGY:
        return LivePlan(
            False,
            f"slurmctld {format_version(version)} has no dynamic topology "
            f"(scontrol update Topology= needs >= {format_version(DYNAMIC_TOPOLOGY)})",
        )
    if old_text is None:
        return LivePlan(False, "no topology file is installed yet")
    old = placements(old_text, f"{source} (installed)")
    new = placements(new_text, source)
    if old.errors:
        return LivePlan(False, f"the installed file does not parse ({old.errors[0]})")
    reason = _shape_change(old, new)
    if reason:
        return LivePlan(False, reason)
    diff = _diff(old, new)
    if diff.removed:
        return LivePlan(False, f"{len(diff.removed)} node(s) leave the topology: {compact_str(diff.removed)}")
    changed = sorted([*diff.added, *diff.moved])
    if not changed:
        return LivePlan(True, "no node changes place (the file differs in form only)")
    if defined is not None:
        known = set(defined)
        unknown = [n for n in changed if n not in known]
        if unknown:
            return LivePlan(False, f"{len(unknown)} node(s) are not defined in slurm.conf: {compact_str(unknown)}")
    total = len(set(new.specs) | set(defined or ()))
    share = len(changed) / max(1, total)
    max_share = LIVE_MAX_SHARE if max_share is None else max_share
    if share > max_share:
        return LivePlan(
            False,
            f"{len(changed)} of {total} nodes change place ({share:.1%}), "
            f"above the live-update limit of {max_share:.1%}",
        )
    by_dest: dict[str, list[str]] = defaultdict(list)
    for node in changed:
        by_dest[new.specs[node]].append(node)
    moves = [(compact_str(nodes), spec) for spec, nodes in sorted(by_dest.items())]
    added = len(diff.added)
    what = f"{len(changed) - added} moved, {added} added" if added else f"{len(changed)} moved"
    return LivePlan(
        True,
        f"only nodes added or moved ({what}, {share:.1%} of {total}); no switch or block deleted",
        moves,
        {n: old.specs.get(n) for n in changed},
        changed,
    )


class NodeUpdater(ControllerRepair, Protocol):
    """How node moves reach a running controller: ``scontrol update`` here, slurmrestd in
    :mod:`topocast.slurm.rest`. The moves, the view, the reconfigure and the power-saving read are
    :class:`~topocast.slurm.converge.ControllerRepair`'s; every method raises :class:`TopocastError`
    with the cause."""

    #: what one move is called in messages ("scontrol update", "slurmrestd POST .../nodes/")
    call_name: str
    #: the failed step's name when the check after the moves fails ("show-topology", "read-back")
    check_step: str
    #: True: the controller is this host's, reached by ``scontrol`` (the install's own reconfigure and
    #: check apply); False: every call goes through this updater, a reconfigure too (slurmrestd)
    uses_scontrol: bool

    def version(self) -> tuple[int, int] | None:
        """The controller's (major, minor) Slurm version."""
        ...

    def defined(self) -> list[str] | None:
        """Every node the controller knows (None: unknown, take slurm.conf's)."""
        ...

    def check(self, plan: LivePlan, text: str, known: list[str]) -> list[str]:
        """After the moves: differences between what the controller runs and ``text`` / ``plan``."""
        ...


@dataclass
class ScontrolUpdater:
    """Node moves by ``scontrol update``; the check is ``scontrol show topology`` against the file."""

    install: SlurmInstall
    slurm_conf: Path | None = None
    source: str = "topology file"
    call_name: str = "scontrol update"
    check_step: str = "show-topology"
    uses_scontrol: bool = True

    def _env(self) -> dict[str, str] | None:
        if self.slurm_conf is None:
            return None
        return {**os.environ, "SLURM_CONF": self.install.inside(self.slurm_conf)}

    def version(self) -> tuple[int, int] | None:
        return self.install.version()

    def defined(self) -> list[str] | None:
        return slurm_conf_nodes(self.slurm_conf) if self.slurm_conf is not None else None

    def move(self, hosts: str, spec: str) -> None:
        sc.update_node_topology(hosts, spec, self.install.scontrol_command, self._env())

    def check(self, plan: LivePlan, text: str, known: list[str]) -> list[str]:
        return verify_shown(text, self.install.scontrol_command, self._env(), known, self.source)

    def reconfigure(self) -> None:
        sc.reconfigure(self.install.scontrol_command, self._env())
        if not wait_until(lambda: sc.ping(self.install.scontrol_command, self._env(), timeout=5.0), 10.0):
            raise SlurmControllerError("the controller did not answer scontrol ping within 10 s after reconfigure")

    def view(self, topologies: list[tuple[str, str]]) -> ControllerView:
        specs: dict[str, list[str]] = defaultdict(list)
        for name, kind in topologies:
            shown = sc.show_topology_text(
                self.install.scontrol_command, self._env(), name=None if name == DEFAULT else name
            )
            for node, spec in shown_specs(name, kind, shown).items():
                specs[node].append(spec)
        return ControllerView({n: ",".join(p) for n, p in specs.items()}, True, "scontrol show topology")

    def power_saving(self, nodes: list[str]) -> list[str]:
        if not nodes:
            return []
        return sorted(sc.power_saving_nodes(compact_str(nodes), self.install.scontrol_command, self._env()))


@dataclass
class MoveOutcome:
    """What :func:`apply_moves` did: all moves and the check passed, or where it stopped and what was undone."""

    ok: bool
    #: "update" (a move failed) or the updater's ``check_step`` (the controller does not show the plan)
    step: str | None = None
    failure: str | None = None
    #: moves that could not be undone (empty: every moved node is back)
    undo_failures: list[str] = field(default_factory=list)
    #: the nodes of those moves: they may still be at their new place
    not_back: list[str] = field(default_factory=list)
    #: seconds per move call and for the check, when all went through
    timings: dict[str, float] = field(default_factory=dict)


def _revert(plan: LivePlan, applied: int, updater: NodeUpdater) -> tuple[list[str], list[str]]:
    """Put the nodes of the first ``applied`` moves back; (what could not be undone, the nodes not back)."""
    back: dict[str, list[str]] = defaultdict(list)
    moved = {n for hosts, _ in plan.moves[:applied] for n in expand(hosts)}
    for node in sorted(moved):
        back[plan.before.get(node) or ""].append(node)
    failures: list[str] = []
    not_back: list[str] = []
    for spec, nodes in sorted(back.items()):
        try:
            updater.move(compact_str(nodes), spec)
        except TopocastError as exc:
            failures.append(str(exc))
            not_back += nodes
    return failures, not_back


def apply_moves(plan: LivePlan, updater: NodeUpdater, text: str, known: list[str]) -> MoveOutcome:
    """One move per destination, then the updater's check; on any failure every moved node goes back.

    A failed call may have moved part of its hostlist (a bulk update is not atomic), so it is undone too.
    """
    applied = 0
    started = time.monotonic()
    for hosts, spec in plan.moves:
        applied += 1
        try:
            updater.move(hosts, spec)
        except TopocastError as exc:
            return MoveOutcome(False, "update", str(exc), *_revert(plan, applied, updater))
    checking = time.monotonic()
    try:
        problems = updater.check(plan, text, known)
    except TopocastError as exc:
        problems = [str(exc)]
    if problems:
        failure = "after the node updates " + "; ".join(problems[:3])
        return MoveOutcome(False, updater.check_step, failure, *_revert(plan, applied, updater))
    timings = {"move_call": (checking - started) / max(1, applied), "check": time.monotonic() - checking}
    return MoveOutcome(True, timings=timings)


def apply_topology(
    content: bytes,
    dest: Path,
    *,
    expected_sha256: str,
    validate: bool = True,
    slurm_conf: Path | None = None,
    install: SlurmInstall | None = None,
    max_share: float | None = None,
    allow_reconfigure: bool = True,
    updater: NodeUpdater | None = None,
    costs: Costs | None = None,
) -> InstallResult:
    """Install ``content`` at ``dest`` and make the running controller use it: live if possible, else reconfigure.

    ``updater`` carries the live moves (default: ``scontrol update`` on ``install``); the file
    install and the validation always use ``install``, a reconfigure too unless the updater is
    slurmrestd's. ``costs``: what earlier runs measured (:func:`cheaper_plan`); the result's
    ``timings`` hold this run's.
    """
    dest = Path(dest)
    digest = hashlib.sha256(content).hexdigest()
    if digest != expected_sha256.strip().lower():
        return InstallResult(
            False,
            "refused",
            dest,
            digest,
            f"{dest}: step sha256 failed: content sha256 {digest} does not match expected {expected_sha256}; "
            "nothing written",
            failed_step="sha256",
        )
    install = install or SlurmInstall.find()
    updater = updater or ScontrolUpdater(install, slurm_conf, str(dest))
    try:
        old = dest.read_bytes()
    except OSError:
        old = None
    text = content.decode("utf-8", errors="replace")
    defined = slurm_conf_nodes(slurm_conf) if slurm_conf is not None else updater.defined()
    if old == content:
        plan = LivePlan(True, "unchanged")
    else:
        old_text = old.decode("utf-8", errors="replace") if old is not None else None
        plan = plan_live(old_text, text, updater.version(), max_share=max_share, source=str(dest), defined=defined)
    plan, warning = power_saving_plan(plan, updater, allow_reconfigure)
    if allow_reconfigure:
        plan = cheaper_plan(plan, costs)

    if not plan.live:
        if not allow_reconfigure:
            if validate and old != content:
                # a file that would be refused anyway is reported as such, not as a hold
                check = validate_topology_text(content, slurm_conf, source=f"{dest} (candidate)", install=install)
                if not check.ok:
                    return InstallResult(
                        False,
                        "refused",
                        dest,
                        digest,
                        f"{dest}: step validate failed: {'; '.join(check.errors[:5])}; nothing written",
                        failed_step="validate",
                        validation=check,
                    )
            return InstallResult(
                False,
                "held",
                dest,
                digest,
                f"{dest}: ALARM: the new topology (sha256 {digest[:12]}) needs scontrol reconfigure ({plan.reason}) "
                "but reconfigure is forbidden; holding: the installed file and the controller are unchanged",
                failed_step="plan",
                applied="held",
                why=plan.reason,
            )
        if not updater.uses_scontrol:  # REST only means REST only: never a silent `scontrol reconfigure`
            return _reconfigure_via(updater, content, old, dest, expected_sha256, validate, slurm_conf, install, plan)
        result = install_topology(
            content,
            dest,
            expected_sha256=expected_sha256,
            validate=validate,
            reconfigure=True,
            slurm_conf=slurm_conf,
            slurm=install,
        )
        result.applied = "reconfigure" if result.reconfigured else None
        result.why = plan.reason
        if result.ok and result.action == "installed":
            result.message += f"; by reconfigure because {plan.reason}"
        return result

    # Live: the file first (so a restart agrees), then the node updates, then check.
    result = install_topology(
        content,
        dest,
        expected_sha256=expected_sha256,
        validate=validate,
        reconfigure=False,
        slurm_conf=slurm_conf,
        slurm=install,
    )
    if not result.ok or result.action == "unchanged":
        return result
    known = defined if defined is not None else sorted(set(placements(text).specs) | set(plan.before))
    moved = apply_moves(plan, updater, text, known)
    if moved.ok:
        calls = len(plan.moves)
        result.timings = moved.timings
        result.applied = "live"
        result.why = plan.reason
        result.message = (
            f"{dest}: installed (sha256 {result.sha256[:12]}{result.checked}) and applied live: "
            f"{len(plan.changed)} node(s) "
            f"with {calls} {updater.call_name} call{'s' if calls != 1 else ''}, no reconfigure ({plan.reason})"
            f"{warning}"
        )
        return result
    restored = "no previous file existed"
    if old is not None:
        back = install_topology(
            old, dest, expected_sha256=hashlib.sha256(old).hexdigest(), validate=False, reconfigure=False, slurm=install
        )
        restored = "restored the previous file" if back.ok else f"restoring the previous file failed: {back.message}"
    left = "; nodes moved back" if not moved.undo_failures else ""
    reread = False
    if allow_reconfigure and old is not None:
        # switches the updates created stay in the controller until it rereads the (restored) file
        try:
            updater.reconfigure()
            left += ", controller reconfigured with the previous file"
            reread = True
        except TopocastError as exc:
            left += f"; reconfigure with the previous file failed ({exc})"
    result.ok = False
    result.failed_step = moved.step
    result.applied = "live"
    result.why = plan.reason
    result.message = f"{dest}: step {moved.step} failed: {moved.failure}; {restored}{left}"
    # a reconfigure with the restored file puts every node back where that file says, whatever the undo did
    result.action = "inconsistent" if moved.undo_failures and not reread else "rolled_back"
    if result.action == "inconsistent":
        result.message += "; " + not_undone(moved)
    return result


def not_undone(moved: MoveOutcome) -> str:
    """``controller left inconsistent: 6 node(s) may still be at their new place (n1, n2, n3, ...): <error>
    (+1 more)``: a sample of three nodes and errors, with counts, never the whole list."""
    nodes = moved.not_back
    sample = ", ".join(nodes[:3]) + (", ..." if len(nodes) > 3 else "")
    errors = sample_errors(moved.undo_failures)
    return (
        f"controller left inconsistent: {len(nodes)} node(s) may still be at their new place ({sample}); "
        f"moving them back failed: {errors}; the next run reads the controller and repairs it"
    )


def power_saving_plan(plan: LivePlan, updater: NodeUpdater, allow_reconfigure: bool) -> tuple[LivePlan, str]:
    """A live plan that moves power-saving nodes becomes a reconfigure (26.05.5: their live place is
    undone at power-down; a reconfigure with the file makes it survive). With reconfigure forbidden
    the moves stay live, with a warning: the next run's drift check puts back a node that went back."""
    if not plan.live or not plan.changed:
        return plan, ""
    try:
        saving = updater.power_saving(plan.changed)
    except TopocastError as exc:
        return plan, f"; WARNING: could not read the moved nodes' power state ({exc})"
    if not saving:
        return plan, ""
    reason = power_saving_reason(saving)
    if allow_reconfigure:
        return LivePlan(False, reason), ""
    return plan, f"; WARNING: {reason}; reconfigure is forbidden: the next run repairs a node that went back"


def _reconfigure_via(
    updater: NodeUpdater,
    content: bytes,
    old: bytes | None,
    dest: Path,
    expected_sha256: str,
    validate: bool,
    slurm_conf: Path | None,
    install: SlurmInstall,
    plan: LivePlan,
) -> InstallResult:
    """Install the file, then reconfigure through ``updater`` (slurmrestd) and read the controller back;
    on failure restore the previous file and reconfigure with it."""
    result = install_topology(
        content,
        dest,
        expected_sha256=expected_sha256,
        validate=validate,
        reconfigure=False,
        slurm_conf=slurm_conf,
        slurm=install,
    )
    result.why = plan.reason
    if not result.ok or result.action == "unchanged":
        return result
    text = content.decode("utf-8", errors="replace")
    found = placements(text, str(dest))
    kinds = [(name, kind) for name, kind, _ in found.topologies if kind in ("tree", "block")]
    step, failure = "reconfigure", ""
    started = time.monotonic()
    try:
        updater.reconfigure()
        step = updater.check_step
        drift = find_drift(found.specs, updater.view(kinds), updater.defined())
        failure = f"after the reconfigure {drift.summary()}" if drift else ""
    except TopocastError as exc:
        failure = str(exc)
    if not failure:
        result.timings = {"reconfigure": time.monotonic() - started}
        result.applied = "reconfigure"
        result.reconfigured = True
        result.message = (
            f"{dest}: installed and reconfigured through {updater.call_name.split()[0]} "
            f"(sha256 {result.sha256[:12]}{result.checked}); by reconfigure because {plan.reason}"
        )
        return result
    restored, reread = "no previous file existed", False
    if old is not None:
        back = install_topology(
            old, dest, expected_sha256=hashlib.sha256(old).hexdigest(), validate=False, reconfigure=False, slurm=install
        )
        restored = "restored the previous file" if back.ok else f"restoring the previous file failed: {back.message}"
        try:
            updater.reconfigure()
            restored += ", controller reconfigured with it"
            reread = back.ok
        except TopocastError as exc:
            restored += f"; reconfigure with it failed ({exc})"
    result.ok = False
    result.failed_step = step
    result.applied = "reconfigure"
    result.action = "rolled_back" if reread else "inconsistent"
    result.message = f"{dest}: step {step} failed: {failure}; {restored}"
    if not reread:
        result.message += "; controller left inconsistent: it may run either file; the next run repairs it"
    return result
