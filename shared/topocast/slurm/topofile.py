"""Parse a Slurm topology.conf (``topology/tree`` or ``topology/block``) and check its structure.

These checks do not depend on slurmctld's log wording. They cover what
slurmctld 22.05 refuses to start with (duplicate switch, unknown child, a key
it does not know, a cycle, a switch with both or neither of Nodes/Switches)
and what it accepts but should never ship: no switches at all, a node in two
leaf switches, nodes of slurm.conf that no switch reaches, names longer than
the documented 64 characters. Messages start with ``file:line:``.
"""

from __future__ import annotations

import itertools
import sys
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from topocast.errors import HostlistError, UnsafeNameError
from topocast.model.hostlist import EXPAND_LIMIT, compact_str, count, expand, name_budget
from topocast.model.names import MAX_SWITCH_NAME, all_safe, check_name
from topocast.slurm.conffile import ConfLine, describe_char, parse_conf_text

#: ends the warnings that matter only to Slurm before 25.05 (a newer controller's check drops them)
OLDER_SLURM_ONLY = "(Slurm before 25.05 rejects such blocks)"

#: keys allowed after SwitchName= / BlockName= on the same line (a repeated head key is reported as a duplicate)
_SWITCH_KEYS = {"switchname", "switches", "nodes", "linkspeed"}
_BLOCK_KEYS = {"blockname", "nodes"}


@dataclass
class Switch:
    name: str
    lineno: int
    nodes: list[str] = field(default_factory=list)
    children: list[str] = field(default_factory=list)


@dataclass
class Block:
    name: str
    lineno: int
    nodes: list[str] = field(default_factory=list)


@dataclass
class TopologyFile:
    """What a topology.conf says, plus every problem found while reading it."""

    source: str
    kind: Literal["tree", "block", "empty"] = "empty"
    switches: dict[str, Switch] = field(default_factory=dict)
    blocks: dict[str, Block] = field(default_factory=dict)
    block_sizes: list[int] | None = None
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    #: read by Slurm >= 25.05 only (topology.yaml): leaf switches without nodes are allowed
    dynamic: bool = False

    def check_record_name(self, where: str, kind: str, name: str) -> None:
        _check_record_name(self, where, kind, name)

    def node_names(self) -> list[str]:
        """Every node the file names, first occurrence order."""
        records = self.switches.values() if self.kind == "tree" else self.blocks.values()
        return list(dict.fromkeys(n for r in records for n in r.nodes))

    def roots(self) -> list[str]:
        children = {c for sw in self.switches.values() for c in sw.children}
        return [name for name in self.switches if name not in children]

    def summary(self) -> str:
        nodes = len(self.node_names())
        if self.kind == "tree":
            roots = len(self.roots())
            return (
                f"topology/tree: {len(self.switches)} switches, {nodes} nodes, {roots} root{'s' if roots != 1 else ''}"
            )
        if self.kind == "block":
            sizes = ",".join(map(str, self.block_sizes)) if self.block_sizes else "default"
            return f"topology/block: {len(self.blocks)} blocks, {nodes} nodes, BlockSizes={sizes}"
        return "empty: no switches or blocks"


def parse_topology(text: str, source: str = "topology.conf") -> TopologyFile:
    """Read the records of a topology.conf; syntax problems land in ``errors``."""
    topo = TopologyFile(source=source)
    with name_budget(what=source):  # one node-name cap for the whole file, not per line
        for line in parse_conf_text(text):
            _read_line(topo, line)
    if topo.switches and (topo.blocks or topo.block_sizes is not None):
        topo.errors.append(f"{source}: mixes SwitchName (topology/tree) and BlockName (topology/block) lines")
    topo.kind = "tree" if topo.switches else "block" if topo.blocks or topo.block_sizes is not None else "empty"
    return topo


