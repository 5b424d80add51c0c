"""One way to turn bad input (pydantic validation failures, undecodable JSON) into topocast's one-line errors.

Every boundary model (graph, events, options, settings, provider configs) is
validated through :func:`validate`, so a user always sees ``<source>: <field
path>: <what is wrong> (got <value>)`` and never a pydantic traceback; event
bodies are decoded through :func:`load_json`.
"""

from __future__ import annotations

import json
import re
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from topocast.errors import TopocastError
from topocast.safeio.limits import MAX_JSON_DEPTH

M = TypeVar("M", bound=BaseModel)


def describe(exc: ValidationError, prefix: str = "", limit: int = 3) -> str:
    """``a.b: is required; c: Input should be ... (got "x") (and 2 more)``."""
    errors = exc.errors()
    parts = []
    for err in errors[:limit]:
        loc = ".".join(str(p) for p in (prefix, *err.get("loc", ())) if p != "")
        msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
        if err.get("type") == "missing":
            msg = "is required"
        elif "input" in err and not isinstance(err["input"], dict | list):
            msg = f"{msg} (got {json.dumps(err['input'], default=str)[:80]})"
        parts.append(f"{loc}: {msg}" if loc else msg)
    more = len(errors) - limit
    return "; ".join(parts) + (f" (and {more} more)" if more > 0 else "")


def validate(
    model: type[M],
    data: Any,
    source: str,
    error: type[TopocastError],
    prefix: str = "",
    *,
    keep_class: bool = True,
) -> M:
    """``model.model_validate(data)``; failures raise ``error("<source>: <description>")``.

    Errors raised by our own validators (e.g. :class:`~topocast.errors.UnsafeNameError`)
    get the source prepended and keep their class, so callers can still tell them
    apart; with ``keep_class=False`` they become ``error`` too (a provider reports
    every bad input as a ProviderError).
    """
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise error(f"{source}: {describe(exc, prefix)}") from None
    except TopocastError as exc:
        raise (type(exc) if keep_class else error)(f"{source}: {exc}") from None


_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")


def check_json_depth(text: str, what: str, error: type[TopocastError], limit: int = MAX_JSON_DEPTH) -> None:
    """Raise ``error`` if ``text`` nests arrays/objects deeper than ``limit``, without recursing.

    ``json.loads`` (and pydantic after it) recurse once per level: 100,000 ``[``
    end in RecursionError, which is no ValueError and escaped every handler. A text
    with fewer brackets than the limit cannot be too deep, so most inputs cost two
    ``str.count`` calls; the rest are scanned once with strings blanked out.
    """
    if text.count("[") + text.count("{") <= limit:
        return
    depth = 0
    for ch in _NOT_BRACKET.sub("", _JSON_STRING.sub('""', text)):
        if ch in "[{":
            depth += 1
            if depth > limit:
                raise error(f"{what}: nested deeper than {limit} levels")
        else:
            depth -= 1


def load_json(data: Any, what: str, error: type[TopocastError]) -> Any:
    """Decode JSON text or UTF-8 bytes (anything else is returned as is); blank text is None.

    Failures raise ``error("<what>: not UTF-8 (byte N)")``,
    ``error("<what>: not JSON (<reason> at line L column C)")`` or
    ``error("<what>: nested deeper than N levels")``: never RecursionError or
    MemoryError, so one bad record can be rejected while the rest of its batch goes on.
    """
    if isinstance(data, bytes | bytearray):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise error(f"{what}: not UTF-8 (byte {exc.start})") from None
    if isinstance(data, str):
        if not data.strip():
            return None
        check_json_depth(data, what, error)
        try:
            return json.loads(data)
        except json.JSONDecodeError as exc:
            raise error(f"{what}: not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
        except (RecursionError, MemoryError, ValueError) as exc:  # ValueError: e.g. int too long
            raise error(f"{what}: not usable JSON ({type(exc).__name__}: {str(exc)[:120]})") from None
    return data
