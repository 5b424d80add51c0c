"""Slurm hostlist compression and expansion, as Slurm itself reads them.

``compact(["n1","n2","n4"]) == ["n[1-2,4]"]``. Each name splits into a *lazy*
prefix and all trailing ASCII digits (``^(.*?)([0-9]+)$``), so ``dgx-01`` groups under
``dgx-`` and ``switch.1.10`` under ``switch.1.``. Numbers of one prefix that are
consecutive merge into ranges; the original digit strings (with their zero
padding) are printed. A lone number prints without brackets.

A range only joins numbers Slurm's expansion gives back exactly: in ``[a-b]``
Slurm prints every number at the width of ``a``'s digits (``gpu[098-100]`` is
098, 099, 100; ``n[9-010]`` is n9, n10). So a zero-padded number only shares a
range with numbers of its own width (and, past the last number of that width,
with unpadded ones: ``n[099-100]``), and an unpadded number never with a padded
one. Topograph's compaction joins them regardless (``n[9-010]``), dropping
nodes; here those stay apart (``n[9,010]``), otherwise the output is Topograph's.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from itertools import repeat

from topocast.errors import HostlistError

#: Topograph's ``ExpandWithLimit`` cap: a DoS guard on hostile ranges.
EXPAND_LIMIT = 500_000

__all__ = ["EXPAND_LIMIT", "compact", "compact_str", "count", "expand", "expand_one", "name_budget", "split_list"]

_DIGITS = "0123456789"


def _sorted_run(names: list[str], joined: str) -> list[str] | None:
    """The commonest case of all, checked against the text it must be: names already in order and of
    one width (``gpu-0018`` ... ``gpu-0035``: a leaf's nodes, a block, a spine's leaves)."""
    if joined.count("\n") != len(names) - 1:
        return None  # a name holds a newline: the joined text would not tell the names apart
    first, last = names[0], names[-1]
    prefix = first.rstrip(_DIGITS)
    cut = len(prefix)
    low, high = first[cut:], last[cut:]
    if not low or len(low) != len(high) or not high.isdigit() or last[:cut] != prefix:
        return None
    start, stop = int(low), int(high)
    if stop - start != len(names) - 1:
        return None
    expected = prefix + ("\n" + prefix).join(map(f"%0{len(low)}d".__mod__, range(start, stop + 1)))
    return [f"{prefix}[{low}-{high}]"] if joined == expected else None


def _one_run(names: list[str]) -> list[str] | None:
    """The answer for the common case, in C-speed steps: one prefix, consecutive numbers.

    (A leaf's nodes, an NVLink domain, a spine's leaves.) None when it is not that case.
    The prefix is the first name without its trailing digits; every name must be ASCII and
    that prefix followed by digits only, which is the split :func:`compact` makes.
    """
    joined = "\n".join(names)
    if not joined.isascii():
        return None
    sorted_run = _sorted_run(names, joined)
    if sorted_run is not None:
        return sorted_run
    prefix = names[0].rstrip(_DIGITS)
    if not all(map(str.startswith, names, repeat(prefix))):
        return None
    cut = len(prefix)
    digits = [name[cut:] for name in names]
    if not all(digits) or not "".join(digits).isdigit():
        return None
    values = list(map(int, digits))
    low, high = min(values), max(values)
    if high - low != len(values) - 1 or len(set(values)) != len(values):
        return None  # gaps, or the same number twice (n1 and n01)
    first = digits[values.index(low)]
    if _padded(first):
        if set(map(len, digits)) != {len(first)}:
            return None  # n[098-1000] is right, n[08-100] is not: the general path tells them apart
    elif sum(map(str.startswith, digits, repeat("0"))) != (first == "0"):
        return None  # a padded number after an unpadded start: Slurm would print it without its zeros
    return [f"{prefix}[{first}-{digits[values.index(high)]}]"]


def _padded(digits: str) -> bool:
    """``007`` is zero-padded (Slurm keeps its width), ``7``, ``0`` and ``70`` are not."""
    return len(digits) > 1 and digits[0] == "0"


def _runs(nums: dict[str, int]) -> list[tuple[str, str]]:
    """``(first, last)`` digit strings of the ranges, each one Slurm expands back to exactly its numbers.

    Zero-padded numbers of width w only run with each other; unpadded ones with each other;
    a padded run that ends at the last number of its width (``099``) goes on into the unpadded
    run that starts right after it (``100``, ``101``: Slurm prints those unchanged at width 3).
    """
    by_width: dict[int, list[tuple[int, str]]] = {}
    for s, v in nums.items():
        by_width.setdefault(len(s) if _padded(s) else 0, []).append((v, s))
    runs: dict[int, list[list[tuple[int, str]]]] = {}
    for width, items in by_width.items():
        items.sort()
        out = runs[width] = [[items[0], items[0]]]
        for v, s in items[1:]:
            if v == out[-1][1][0] + 1:
                out[-1][1] = (v, s)
            else:
                out.append([(v, s), (v, s)])
    plain = {run[0][0]: run for run in runs.get(0, [])}
    for width, padded_runs in runs.items():
        if width:
            last = padded_runs[-1]
            follow = plain.get(last[1][0] + 1)
            if follow is not None and last[1][0] + 1 == 10 ** (width - 1):
                last[1] = follow[1]
                runs[0].remove(follow)
    ordered = sorted((run for width_runs in runs.values() for run in width_runs), key=lambda r: r[0])
    return [(a[1], b[1]) for a, b in ordered]


def compact(names: Iterable[str]) -> list[str]:
    """Compress names into hostlist groups, one string per prefix, prefixes sorted."""
    names = names if isinstance(names, list) else list(names)
    if len(names) > 2:
        fast = _one_run(names)
        if fast is not None:
            return fast
    # keyed (prefix, numbered): the plain name "n" and the prefix of "n0" are two groups
    groups: dict[tuple[str, bool], dict[str, int]] = {}
    for name in names:
        # The number is the trailing ASCII digits only: Slurm reads bytes, and other Unicode
        # digits (an Arabic 3) would expand back as ASCII ones, a different name.
        prefix = name.rstrip(_DIGITS)
        if len(prefix) == len(name):
            groups.setdefault((name, False), {})
            continue
        digits = name[len(prefix) :]
        groups.setdefault((prefix, True), {})[digits] = int(digits)
    out: list[str] = []
    for prefix, numbered in sorted(groups):
        nums = groups[prefix, numbered]
        if not numbered:
            out.append(prefix)
            continue
        if len(nums) == 1:
            out.append(prefix + next(iter(nums)))
            continue
        runs = _runs(nums)
        body = ",".join(a if a == b else f"{a}-{b}" for a, b in runs)
        out.append(f"{prefix}[{body}]")
    return out


def compact_str(names: Iterable[str]) -> str:
    """``compact`` joined with commas: the value of a ``Nodes=`` key."""
    return ",".join(compact(names))


def split_list(expr: str) -> list[str]:
    """Split ``a[1-2],b,c[3,5]`` on commas outside brackets."""
    parts: list[str] = []
    depth = 0
    cur: list[str] = []
    for ch in expr:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise HostlistError(f"unbalanced ']' in hostlist {expr!r}")
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if depth != 0:
        raise HostlistError(f"unbalanced '[' in hostlist {expr!r}")
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


def _is_number(text: str) -> bool:
    """ASCII digits only: ``str.isdigit`` also takes ``²`` and ``٣``, which ``int`` then refuses or misreads."""
    return text.isascii() and text.isdigit()


def _ranges(body: str, expr: str) -> list[tuple[int, int, int] | str]:
    """Parse ``1-3,07`` into ``(lo, hi, width)`` ranges and single numbers, checking every item."""
    out: list[tuple[int, int, int] | str] = []
    for item in body.split(","):
        item = item.strip()
        if not item:
            raise HostlistError(f"empty range in hostlist {expr!r}")
        if "-" in item:
            lo, _, hi = item.partition("-")
            if not (_is_number(lo) and _is_number(hi)):
                raise HostlistError(f"bad range {item!r} in hostlist {expr!r}")
            a, b = int(lo), int(hi)
            if b < a:
                raise HostlistError(f"descending range {item!r} in hostlist {expr!r}")
            out.append((a, b, len(lo)))
        else:
            if not _is_number(item):
                raise HostlistError(f"bad number {item!r} in hostlist {expr!r}")
            out.append(item)
    return out


def _parse_term(expr: str) -> list[tuple[str, list[tuple[int, int, int] | str]]]:
    """``rack[1-2]-n[01-03]`` -> ``[("rack", ranges), ("-n", ranges), ("", [""])]``: literals and brackets."""
    parts: list[tuple[str, list[tuple[int, int, int] | str]]] = []
    i = 0
    while i < len(expr):
        j = expr.find("[", i)
        if j < 0:
            parts.append((expr[i:], [""]))
            break
        k = expr.find("]", j)
        if k < 0:
            raise HostlistError(f"unbalanced '[' in hostlist {expr!r}")
        parts.append((expr[i:j], _ranges(expr[j + 1 : k], expr)))
        i = k + 1
    return parts


def _count(parts: list[tuple[str, list[tuple[int, int, int] | str]]]) -> int:
    total = 1
    for _, ranges in parts:
        total *= sum(1 if isinstance(r, str) else r[1] - r[0] + 1 for r in ranges)
    return total


def count(expr: str | Iterable[str]) -> int:
    """How many names ``expand(expr)`` would give, computed without expanding (so without memory)."""
    terms = split_list(expr) if isinstance(expr, str) else [t for e in expr for t in split_list(e)]
    return sum(_count(_parse_term(t)) for t in terms)


@dataclass
class _Budget:
    limit: int
    what: str
    used: int = 0


_BUDGET: ContextVar[_Budget | None] = ContextVar("topocast_hostlist_budget", default=None)


@contextmanager
def name_budget(limit: int = EXPAND_LIMIT, what: str = "this input") -> Iterator[None]:
    """Every expansion inside the block shares one cap of ``limit`` names in total.

    The per-call cap alone lets a 1.8 KB file of 200 lines (or a model of 40
    blocks) each just under it expand to 100 million names. Nested blocks share
    the outermost budget.
    """
    if _BUDGET.get() is not None:
        yield
        return
    token = _BUDGET.set(_Budget(limit, what))
    try:
        yield
    finally:
        _BUDGET.reset(token)


def _charge(n: int, limit: int) -> None:
    """Reserve ``n`` names before building them: against the call's ``limit`` and the shared budget."""
    if n > limit:
        raise HostlistError(f"expanded node list exceeds {limit} entries")
    budget = _BUDGET.get()
    if budget is not None:
        if budget.used + n > budget.limit:
            raise HostlistError(
                f"the hostlists in {budget.what} expand to more than {budget.limit} node names in total"
            )
        budget.used += n