def _read_line(topo: TopologyFile, line: ConfLine) -> None:
    where = f"{topo.source}:{line.lineno}"
    if line.bad_chars:
        number, col, ch = line.bad_chars[0]
        more = f" (+{len(line.bad_chars) - 1} more on this line)" if len(line.bad_chars) > 1 else ""
        topo.errors.append(
            f"{topo.source}:{number}:{col}: character {describe_char(ch)} in a key or value{more}; Slurm names and "
            "values are printable ASCII, and Slurm splits lines at \\n only, so this line means something else to it"
        )
        return
    for word in line.junk:
        if word.lower() == "include":
            topo.errors.append(f"{where}: 'Include' is not allowed: a topology.conf to install must be self-contained")
            return
        topo.errors.append(f"{where}: cannot read {word!r}: expected Key=Value (slurmctld fails on this)")
    if not line.pairs:
        return
    keys = line.keys_lower()
    for key in sorted({k for k in keys if keys.count(k) > 1}):
        topo.errors.append(f"{where}: key {key!r} is given twice on one line (slurmctld silently keeps the last)")
    first_key, first_value = line.pairs[0]
    head = first_key.lower()
    if head == "switchname":
        _read_switch(topo, line, where, first_value)
    elif head == "blockname":
        _read_block(topo, line, where, first_value)
    elif head == "blocksizes":
        _read_block_sizes(topo, line, where, first_value)
    else:
        topo.errors.append(
            f"{where}: line starts with unknown key {first_key!r}; expected SwitchName=, BlockName= or "
            "BlockSizes= (slurmctld: 'Parsing error at unrecognized key', fatal)"
        )


def _check_record_name(topo: TopologyFile, where: str, kind: str, name: str) -> None:
    if len(name) > MAX_SWITCH_NAME:
        topo.errors.append(
            f"{where}: {kind} {name[:40]!r}... is {len(name)} characters; topology.conf(5) allows "
            f"{MAX_SWITCH_NAME} (slurmctld 22.05 accepts it, later releases may not)"
        )
        return
    try:
        check_name(name, kind, where, MAX_SWITCH_NAME)
    except UnsafeNameError as exc:
        topo.errors.append(f"{where}: {exc}")


def block_sizes_problems(sizes: list[int]) -> list[str]:
    """Why slurmctld would refuse these BlockSizes (26.05: fatal 'Invalid BlockSizes value'), or []."""
    problems = []
    if not sizes:
        return ["is empty"]
    for size in sizes:
        if size <= 0:
            problems.append(f"{size} is not a positive integer (slurmctld 26.05: fatal 'Invalid BlockSizes value')")
    for lower, upper in itertools.pairwise(sizes):
        if lower <= 0:
            continue
        ratio, rest = divmod(upper, lower)
        if rest or ratio < 2 or ratio & (ratio - 1):
            problems.append(
                f"{upper} is not a power-of-two multiple of {lower} (each size must be the previous one times "
                "2, 4, 8...; slurmctld 26.05: fatal 'Invalid BlockSizes value')"
            )
    return problems


def read_hostlist(topo: TopologyFile, where: str, key: str, value: str) -> list[str]:
    return _hostlist(topo, where, key, value)


def _hostlist(topo: TopologyFile, where: str, key: str, value: str) -> list[str]:
    try:
        return expand(value)
    except HostlistError as exc:
        topo.errors.append(f"{where}: bad {key}= hostlist: {exc}")
        return []


def _read_switch(topo: TopologyFile, line: ConfLine, where: str, name: str) -> None:
    if not name:
        topo.errors.append(f"{where}: SwitchName= has no value")
        return
    _check_record_name(topo, where, "switch name", name)
    for key, value in line.pairs[1:]:
        if key.lower() not in _SWITCH_KEYS:
            topo.errors.append(
                f"{where}: unknown key {key!r} on SwitchName={name} (slurmctld: 'Parsing error at "
                "unrecognized key', fatal); known: Switches, Nodes, LinkSpeed"
            )
        elif key.lower() == "linkspeed" and not value.isdigit():
            topo.errors.append(f"{where}: LinkSpeed={value!r} of switch {name} is not a number (slurmctld: fatal)")
    if name in topo.switches:
        first = topo.switches[name].lineno
        topo.errors.append(f"{where}: switch {name!r} is defined twice (first on line {first}; slurmctld: fatal)")
        return
    sw = Switch(name=name, lineno=line.lineno)
    nodes, children = line.get("Nodes"), line.get("Switches")
    if nodes:
        sw.nodes = _hostlist(topo, where, "Nodes", nodes)
    if children:
        sw.children = _hostlist(topo, where, "Switches", children)
    topo.switches[name] = sw


