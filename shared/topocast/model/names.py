"""Name safety: names from cloud APIs end up in config files and label values.

A node name such as ``"gpu-1 Nodes=evil"`` or ``"gpu-1\\nSwitchName=x"`` would
inject keys or lines into ``topology.conf``; a comma or bracket would change the
meaning of a Slurm hostlist; a colon would break Slinky's ``topo:switch`` spec
strings. We accept a conservative character set and reject everything else with
an error that names the offending object and character.
"""

from __future__ import annotations

import re
from collections.abc import Collection

from topocast.errors import UnsafeNameError

#: Slurm's limit for SwitchName / BlockName (``topology.conf(5)``).
MAX_SWITCH_NAME = 64
#: DNS-style hostnames; Slurm has no documented NodeName limit, this is a sanity cap.
MAX_NODE_NAME = 253
MAX_DOMAIN_NAME = 253

_SAFE = re.compile(r"[A-Za-z0-9._\-+@/]+")
#: The characters of safe names joined by newlines (a newline is never safe, so it can only be a
#: separator): deleting them from the encoded text leaves nothing (bytes.translate, a table lookup
#: per byte, is ~4x quicker than a regex over 100k joined node names).
_SAFE_LINE_BYTES = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-+@/\n"
#: Switch and domain names repeat across thousands of nodes (and across the warm invocations of
#: a function): remember those already found safe. Only names that fit the *smallest* limit are
#: kept, so a remembered name is safe for every kind; the set is emptied when it grows past
#: ``_KNOWN_SAFE_MAX`` so a long-lived process does not grow without bound.
_KNOWN_SAFE: set[str] = set()
_KNOWN_SAFE_MAX = 200_000


def _describe(ch: str) -> str:
    if ch == "\n":
        return "a newline"
    if ch.isspace():
        return "whitespace"
    if ord(ch) < 32 or ord(ch) == 127:
        return f"control character U+{ord(ch):04X}"
    return f"{ch!r}"


def check_name(value: object, kind: str, where: str, max_len: int) -> str:
    """Return ``value`` if it is a safe name, else raise :class:`UnsafeNameError`.

    ``kind`` is what the name is ("node name", "switch name"...), ``where``
    identifies the object it belongs to, so the error points at it.
    """
    if value in _KNOWN_SAFE:
        return value
    if not isinstance(value, str):
        raise UnsafeNameError(f"{kind} of {where} must be a string, got {type(value).__name__}")
    if not value:
        raise UnsafeNameError(f"{kind} of {where} is empty")
    if len(value) > max_len:
        raise UnsafeNameError(f"{kind} {value[:40]!r}... of {where} is {len(value)} characters (limit {max_len})")
    if not _SAFE.fullmatch(value):
        bad = next(ch for ch in value if not _SAFE.fullmatch(ch))
        raise UnsafeNameError(
            f"{kind} {value!r} of {where} contains {_describe(bad)}; allowed are letters, digits and . _ - + @ /"
        )
    if len(value) <= MAX_SWITCH_NAME:
        _remember((value,))
    return value


def _remember(values: Collection[str]) -> None:
    if len(_KNOWN_SAFE) + len(values) > _KNOWN_SAFE_MAX:
        _KNOWN_SAFE.clear()
    _KNOWN_SAFE.update(values)


def all_safe(values: Collection[str], max_len: int, *, remember: bool = False, cached: bool = True) -> bool:
    """True if every value is a safe name of at most ``max_len`` characters; never raises.

    One regex over the joined names instead of one call per name: for the 100k distinct
    node names of a large graph this is C speed. A False answer says nothing about *which*
    name is bad: callers then run :func:`check_name` one by one for the precise error.
    With ``remember`` (switch and domain names, few and repeated) the safe ones are cached;
    ``cached=False`` skips looking values up in the cache (node names: all distinct, rarely cached).
    """
    fresh = [v for v in values if v not in _KNOWN_SAFE] if cached else list(values)
    if not fresh:
        return True
    try:
        joined = "\n".join(fresh)
    except TypeError:  # not all strings
        return False
    if joined.count("\n") != len(fresh) - 1 or max(map(len, fresh)) > max_len:
        return False  # a name containing a newline, or one too long
    if not all(fresh) or not joined.isascii() or joined.encode("ascii").translate(None, _SAFE_LINE_BYTES):
        return False  # an empty name, or a character outside the safe set
    if remember:
        _remember([v for v in fresh if len(v) <= MAX_SWITCH_NAME])
    return True


def check_node_name(name: object, where: str | None = None) -> str:
    return check_name(name, "node name", where or f"node {name!r}", MAX_NODE_NAME)


def check_upload_name(name: object, where: str) -> str:
    """``name`` if it is a safe node name that is also one path segment (an upload's ``<host>`` in
    ``<prefix>/<cluster>/uploads/<host>/<file>``): no ``/``, not ``.`` or ``..``, which a store or reader
    that normalises paths would follow into another host's or cluster's uploads."""
    check_node_name(name, where)
    assert isinstance(name, str)
    if "/" in name or name in (".", ".."):
        raise UnsafeNameError(f"{where} {name[:80]!r} is not one path segment (no '/', not '.' or '..')")
    return name


def check_switch_name(name: object, node: str) -> str:
    return check_name(name, "switch name", f"node {node!r}", MAX_SWITCH_NAME)


def check_domain_name(name: object, node: str, kind: str = "accelerator domain") -> str:
    return check_name(name, kind, f"node {node!r}", MAX_DOMAIN_NAME)


def check_topology_name(name: str) -> str | None:
    """Why ``name`` cannot name a topology in topology.yaml (or a ``Topology=`` spec), or None.

    The one rule: ``topocast pull`` / ``node-topology`` refuse a topology.yaml that breaks it,
    and ``render`` refuses options that would write one (``RenderOptions``, ``slurm_yaml``).
    """
    if len(name) > MAX_SWITCH_NAME:
        return f"is {len(name)} characters; at most {MAX_SWITCH_NAME}"
    try:
        check_name(name, "topology name", "topology.yaml", MAX_SWITCH_NAME)
    except UnsafeNameError as exc:
        return str(exc)
    if ":" in name or "," in name:
        return "contains ':' or ',', which separate the parts of a Topology= spec"
    return None