def _build(parts: list[tuple[str, list[tuple[int, int, int] | str]]]) -> list[str]:
    results = [""]
    for literal, ranges in parts:
        values: list[str] = []
        for r in ranges:
            if isinstance(r, str):
                values.append(r)
            else:
                a, b, width = r
                values.extend(str(v).zfill(width) for v in range(a, b + 1))
        results = [p + literal + v for p in results for v in values]
    return results


def expand_one(expr: str, limit: int = EXPAND_LIMIT) -> list[str]:
    """Expand one hostlist term (``rack[1-2]-n[01-03]`` allowed)."""
    parts = _parse_term(expr)
    _charge(_count(parts), limit)
    return _build(parts)


def expand(expr: str | Iterable[str], limit: int = EXPAND_LIMIT) -> list[str]:
    """Expand a hostlist (a string with commas, or a list of terms) in order.

    The size is counted before anything is built: more than ``limit`` names in
    total (or more than the enclosing :func:`name_budget` has left) is a
    HostlistError, whatever the number of ranges, terms or lists.
    """
    terms = split_list(expr) if isinstance(expr, str) else [t for e in expr for t in split_list(e)]
    parsed = [_parse_term(t) for t in terms]
    _charge(sum(_count(p) for p in parsed), limit)
    out: list[str] = []
    for parts in parsed:
        out.extend(_build(parts))
    return out