def _read_block(topo: TopologyFile, line: ConfLine, where: str, name: str) -> None:
    if not name:
        topo.errors.append(f"{where}: BlockName= has no value")
        return
    _check_record_name(topo, where, "block name", name)
    for key, _ in line.pairs[1:]:
        if key.lower() not in _BLOCK_KEYS:
            topo.errors.append(f"{where}: unknown key {key!r} on BlockName={name}; known: Nodes")
    if name in topo.blocks:
        first = topo.blocks[name].lineno
        topo.errors.append(f"{where}: block {name!r} is defined twice (first on line {first})")
        return
    nodes = line.get("Nodes")
    topo.blocks[name] = Block(name=name, lineno=line.lineno, nodes=_hostlist(topo, where, "Nodes", nodes or ""))


def _read_block_sizes(topo: TopologyFile, line: ConfLine, where: str, value: str) -> None:
    if len(line.pairs) > 1:
        topo.errors.append(f"{where}: BlockSizes= must be alone on its line")
    if topo.block_sizes is not None:
        topo.errors.append(f"{where}: BlockSizes= is given more than once")
        return
    sizes: list[int] = []
    for part in value.split(","):
        if not part.strip().isdigit() or int(part) <= 0:
            topo.errors.append(
                f"{where}: BlockSizes={value!r}: {part.strip()!r} is not a positive integer "
                "(slurmctld 26.05: fatal 'Invalid BlockSizes value')"
            )
            topo.block_sizes = []
            return
        sizes.append(int(part))
    _set_block_sizes(topo, where, value, sizes)


def _set_block_sizes(topo: TopologyFile, where: str, value: str, sizes: list[int]) -> None:
    topo.errors.extend(f"{where}: BlockSizes={value}: {problem}" for problem in block_sizes_problems(sizes))
    topo.block_sizes = sizes


def topology_from_records(
    source: str,
    switches: Sequence[tuple[int, str, str, Sequence[str]]] = (),
    blocks: Sequence[tuple[int, str, Sequence[str]]] = (),
    block_sizes: tuple[int, Sequence[int]] | None = None,
) -> TopologyFile | None:
    """What :func:`parse_topology` reads from a file that says exactly these records, without its text.

    ``switches``: the ``SwitchName`` lines (line number, name, the ``Switches=`` hostlist, the nodes of
    ``Nodes=``); ``blocks``: the ``BlockName`` lines (line number, name, nodes); ``block_sizes``: the
    ``BlockSizes`` line (line number, sizes). A renderer knows the nodes of each hostlist it wrote, so
    its 100k-node files are checked without expanding them again (the fabric view's Slurm checks);
    everything else goes through the reader's own checks.

    None when the text might read otherwise (then parse it): a name outside the safe set (letters,
    digits and ``. _ - + @ /``: no such character ends or splits a value, and a hostlist of such names
    expands back to exactly them), a name listed twice (the reader's lists come in hostlist order, which
    its messages about duplicates would show), more names than a file may expand to, both switches and
    blocks, or BlockSizes other than positive integers.
    """
    node_lists = [r[3] for r in switches] + [r[2] for r in blocks]
    names = [r[1] for r in switches] + [r[1] for r in blocks]
    sizes = list(block_sizes[1]) if block_sizes is not None else []
    if (switches and (blocks or block_sizes is not None)) or (block_sizes is not None and min(sizes, default=0) <= 0):
        return None  # not one kind of file, or sizes the reader would word as it reads them
    if len(set(names)) != len(names) or not _each_node_once(node_lists):
        return None
    nodes = list(itertools.chain.from_iterable(node_lists))
    if not all_safe(names, sys.maxsize) or not all_safe(nodes, sys.maxsize, cached=False):
        return None
    try:
        total = len(nodes) + sum(count(r[2]) for r in switches if r[2])
    except HostlistError:
        return None
    if total > EXPAND_LIMIT:
        return None
    topo = TopologyFile(source=source)
    with name_budget(what=source):
        for lineno, name, children, listed in switches:
            where = f"{source}:{lineno}"
            _check_record_name(topo, where, "switch name", name)
            children_listed = _hostlist(topo, where, "Switches", children) if children else []
            topo.switches[name] = Switch(name, lineno, list(listed), children_listed)
    for lineno, name, listed in blocks:
        _check_record_name(topo, f"{source}:{lineno}", "block name", name)
        topo.blocks[name] = Block(name, lineno, list(listed))
    if block_sizes is not None:
        _set_block_sizes(topo, f"{source}:{block_sizes[0]}", ",".join(map(str, sizes)), sizes)
    topo.kind = "tree" if topo.switches else "block" if topo.blocks or topo.block_sizes is not None else "empty"
    return topo


