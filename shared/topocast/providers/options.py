"""One way for a provider to validate its own options, and to list them.

Every provider module added since the five first ones declares ``class Options(BaseModel)`` (each field
with a ``description``) and validates ``ProviderInputs.options`` in its factory with
:func:`provider_options`. The options reach it from ``topocast discover --option KEY=VALUE`` (repeatable;
a value that parses as JSON is taken as JSON, anything else as a string) or, in the functions, from
``TOPOCAST_PROVIDER_OPTIONS`` (a JSON object), so no shell needs to know a provider's fields.
:func:`describe_options` prints a provider's options from the same model (``discover --list-options``).
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Iterable, Mapping
from typing import Any, Literal, TypeVar, get_args, get_origin

from pydantic import BaseModel, ValidationError

from topocast.errors import ProviderError

__all__ = ["describe_options", "options_model", "parse_option_pairs", "provider_options"]

M = TypeVar("M", bound=BaseModel)


def provider_options(model: type[M], raw: Mapping[str, Any], provider: str) -> M:
    """``raw`` validated by ``model``; a failure is one line naming the provider, the option and the problem.

    ``None`` values are dropped first (a shell that passes every known key with ``None`` for unset ones
    gets the model's defaults).
    """
    data = {k: v for k, v in raw.items() if v is not None}
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err.get("loc", ())) or "options"
        if err.get("type") == "missing":
            problem = "is required"
        elif err.get("type") == "extra_forbidden":
            known = ", ".join(sorted(model.model_fields))
            problem = f"is not an option of this provider (options: {known})"
        else:
            problem = str(err.get("msg", "invalid")).removeprefix("Value error, ")
            if "input" in err and not isinstance(err["input"], dict | list):
                problem += f" (got {json.dumps(err['input'], default=str)[:80]})"
        more = len(exc.errors()) - 1
        tail = f" (and {more} more)" if more > 0 else ""
        raise ProviderError(f"provider {provider!r}: option {where!r} {problem}{tail}") from None


def parse_option_pairs(pairs: Iterable[str]) -> dict[str, Any]:
    """``["compartment=ocid1...", "page_size=50"]`` as ``{"compartment": "ocid1...", "page_size": 50}``.

    A value that parses as JSON is JSON (numbers, ``true``, lists, objects), anything else a string; a
    key given twice is an error (it is never clear which one was meant).
    """
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ProviderError(f"--option {pair!r}: expected KEY=VALUE")
        if key in out:
            raise ProviderError(f"--option {key!r} is given twice")
        try:
            value: Any = json.loads(text)
        except ValueError:
            value = text
        out[key] = value
    return out


def options_model(factory_target: str) -> type[BaseModel] | None:
    """The ``Options`` model of the module a registry entry (``"module:factory"``) points at, if it has one."""
    module = importlib.import_module(factory_target.partition(":")[0])
    model = getattr(module, "Options", None)
    return model if isinstance(model, type) and issubclass(model, BaseModel) else None


def describe_options(name: str, model: type[BaseModel]) -> list[str]:
    """``name`` and one indented line per option: ``  key (type, default X): description``."""
    lines = [f"{name}:"]
    for key, field in model.model_fields.items():
        if get_origin(field.annotation) is Literal:
            kind = "|".join(str(a) for a in get_args(field.annotation))
        else:
            kind = getattr(field.annotation, "__name__", None) or str(field.annotation).replace("typing.", "")
        default = (
            "required"
            if field.is_required()
            else f"default {json.dumps(field.get_default(call_default_factory=True), default=str)}"
        )
        lines.append(f"  {key} ({kind}, {default}): {field.description or ''}".rstrip(": "))
    return lines
