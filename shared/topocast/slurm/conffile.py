"""Read Slurm's ``Key=Value`` config files (slurm.conf, topology.conf) the way Slurm does.

Slurm's parser (``s_p_parse_file``) treats ``#`` as a comment start, joins a
line ending in ``\\`` with the next one, ignores the case of keys, allows
spaces around ``=`` and double-quoted values. We mirror exactly that much so
structural checks see the same records slurmctld sees, and report anything we
cannot read (a bare word, ``Include``) instead of guessing.

Lines end at ``\n`` only, as in Slurm's C reader: ``str.splitlines`` would also
split at ``\x1c``-``\x1e``, ``\x85``, U+2028 and U+2029, so a crafted file could show
us two records where slurmctld reads one. Any control (other than tab) or
non-ASCII character outside a comment is reported in :attr:`ConfLine.bad_chars`:
no Slurm name or value needs one, and each is a place where two parsers differ.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from topocast.errors import HostlistError, TopocastError
from topocast.model.hostlist import expand, name_budget

_PAIR = re.compile(r'\s*([A-Za-z][A-Za-z0-9_]*)\s*=\s*("[^"]*"|[^\s"]*)')


@dataclass(frozen=True)
class ConfLine:
    """One logical line: its first physical line number, its pairs and what could not be parsed."""

    lineno: int
    text: str
    #: (key as written, value without quotes), in order
    pairs: tuple[tuple[str, str], ...]
    #: fragments that are not ``Key=Value`` (e.g. ``Include /x``)
    junk: tuple[str, ...]
    #: (physical line, column, character) of control / non-ASCII characters outside comments
    bad_chars: tuple[tuple[int, int, str], ...] = ()

    def keys_lower(self) -> list[str]:
        return [k.lower() for k, _ in self.pairs]

    def get(self, key: str) -> str | None:
        """Last value of ``key`` (case-insensitive), like Slurm's "latest value used"."""
        found = None
        for k, v in self.pairs:
            if k.lower() == key.lower():
                found = v
        return found


def _strip_comment(line: str) -> str:
    # '\#' is a literal '#' in Slurm files; anything after an unescaped '#' is a comment.
    if "#" not in line:
        return line  # the usual line: nothing to strip or unescape
    out: list[str] = []
    i = 0
    while i < len(line):
        ch = line[i]
        if ch == "\\" and i + 1 < len(line) and line[i + 1] == "#":
            out.append("#")
            i += 2
            continue
        if ch == "#":
            break
        out.append(ch)
        i += 1
    return "".join(out)


_BAD_CHAR = re.compile(r"[^\t\x20-\x7e]")


def bad_characters(text: str) -> list[tuple[int, str]]:
    """(0-based column, character) of every character outside tab and printable ASCII."""
    return [(m.start(), m.group()) for m in _BAD_CHAR.finditer(text)]


def describe_char(ch: str) -> str:
    """``U+001E`` plus a hint for the usual suspects."""
    names = {
        "\r": " (carriage return)",
        "\x1c": " (file separator)",
        "\x1d": " (group separator)",
        "\x1e": " (record separator)",
        "\x85": " (next line)",
        "\u2028": " (line separator)",
        "\u2029": " (paragraph separator)",
        "\x00": " (NUL)",
    }
    return f"U+{ord(ch):04X}{names.get(ch, '')}"


def parse_conf_text(text: str) -> list[ConfLine]:
    """Split config text into logical lines of ``Key=Value`` pairs (blank lines dropped)."""
    lines: list[ConfLine] = []
    pending = ""
    pending_bad: list[tuple[int, int, str]] = []
    start = 0
    for number, raw in enumerate(text.split("\n"), start=1):
        body = _strip_comment(raw).rstrip(" \t")
        bad = [(number, col + 1, ch) for col, ch in bad_characters(body)]
        if not pending:
            start = number
        if body.endswith("\\"):
            pending += body[:-1] + " "
            pending_bad += bad
            continue
        body = pending + body
        bad = pending_bad + bad
        pending, pending_bad = "", []
        if body.strip() or bad:
            lines.append(_parse_line(start, body, tuple(bad)))
    if pending.strip() or pending_bad:
        lines.append(_parse_line(start, pending, tuple(pending_bad)))
    return lines


def _parse_line(lineno: int, body: str, bad: tuple[tuple[int, int, str], ...] = ()) -> ConfLine:
    pairs: list[tuple[str, str]] = []
    junk: list[str] = []
    pos = 0
    while pos < len(body):
        m = _PAIR.match(body, pos)
        if m is not None and m.end() > pos:
            value = m.group(2)
            if len(value) >= 2 and value[0] == value[-1] == '"':
                value = value[1:-1]
            pairs.append((m.group(1), value))
            pos = m.end()
            continue
        rest = body[pos:].strip()
        if not rest:
            break
        # keep the unreadable word for the error message, then resync on the next whitespace
        word = rest.split()[0]
        junk.append(word)
        pos = body.index(word, pos) + len(word)
    return ConfLine(lineno=lineno, text=body.strip(), pairs=tuple(pairs), junk=tuple(junk), bad_chars=bad)


def slurm_conf_nodes(path: Path) -> list[str]:
    """Node names defined by ``NodeName=`` lines of a slurm.conf (hostlists expanded, DEFAULT skipped).

    ``Include`` lines are not followed: an operator's includes may need paths we
    cannot resolve here, so a slurm.conf that defines nodes only via includes
    yields an empty list and the caller reports it.
    """
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise TopocastError(f"{path}: cannot read slurm.conf ({exc.strerror})") from None
    names: list[str] = []
    seen: set[str] = set()
    with name_budget(what=str(path)):  # one node-name cap for the whole file, not per line
        for line in parse_conf_text(text):
            if not line.pairs or line.pairs[0][0].lower() != "nodename":
                continue
            expr = line.pairs[0][1]
            if expr.upper() == "DEFAULT":
                continue
            try:
                expanded = expand(expr)
            except HostlistError as exc:
                raise TopocastError(f"{path}:{line.lineno}: bad NodeName hostlist: {exc}") from None
            for name in expanded:
                if name not in seen:
                    seen.add(name)
                    names.append(name)
    return names