# ----- structural checks ------------------------------------------------------------------
def check_structure(topo: TopologyFile, defined_nodes: list[str] | None = None) -> None:
    """Add graph-level errors and warnings to ``topo``.

    ``defined_nodes`` are the nodes of slurm.conf; without it the file's own
    nodes are the node list, so coverage checks are skipped.
    """
    if topo.kind == "tree":
        _check_tree(topo)
    elif topo.kind == "block":
        _check_blocks(topo)
    else:
        topo.errors.append(
            f"{topo.source}: no switches or blocks defined; slurmctld >= 25.11 refuses to start ('No switches "
            "configured, failed to create context'), older ones run with topology-aware scheduling silently off"
        )
        return
    if defined_nodes is not None:
        _check_coverage(topo, defined_nodes)


def _check_tree(topo: TopologyFile) -> None:
    src = topo.source
    parents: dict[str, list[str]] = defaultdict(list)
    # the usual file names each node once: then no switch lists one twice and none is in two leaves
    once = _each_node_once(sw.nodes for sw in topo.switches.values())
    for sw in topo.switches.values():
        where = f"{src}:{sw.lineno}"
        if sw.nodes and sw.children:
            topo.errors.append(
                f"{where}: switch {sw.name!r} has both Switches= and Nodes= (slurmctld 22.05: fatal); "
                "attach nodes to leaf switches only"
            )
        if not sw.nodes and not sw.children and not topo.dynamic:
            topo.errors.append(
                f"{where}: switch {sw.name!r} has neither Switches= nor Nodes= (slurmctld before 25.05: fatal)"
            )
        for child in sw.children:
            if child not in topo.switches:
                topo.errors.append(
                    f"{where}: switch {sw.name!r} lists unknown child switch {child!r} (slurmctld: fatal)"
                )
            else:
                parents[child].append(sw.name)
        dup = [] if once else sorted(n for n, k in Counter(sw.nodes).items() if k > 1)  # not list.count: quadratic
        if dup:
            topo.warnings.append(f"{where}: switch {sw.name!r} lists nodes more than once: {compact_str(dup)}")
    for child, ups in parents.items():
        if len(ups) > 1:
            topo.warnings.append(
                f"{src}:{topo.switches[child].lineno}: switch {child!r} has {len(ups)} parents "
                f"({', '.join(ups)}); Slurm accepts this but the tree is ambiguous"
            )
    cycle = _find_cycle(topo)
    if cycle:
        topo.errors.append(
            f"{src}: switches form a cycle: {' -> '.join(cycle)} (slurmctld: 'Switch configuration is not a tree')"
        )
    # A node under two leaves: Slurm keeps both and job placement becomes arbitrary.
    leaves_of: dict[str, list[str]] = defaultdict(list)
    for sw in () if once else topo.switches.values():
        for node in dict.fromkeys(sw.nodes):
            leaves_of[node].append(sw.name)
    by_leaves: dict[tuple[str, ...], list[str]] = defaultdict(list)
    for node, leaves in leaves_of.items():
        if len(leaves) > 1:
            by_leaves[tuple(leaves)].append(node)
    for shared_leaves, nodes in by_leaves.items():
        topo.errors.append(
            f"{src}: node{'s' if len(nodes) > 1 else ''} {compact_str(nodes)} "
            f"{'are' if len(nodes) > 1 else 'is'} in more than one leaf switch: "
            + ", ".join(f"{name} (line {topo.switches[name].lineno})" for name in shared_leaves)
        )
    roots = topo.roots()
    if len(roots) > 1 and not cycle:
        topo.warnings.append(
            f"{src}: {len(roots)} root switches ({', '.join(roots)}): no switch reaches every node, "
            "so no job can span these trees"
        )


