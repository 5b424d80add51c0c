"""Block planning for Slurm ``topology/block``: which nodes go in which block, in what order.

Pure functions shared by the ``slurm-block`` and ``slurm-yaml`` renderers (and the
Slinky spec strings). Input is a domain membership map -- accelerator domain ->
sub-domain (or ``None``) -> node names -- already restricted to the nodes being
rendered (the whole cluster, or one partition).

Slurm forms higher-level blocks by pairing *adjacent* base blocks, so the order
of the block list is part of the topology. Two modes, as in Topograph:

* **Plain** (no ``block_sizes`` and no sub-domains): one block per domain, in the
  order given by the caller (fabric BFS order), ``BlockSizes`` inferred as
  ``D, 2D, ... 2^k*D`` with ``k = floor(log2(#blocks))`` and ``D`` the *prevailing*
  block size: the size most blocks have (ties: the larger). One NVLink domain with
  a few nodes missing (a failed tray, a node not yet launched) then no longer lowers
  the base block size of the whole cluster; that block is simply smaller than the
  base, which Slurm >= 25.05 accepts. ``topograph_compat`` keeps Topograph's rule,
  ``D`` = the smallest block (see docs/conformance.md).
* **Complemented** (``block_sizes`` given, or some node has a sub-domain): domains in
  alphabetical order are laid out as a tree of base blocks shaped by the sizes,
  with empty placeholder blocks so that every domain starts on an aggregate
  boundary. Sub-domains (racks) never share a base block.

Block names (``block_ids``): by default a block is named after its domain's own ID
(:func:`domain_block_name`), so a name changes only when its domain's ID does, never when
another domain comes or goes; Topograph's positional ``blockNNN`` stays available
(``RenderOptions.block_names``, ``topograph_compat``). ``name_blocks`` applies the optional
``blockName`` regexp naming on top.

Undersized plain blocks (fewer nodes than the base block size, e.g. a capacity block not yet
full) are kept when the target Slurm accepts them (>= 25.05) and left out otherwise, with the
reason in the plan's warnings (:func:`plan`).
"""

from __future__ import annotations

import hashlib
import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import chain

from topocast.errors import RenderError, UnsafeNameError
from topocast.model.hostlist import compact_str
from topocast.model.names import MAX_SWITCH_NAME, check_name
from topocast.renderers.base import BlockNameOptions

#: Slurm's limits on ``BlockSizes`` (entries, and the value of each entry).
MAX_BLOCK_LEVELS = 20
MAX_BLOCK_SIZE = 65536

#: first Slurm release that reads topology/block, and the first that accepts a block with fewer nodes
#: than the base block size (23.02-24.11 reject it; docs/conformance.md, point 9)
BLOCK_SINCE = (23, 2)
UNDERSIZED_SINCE = (25, 5)

#: longest block name derived from a domain ID (Slurm allows 64; short names keep lines and reports readable)
SHORT_BLOCK_NAME = 40
_NOT_IN_BLOCK_NAME = re.compile(r"[^A-Za-z0-9._-]")

#: domain -> sub-domain (None = none) -> node names
Members = Mapping[str, Mapping[str | None, Sequence[str]]]


@dataclass(frozen=True)
class Block:
    """One ``BlockName`` line. ``label`` is the domain (or sub-domain) it holds; padding has none."""

    label: str | None
    nodes: tuple[str, ...] = ()
    #: 1-based alphabetical rank of the domain, set only for plain (uncomplemented) blocks:
    #: Topograph numbers cluster-wide plain blocks alphabetically whatever order they print in.
    rank: int | None = None


@dataclass
class BlockPlan:
    blocks: list[Block]
    sizes: list[int]
    complemented: bool
    warnings: list[str] = field(default_factory=list)


def display_name(label: str) -> str:
    """The name shown in ``# blockNNN=<name>``: the label up to the first ``/``, ``#`` or ``+``."""
    cut = len(label)
    for sep in "/#+":
        i = label.find(sep)
        if 0 <= i < cut:
            cut = i
    return label[:cut]


