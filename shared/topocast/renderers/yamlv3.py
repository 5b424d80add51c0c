"""Scalar quoting the way Go's ``gopkg.in/yaml.v3`` marshals strings.

Slurm's ``topology.yaml`` consumers do not care, but byte-compatible output lets a
topocast file diff cleanly against a Topograph one. yaml.v3 writes a string:

* double-quoted if, written plain, it would read back as another type
  (``"1101"``, ``"true"``, ``"yes"``, ``"1:20"``, ``"2024-01-02"``, ``"~"``...);
* single-quoted if plain style is not allowed in block context (it starts with an
  indicator such as ``[``, ``*`` or ``- ``, contains ``: `` or `` #``, or has
  leading/trailing spaces);
* double-quoted with escapes if it holds control or non-printable characters;
* plain otherwise (``Node[201,205]`` stays bare: flow indicators are fine in block context).
"""

from __future__ import annotations

import re

_NULLS = {"", "~", "null", "Null", "NULL"}
_BOOLS = {"true", "True", "TRUE", "false", "False", "FALSE"}
#: YAML 1.1 booleans yaml.v3 still quotes for compatibility (``isOldBool``)
_OLD_BOOLS = {"y", "Y", "yes", "Yes", "YES", "n", "N", "no", "No", "NO", "on", "On", "ON", "off", "Off", "OFF"}
_SPECIAL_FLOATS = {".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF", "-.inf", "-.Inf", "-.INF", ".nan", ".NaN", ".NAN"}
_FLOAT = re.compile(r"^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$")
_BASE60 = re.compile(r"^[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?$")
#: the date forms Go's time.Parse accepts in yaml.v3's parseTimestamp (date, optional time)
_TIMESTAMP = re.compile(
    r"^[0-9]{4}-[0-9]{1,2}-[0-9]{1,2}(?:(?:[Tt]| +)[0-9]{1,2}:[0-9]{1,2}:[0-9]{1,2}(?:\.[0-9]*)?.*)?$"
)
_GO_INT = re.compile(r"^[-+]?(?:0[xX][0-9a-fA-F]+|0[oO][0-7]+|0[bB][01]+|0[0-7]*|[1-9][0-9]*)$")


def _resolves_to_non_string(s: str) -> bool:
    if s in _NULLS or s in _BOOLS or s in _OLD_BOOLS or s in _SPECIAL_FLOATS or s == "<<":
        return True
    if _BASE60.match(s):
        return True
    if not s or s[0] not in "+-.0123456789":
        return False
    plain = s.replace("_", "")
    return bool(_TIMESTAMP.match(s) or _GO_INT.match(plain) or _FLOAT.match(plain))


def _printable(ch: str) -> bool:
    o = ord(ch)
    return ch == "\t" or (0x20 <= o <= 0x7E) or (o >= 0xA0 and o not in (0xFEFF,) and not 0xD800 <= o <= 0xDFFF)


def _plain_allowed(s: str) -> bool:
    if s.startswith(("---", "...")) or s[0] in " \t" or s[-1] in " \t":
        return False
    first = s[0]
    if first in "#,[]{}&*!|>'\"%@`":
        return False
    if first in "?:-" and (len(s) == 1 or s[1] in " \t"):
        return False
    return not (": " in s or s.endswith(":") or " #" in s or "\t#" in s)


def _double_quoted(s: str) -> str:
    out = []
    for ch in s:
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif _printable(ch):
            out.append(ch)
        elif ord(ch) <= 0xFF:
            out.append(f"\\x{ord(ch):02X}")
        elif ord(ch) <= 0xFFFF:
            out.append(f"\\u{ord(ch):04X}")
        else:
            out.append(f"\\U{ord(ch):08X}")
    return '"' + "".join(out) + '"'


def _needs_escapes(s: str) -> bool:
    if s.isascii():  # the usual name: printable ASCII is exactly what isprintable() accepts (no tab)
        return not s.isprintable()
    return any(not _printable(ch) or ch == "\t" for ch in s)


def scalar(s: str) -> str:
    """``s`` as yaml.v3 would write it as a block-context mapping value."""
    if _resolves_to_non_string(s) or _needs_escapes(s):
        return _double_quoted(s)
    if _plain_allowed(s):
        return s
    return "'" + s.replace("'", "''") + "'"