def _each_node_once(node_lists: Iterable[Sequence[str]]) -> bool:
    """No node name twice in all of ``node_lists`` together (one C-level pass instead of one per record)."""
    lists = list(node_lists)
    return len(set(itertools.chain.from_iterable(lists))) == sum(map(len, lists))


def _find_cycle(topo: TopologyFile) -> list[str]:
    """One cycle of switch names (first repeated at the end), or []."""
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    path: list[str] = []

    def visit(name: str) -> list[str]:
        state[name] = 1
        path.append(name)
        for child in topo.switches[name].children:
            if child not in topo.switches:
                continue
            if state.get(child) == 1:
                return [*path[path.index(child) :], child]
            if child not in state:
                found = visit(child)
                if found:
                    return found
        path.pop()
        state[name] = 2
        return []

    for name in topo.switches:
        if name not in state:
            found = visit(name)
            if found:
                return found
    return []


def _check_blocks(topo: TopologyFile) -> None:
    src = topo.source
    if not topo.blocks:
        topo.errors.append(
            f"{src}: BlockSizes= without any BlockName= line (slurmctld >= 25.11: fatal 'No blocks configured')"
        )
        return
    owner: dict[str, list[str]] = defaultdict(list)
    for block in () if _each_node_once(b.nodes for b in topo.blocks.values()) else topo.blocks.values():
        for node in dict.fromkeys(block.nodes):
            owner[node].append(block.name)
    by_blocks: dict[tuple[str, ...], list[str]] = defaultdict(list)
    for node, blocks in owner.items():
        if len(blocks) > 1:
            by_blocks[tuple(blocks)].append(node)
    for shared_blocks, nodes in by_blocks.items():
        topo.errors.append(f"{src}: {compact_str(nodes)} in more than one block: {', '.join(shared_blocks)}")
    base = topo.block_sizes[0] if topo.block_sizes else None
    for block in topo.blocks.values():
        where = f"{src}:{block.lineno}"
        if not block.nodes:
            topo.warnings.append(f"{where}: block {block.name!r} has no nodes {OLDER_SLURM_ONLY}")
        elif base is not None and len(block.nodes) < base:
            topo.warnings.append(
                f"{where}: block {block.name!r} has {len(block.nodes)} nodes, fewer than the base block size "
                f"{base} {OLDER_SLURM_ONLY}"
            )


def _check_coverage(topo: TopologyFile, defined: list[str]) -> None:
    in_file = set(topo.node_names())
    missing = [n for n in defined if n not in in_file]
    unit = "switch" if topo.kind == "tree" else "block"
    if missing:
        # Slurm starts and runs those nodes; only no job spans them and other nodes. topocast's own tree
        # leaves out nodes without fabric (CPU nodes), as a block file leaves out nodes without a domain.
        topo.warnings.append(
            f"{topo.source}: {len(missing)} node(s) of slurm.conf are in no {unit}: {compact_str(missing)}"
        )
    known = set(defined)
    unknown = [n for n in topo.node_names() if n not in known]
    if unknown:
        topo.warnings.append(
            f"{topo.source}: {len(unknown)} node(s) are not defined in slurm.conf: {compact_str(unknown)}"
        )