def validate_block_sizes(sizes: Sequence[int], where: str = "block_sizes") -> list[int]:
    """Apply Slurm's rules: 1..20 entries, each 1..65536, each a power-of-two multiple of the previous."""
    if not sizes:
        raise RenderError(f"{where} is empty")
    if len(sizes) > MAX_BLOCK_LEVELS:
        raise RenderError(f"{where} has {len(sizes)} entries; Slurm accepts at most {MAX_BLOCK_LEVELS}")
    for i, bs in enumerate(sizes):
        if isinstance(bs, bool) or not isinstance(bs, int) or not 1 <= bs <= MAX_BLOCK_SIZE:
            raise RenderError(f"{where}[{i}]={bs!r} is outside 1..{MAX_BLOCK_SIZE}")
        if i:
            prev = sizes[i - 1]
            ratio, rem = divmod(bs, prev)
            if bs <= prev or rem or ratio & (ratio - 1):
                raise RenderError(f"{where}[{i}]={bs} must be a power-of-two multiple of {where}[{i - 1}]={prev}")
    return list(sizes)


def prevailing_size(counts: Sequence[int]) -> int:
    """The block size most blocks have; a tie goes to the larger size (the nominal domain)."""
    tally = Counter(counts)
    return max(tally, key=lambda size: (tally[size], size))


def auto_block_sizes(blocks: Sequence[Block], topograph_compat: bool = False) -> tuple[list[int], list[str]]:
    """Single-level inference: ``D * 2^i`` for ``i`` in ``0..floor(log2(#blocks))``.

    ``D`` is the prevailing block size (Topograph, ``topograph_compat``: the smallest).
    Entries above Slurm's 65536 limit are dropped (with a warning) rather than
    producing a file slurmctld rejects; this only happens with thousands of blocks.
    """
    counts = [len(b.nodes) for b in blocks if b.nodes]
    if not counts:
        raise RenderError("cannot determine BlockSizes: the topology contains no blocks")
    base = min(counts) if topograph_compat else prevailing_size(counts)
    levels = int(math.log2(len(counts)))
    sizes = [base << i for i in range(levels + 1)]
    kept = [s for s in sizes if s <= MAX_BLOCK_SIZE][:MAX_BLOCK_LEVELS]
    warnings = []
    if len(kept) < len(sizes):
        warnings.append(
            f"inferred BlockSizes {','.join(map(str, sizes))} exceed Slurm's limits "
            f"(at most {MAX_BLOCK_LEVELS} entries of at most {MAX_BLOCK_SIZE}); "
            f"kept {','.join(map(str, kept))}"
        )
    return kept, warnings


def infer_two_level_sizes(members: Members) -> list[int] | None:
    """``[largest sub-domain, smallest power-of-two multiple of it >= largest domain]``.

    None when no node has a sub-domain (the plain inference applies instead).
    """
    max_sub = 0
    max_domain = 0
    for subs in members.values():
        max_domain = max(max_domain, sum(len(n) for n in subs.values()))
        for sub, nodes in subs.items():
            if sub is not None:
                max_sub = max(max_sub, len(nodes))
    if max_sub == 0:
        return None
    agg = max_sub
    while agg < max_domain:
        agg *= 2
    return [max_sub] if agg == max_sub else [max_sub, agg]


# ----- complementing -----------------------------------------------------------------


def _cap(n: int, base: int) -> int:
    """``base`` doubled until it holds ``n`` nodes."""
    c = base
    while c < n:
        c *= 2
    return c


class _Packer:
    """Lays domains out as base blocks of ``sizes[0]`` slots; ``None`` entries are placeholders."""

    def __init__(self, sizes: Sequence[int]) -> None:
        self.sizes = list(sizes)
        self.base = sizes[0]
        self.last = sizes[-1]

    def split(self, label: str, nodes: Sequence[str]) -> list[Block | None]:
        names = sorted(nodes)
        return [Block(label, tuple(names[i : i + self.base])) for i in range(0, len(names), self.base)]

    def fit(self, blocks: list[Block | None], slot: int) -> list[Block | None]:
        """Pad up to ``slot`` nodes; an overflow is rounded up to the next aggregate boundary
        (the smallest block size above the slot, else the largest), keeping later domains aligned."""
        capacity = len(blocks) * self.base
        if capacity < slot:
            target = slot
        elif capacity > slot:
            boundary = next((s for s in self.sizes if s > slot), self.last)
            target = -(-capacity // boundary) * boundary
        else:
            return blocks
        return blocks + [None] * ((target - capacity) // self.base)

    def slot(self, largest_sibling: int) -> int:
        return _cap(min(self.last, largest_sibling), self.base)

    def domain(self, name: str, subs: Mapping[str | None, Sequence[str]], slot: int) -> list[Block | None]:
        if all(sub is None for sub in subs):
            return self.fit(self.split(name, subs[None]), slot)
        # Nodes without a sub-domain in a two-level domain get a fallback rack named after the domain.
        racks: dict[str, list[str]] = {}
        for sub, nodes in subs.items():
            racks.setdefault(name if sub is None else sub, []).extend(nodes)
        child_slot = self.slot(max(len(n) for n in racks.values()))
        blocks: list[Block | None] = []
        for rack in sorted(racks):
            blocks.extend(self.fit(self.split(rack, racks[rack]), child_slot))
        return self.fit(blocks, slot)


def complement(members: Members, sizes: Sequence[int]) -> list[Block]:
    """Lay domains (alphabetically) out as Slurm base blocks, padded so aggregates line up.

    Single-level with one size: ``ceil(n/bs0)`` blocks per domain. Single-level with
    more sizes: every domain reserves the same ``cap(largest domain)`` slots. Two-level:
    a domain's slot is ``cap(min(last size, largest sibling))``, recursively per rack.
    Finally the whole list is padded to a multiple of the largest block size.
    """
    pack = _Packer(sizes)
    names = [d for d in sorted(members) if any(members[d].values())]
    if not names:
        return []
    totals = {d: sum(len(n) for n in members[d].values()) for d in names}
    two_level = any(sub is not None for d in names for sub in members[d])
    groups: list[list[Block | None]] = []
    if not two_level:
        slots = _cap(max(totals.values()), pack.base) // pack.base if len(sizes) > 1 else 0
        for d in names:
            blocks = pack.split(d, members[d][None])
            groups.append(blocks + [None] * (slots - len(blocks)))
    else:
        slot = pack.slot(max(totals.values()))
        groups = [pack.domain(d, members[d], slot) for d in names]
    # Root padding: empty aggregates of gcd(domain capacities) until the total is a multiple of the last size.
    capacities = [len(g) * pack.base for g in groups]
    total = sum(capacities)
    step = math.lcm(math.gcd(*capacities), pack.last)
    target = -(-total // step) * step
    flat = [b for g in groups for b in g]
    flat.extend([None] * ((target - total) // pack.base))
    return [b if b is not None else Block(None) for b in flat]


# ----- names -------------------------------------------------------------------------


def domain_block_name(label: str, digits: int = 8) -> str:
    """The block name of a domain (or sub-domain) ID: the ID itself when it is short and made of
    ``A-Z a-z 0-9 . _ -`` only; else those characters kept (others become ``-``), cut to fit, and
    ``-`` plus the first ``digits`` hex digits of the ID's sha256. Depends on the ID alone."""
    safe = _NOT_IN_BLOCK_NAME.sub("-", label)
    if safe == label and 0 < len(label) <= SHORT_BLOCK_NAME:
        return label
    digest = hashlib.sha256(label.encode()).hexdigest()[:digits]
    return f"{safe[: SHORT_BLOCK_NAME - digits - 1]}-{digest}"


def block_ids(blocks: Sequence[Block]) -> list[str]:
    """Stable names for a planned block list, in its order.

    A domain with one block: :func:`domain_block_name` of its ID. A domain split into several base
    blocks (complemented layouts): that name and ``+1``, ``+2``... in order. An empty padding block:
    the name of the block before it and ``+pad1``, ``+pad2``... A derived name never holds ``+``, so
    these never meet a domain's own name. Two IDs that shorten to one name (a cut ID whose digest
    happens to equal another ID's tail) both take 16 hex digits instead.
    """
    labels = {b.label for b in blocks if b.label is not None}
    name_of = {label: domain_block_name(label) for label in labels}
    clash = Counter(name_of.values())
    for label, name in name_of.items():
        if clash[name] > 1 and name != label:
            name_of[label] = domain_block_name(label, 16)
    per_label = Counter(b.label for b in blocks if b.label is not None)
    seen: Counter[str] = Counter()
    ids: list[str] = []
    last = "pad"
    pad = 0
    for b in blocks:
        if b.label is None:
            pad += 1
            ids.append(f"{last}+pad{pad}")
            continue
        seen[b.label] += 1
        name = name_of[b.label]
        last = name if per_label[b.label] == 1 else f"{name}+{seen[b.label]}"
        ids.append(last)
        pad = 0
    if len(set(ids)) != len(ids):
        dup = next(i for i, n in Counter(ids).items() if n > 1)
        raise RenderError(f"two blocks would be named {dup!r}; rename one of their domains in the source")
    return ids


def release_text(release: tuple[int, int] | None) -> str:
    return f"Slurm {release[0]}.{release[1]:02d}" if release else "not given"


def drop_undersized(
    blocks: list[Block], sizes: list[int], release: tuple[int, int] | None, topograph_compat: bool
) -> tuple[list[Block], list[int], list[str]]:
    """Plain blocks with fewer nodes than the base block size, for the target ``release``: kept when it
    accepts them (>= 25.05), else left out (their nodes are in no block) and ``BlockSizes`` inferred
    from the rest. The notes say what happened to each. Without a release the file must load on
    every Slurm that reads topology/block, so they are left out."""
    base = sizes[0]
    small = [b for b in blocks if len(b.nodes) < base]
    if not small:
        return blocks, sizes, []
    keep = release is not None and release >= UNDERSIZED_SINCE
    target = f"the target is {release_text(release)}" if release else "no target Slurm is given"
    notes = []
    for b in small:
        what = f"block of domain {b.label!r} ({len(b.nodes)} node(s): {compact_str(b.nodes)})"
        if keep:
            notes.append(f"{what} kept below the base block size {base}: {release_text(release)} accepts it")
        else:
            notes.append(
                f"{what} left out, its nodes are in no block: it is smaller than the base block size {base}, "
                f"which Slurm 23.02-24.11 rejects, and {target} (slurm_version 25.05 or later keeps it)"
            )
    if keep:
        return blocks, sizes, notes
    rest = [b for b in blocks if len(b.nodes) >= base]
    sizes, more = auto_block_sizes(rest, topograph_compat)
    return rest, sizes, notes + more


# ----- planning ----------------------------------------------------------------------


def plan(
    members: Members,
    order: Sequence[str],
    sizes: Sequence[int] | None,
    where: str = "block_sizes",
    topograph_compat: bool = False,
    release: tuple[int, int] | None = None,
) -> BlockPlan:
    """Decide the block list and ``BlockSizes`` for one topology.

    ``order`` lists the domains in fabric BFS order (used only for plain blocks);
    ``sizes`` are the configured ``block_sizes`` (None = infer); ``topograph_compat``
    infers the base size as Topograph does (the smallest block); ``release`` is the target
    Slurm (:func:`drop_undersized`). Inferred sizes pass the same checks as configured ones
    (Slurm 26.05 refuses to start on an invalid ``BlockSizes``).
    """
    live = {d: subs for d, subs in members.items() if any(subs.values())}
    if sizes:
        chosen = validate_block_sizes(sizes, where)
    else:
        inferred = infer_two_level_sizes(live)
        chosen = validate_block_sizes(inferred, "inferred BlockSizes") if inferred else []
    if chosen:
        return BlockPlan(complement(live, chosen), chosen, complemented=True)
    rank = {d: i + 1 for i, d in enumerate(sorted(live))}
    blocks = [Block(d, tuple(sorted(chain.from_iterable(live[d].values()))), rank[d]) for d in order if d in live]
    auto, warnings = auto_block_sizes(blocks, topograph_compat)
    blocks, auto, notes = drop_undersized(blocks, auto, release, topograph_compat)
    validate_block_sizes(auto, "inferred BlockSizes")
    return BlockPlan(blocks, auto, complemented=False, warnings=warnings + notes)


# ----- blockName ---------------------------------------------------------------------

_GO_NAMED_GROUP = re.compile(r"\(\?<(?=[A-Za-z_])")
_NAME_CHARS = re.compile(r"[A-Za-z0-9_]+")


def compile_node_regexp(pattern: str) -> re.Pattern[str]:
    """Compile a Go (RE2) pattern with Python ``re``; ``(?<name>...)`` becomes ``(?P<name>...)``."""
    try:
        return re.compile(_GO_NAMED_GROUP.sub("(?P<", pattern).replace(r"\z", r"\Z"))
    except re.error as exc:
        raise RenderError(f"blockName nodeNameRegexp {pattern!r} is not a valid regular expression: {exc}") from None


def expand_template(template: str, match: re.Match[str]) -> str:
    """Go ``Regexp.ExpandString``: ``$1``, ``${1}``, ``$name``, ``${name}``; ``$$`` is a dollar.

    Unknown or unmatched groups expand to nothing; a malformed ``$`` is kept literally.
    """
    out: list[str] = []
    i = 0
    while True:
        j = template.find("$", i)
        if j < 0:
            out.append(template[i:])
            return "".join(out)
        out.append(template[i:j])
        rest = template[j + 1 :]
        if rest.startswith("$"):
            out.append("$")
            i = j + 2
            continue
        if rest.startswith("{"):
            end = rest.find("}")
            name = rest[1:end] if end > 0 else ""
            used = end + 1
            ok = bool(name) and _NAME_CHARS.fullmatch(name) is not None
        else:
            m = _NAME_CHARS.match(rest)
            name = m.group(0) if m else ""
            used = len(name)
            ok = bool(name)
        if not ok:
            out.append("$")
            i = j + 1
            continue
        out.append(_group(match, name))
        i = j + 1 + used


def _group(match: re.Match[str], name: str) -> str:
    if name.isdigit():
        if len(name) > 1 and name[0] == "0":
            return ""  # Go treats a leading zero as a (missing) group name
        idx = int(name)
        value = match.group(idx) if idx <= (match.re.groups) else None
    else:
        value = match.group(name) if name in match.re.groupindex else None
    return value or ""


def name_blocks(blocks: Sequence[Block], ids: Sequence[str], options: BlockNameOptions | None) -> list[str]:
    """Final ``BlockName`` of each block: ``ids`` unless ``blockName`` derives one from the nodes.

    Every node of a non-empty block must match and expand to the same non-empty, safe
    name, and names must be unique; empty (padding) blocks keep their generated ID.
    """
    if options is None:
        return list(ids)
    rx = compile_node_regexp(options.node_name_regexp)
    names: list[str] = []
    owner: dict[str, str] = {}
    for block, bid in zip(blocks, ids, strict=True):
        name = bid
        if block.nodes:
            found: str | None = None
            for node in block.nodes:
                m = rx.search(node)
                if m is None:
                    raise RenderError(
                        f"node {node!r} in block {bid!r} (domain {block.label!r}) does not match "
                        f"nodeNameRegexp {options.node_name_regexp!r}"
                    )
                got = expand_template(options.format, m)
                if not got:
                    raise RenderError(
                        f"blockName format {options.format!r} produces an empty name for node {node!r} in block {bid!r}"
                    )
                if found is None:
                    found = got
                elif got != found:
                    raise RenderError(f"nodes in block {bid!r} produce different block names {found!r} and {got!r}")
            assert found is not None
            try:
                name = check_name(found, "block name", f"block {bid!r}", MAX_SWITCH_NAME)
            except UnsafeNameError as exc:
                raise RenderError(f"blockName format {options.format!r}: {exc}") from None
        names.append(name)
    for bid, name in zip(ids, names, strict=True):
        if name in owner:
            raise RenderError(f"blocks {owner[name]!r} and {bid!r} produce duplicate block name {name!r}")
        owner[name] = bid
    return names
