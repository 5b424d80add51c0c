"""One way for a provider to declare, validate and list its own options.

Every provider module declares ``class Options(BaseModel)`` (each field with a ``description``; a module
with several factories maps them in ``OPTIONS``) and validates ``ProviderInputs.options`` with it. The
options reach it from ``topocast discover --option KEY=VALUE`` (repeatable; a value that parses as JSON is
taken as JSON, anything else as a string) or, in the functions, from ``TOPOCAST_PROVIDER_OPTIONS`` (a JSON
object), so no shell needs to know a provider's fields. An option may also have public names of its own,
declared next to it as ``Annotated[T, OptionSpec(env=..., flags=...)]``: a ``TOPOCAST_*`` variable
(:func:`env_options` reads them; ``topocast.config`` lists them) and dedicated ``topocast discover`` flags
(``topocast.cli.discover`` adds them). :func:`describe_options` prints a provider's options from the same
model (``discover --list-options``).
"""

from __future__ import annotations

import importlib
import json
import re
import types
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Self, TypeVar, Union, get_args, get_origin

from pydantic import BaseModel, Field, ValidationError, field_validator
from pydantic.fields import FieldInfo

from topocast.errors import ProviderError, TopocastError
from topocast.model.names import check_node_name
from topocast.safeio.validation import check_json_depth, validate

__all__ = [
    "ClusterConfig",
    "OptionRow",
    "OptionSpec",
    "describe_options",
    "env_options",
    "lax_scalar",
    "markdown_options",
    "option_rows",
    "option_specs",
    "options_model",
    "options_object_env",
    "parse_option_pairs",
    "provider_options",
    "split_list_text",
]

M = TypeVar("M", bound=BaseModel)


def provider_options(model: type[M], raw: Mapping[str, Any], provider: str) -> M:
    """``raw`` validated by ``model``; a failure is one line naming the provider, the option and the problem.

    ``None`` values are dropped first (a shell that passes every known key with ``None`` for unset ones
    gets the model's defaults).
    """
    data = {k: v for k, v in raw.items() if v is not None}
    lax = lax_scalar(model, data)
    if lax:
        raise ProviderError(f"provider {provider!r}: option {lax}")
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


def lax_scalar(model: type[BaseModel], data: Mapping[str, Any]) -> str | None:
    """``"'key' must be <kind>, not <value>"`` for the first typed value pydantic's lax mode would coerce.

    Pydantic reads ``true`` as 1 for an ``int`` and ``1.0`` as 1; an option is strict about its JSON type
    (as the graph loader is): a bool only for a bool option, a fraction-less float never for an int.
    Strings stay lax, since ``TOPOCAST_*`` variables are text by nature (``"4"`` for an ``int``).
    """
    for key, value in data.items():
        field = model.model_fields.get(key)
        if field is None or isinstance(value, str):
            continue
        kinds = _kinds(field.annotation)
        if Any in kinds:
            continue
        if isinstance(value, bool) and bool not in kinds and kinds & {int, float}:
            wanted = " or ".join(sorted(k.__name__ for k in kinds & {int, float}))
            return f"{key!r} must be {wanted}, not {json.dumps(value)}"
        if isinstance(value, float) and int in kinds and float not in kinds:
            return f"{key!r} must be int, not {json.dumps(value)}"
    return None


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


@dataclass(frozen=True)
class OptionSpec:
    """The public names of one option besides ``--option KEY=VALUE``: ``Annotated[T, OptionSpec(...)]``.

    ``env``: the functions' ``TOPOCAST_*`` variable (a list option, or one with ``split``, is split on
    ``split``, default ``;`` and ``,``; a mapping is JSON when the text starts with ``{``).
    ``flags``: ``topocast discover``'s dedicated flag(s): repeatable with ``many``, ``--x/--no-x`` for a
    ``bool`` option, a ``pathlib.Path`` argument with ``path``. ``help`` / ``env_help``: the flag's and
    the variable's text when the field's description is not the best one. ``required``: what
    ``topocast discover`` names when the option is missing (``"--project"``). ``from_flag``: the flag's
    value as the option's (``(flag, value) -> option value``), when they differ.
    """

    env: str | None = None
    flags: tuple[str, ...] = ()
    help: str = ""
    env_help: str = ""
    many: bool = False
    path: bool = False
    metavar: str | None = None
    split: str = ""
    required: str = ""
    from_flag: Callable[[str, Any], Any] | None = None


def option_specs(model: type[BaseModel]) -> Iterator[tuple[str, FieldInfo, OptionSpec]]:
    """``(key, field, spec)`` of every option of ``model`` that has public names of its own."""
    for key, field in model.model_fields.items():
        for meta in field.metadata:
            if isinstance(meta, OptionSpec):
                yield key, field, meta


def options_model(factory_target: str) -> type[BaseModel] | None:
    """The options model of the factory a registry entry (``"module:factory"``) points at, if it has one:
    the module's ``OPTIONS[factory]`` (a module with several providers), else its ``Options``."""
    module_name, _, factory = factory_target.partition(":")
    module = importlib.import_module(module_name)
    by_factory = getattr(module, "OPTIONS", None)
    model = by_factory.get(factory) if isinstance(by_factory, dict) else getattr(module, "Options", None)
    return model if isinstance(model, type) and issubclass(model, BaseModel) else None


def _kinds(annotation: Any) -> set[Any]:
    """The outer types an annotation allows (``list[str] | None`` -> ``{list, NoneType}``)."""
    if get_origin(annotation) in (Union, types.UnionType):
        return {k for arg in get_args(annotation) for k in _kinds(arg)}
    origin = get_origin(annotation)
    return {origin if origin is not None else annotation}


def split_list_text(raw: str, separators: str = ";,", what: str = "list") -> list[str]:
    """A list option given as text (a ``TOPOCAST_*`` variable): the one syntax of every list-valued variable.

    A JSON array of strings (``["mlx5_[0,1]", "!mlx5_8"]``) is taken as is; anything else is split on
    ``separators`` (``;`` and ``,``) *outside* ``[...]``, so a pattern's bracket keeps its commas
    (``mlx5_[0,1];!mlx5_8`` is two patterns). Items are stripped; empty ones dropped.
    """
    text = raw.strip()
    if text.startswith("[") and text.endswith("]"):
        try:
            check_json_depth(text, what, TopocastError)
            value = json.loads(text)
        except ValueError:
            value = None  # a lone pattern such as "[ab]*]": split below
        if isinstance(value, list):
            if not all(isinstance(v, str) for v in value):
                raise TopocastError(f"{what}: a JSON list must hold strings only")
            return [v.strip() for v in value if v.strip()]
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]" and depth:
            depth -= 1
        elif ch in separators and not depth:
            parts.append("".join(current))
            current = []
            continue
        current.append(ch)
    parts.append("".join(current))
    return [p.strip() for p in parts if p.strip()]


def _env_value(var: str, field: FieldInfo, spec: OptionSpec, raw: str) -> Any:
    kinds = _kinds(field.annotation)
    if list in kinds or spec.split:
        return split_list_text(raw, spec.split or ";,", var)
    mapping = dict in kinds or any(isinstance(k, type) and issubclass(k, BaseModel) for k in kinds)
    return _env_json(var, raw) if mapping and raw.lstrip().startswith("{") else raw


def _env_json(var: str, raw: str) -> Any:
    try:
        check_json_depth(raw, var, TopocastError)
        return json.loads(raw)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise TopocastError(f"{var} is not valid JSON: {exc}") from None


def env_options(model: type[BaseModel], read: Callable[[str], str | None]) -> dict[str, Any]:
    """The options ``model`` takes from ``TOPOCAST_*`` variables (``read(name)``; unset or empty: left out).

    A model may also name one variable holding several of its options as a JSON object
    (``ENV_OBJECT: ClassVar[OptionSpec]``, e.g. k8s-labels' ``TOPOCAST_NODE_LABELS``); it wins over the
    per-option variables.
    """
    out: dict[str, Any] = {}
    for key, field, spec in option_specs(model):
        raw = read(spec.env) if spec.env else None
        if raw:
            out[key] = _env_value(spec.env or "", field, spec, raw)
    whole = getattr(model, "ENV_OBJECT", None)
    if isinstance(whole, OptionSpec) and whole.env and (raw := read(whole.env)):
        value = _env_json(whole.env, raw)
        if not isinstance(value, dict):
            raise TopocastError(f"{whole.env} must be a JSON object")
        out.update(value)
    return out


@dataclass(frozen=True)
class OptionRow:
    """One option as ``--list-options`` and the docs show it."""

    key: str
    kind: str
    default: str  # "required" or "default <JSON>"
    description: str
    names: tuple[str, ...]  # its own flags and variable


def option_rows(model: type[BaseModel]) -> list[OptionRow]:
    """Every option of ``model``, in declaration order."""
    names = {key: (*spec.flags, *([spec.env] if spec.env else [])) for key, _, spec in option_specs(model)}
    rows = []
    for key, field in model.model_fields.items():
        kind = _kind_text(field.annotation)
        default = (
            "required"
            if field.is_required()
            else f"default {json.dumps(field.get_default(call_default_factory=True), default=_json_default)}"
        )
        rows.append(OptionRow(key, kind, default, field.description or "", names.get(key, ())))
    return rows


def _kind_text(annotation: Any, in_union: bool = False) -> str:
    """``"a|b"`` for a Literal, ``X | None`` for a union, a type by its bare name (never its module path)."""
    if get_origin(annotation) is Literal:
        return "|".join(str(a) for a in get_args(annotation))
    if get_origin(annotation) in (Union, types.UnionType):
        return " | ".join(_kind_text(a, in_union=True) for a in get_args(annotation))
    if annotation is type(None):
        return "None"
    if (not in_union or not get_args(annotation)) and (name := getattr(annotation, "__name__", None)):
        return str(name)  # a union keeps its members' parameters (list[int] | None), as before
    return re.sub(r"\b(?:\w+\.)+(\w+)", r"\1", str(annotation))  # typing.X, topocast.renderers.base.Y -> X, Y


def _json_default(value: Any) -> Any:
    """A nested options model's default as the JSON an options file would hold, not its repr."""
    return value.model_dump(mode="json") if isinstance(value, BaseModel) else str(value)


def options_object_env(model: type[BaseModel]) -> str | None:
    """``"TOPOCAST_X: meaning"`` when ``model`` names one variable holding its options as JSON (ENV_OBJECT)."""
    whole = getattr(model, "ENV_OBJECT", None)
    if isinstance(whole, OptionSpec) and whole.env:
        return f"{whole.env}: {whole.env_help or 'these options as a JSON object'}"
    return None


def describe_options(name: str, model: type[BaseModel], keys: Collection[str] | None = None) -> list[str]:
    """``name`` and one indented line per option: ``  key (type, default X): description [names]``
    (``[--flag, TOPOCAST_VAR]``: the option's own flags and variable, when it has them); ``keys``: only those
    (``topocast render --list-options``: the fields of ``RenderOptions`` a format reads)."""
    lines = [f"{name}:"]
    for row in option_rows(model):
        if keys is not None and row.key not in keys:
            continue
        also = f" [{', '.join(row.names)}]" if row.names else ""
        lines.append(f"  {row.key} ({row.kind}, {row.default}): {row.description}".rstrip(": ") + also)
    if whole := options_object_env(model):
        lines.append(f"  ({whole})")
    return lines


def markdown_options(name: str, model: type[BaseModel]) -> list[str]:
    """The same as :func:`describe_options`, as a Markdown table (``docs/providers.md``)."""
    lines = [f"`{name}`:", "", "| option | type | default | flag / variable | meaning |", "|---|---|---|---|---|"]
    for row in option_rows(model):
        names = ", ".join(f"`{n}`" for n in row.names)
        cells = [f"`{row.key}`", row.kind, row.default.removeprefix("default "), names, row.description]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    if whole := options_object_env(model):
        lines += ["", f"Also `{whole.partition(':')[0]}`:{whole.partition(':')[2]}."]
    return lines


class ClusterConfig(BaseModel):
    """A provider's options plus the cluster the shell names: ``class XConfig(Options, ClusterConfig)``.

    ``SOURCE`` names the configuration in errors (``"AWS discovery config: filters: ..."``).
    """

    SOURCE: ClassVar[str] = "discovery config"

    cluster: str = Field(description="Cluster name written into the graph.")

    @field_validator("cluster")
    @classmethod
    def _cluster(cls, v: str) -> str:
        return check_node_name(v, "the cluster name")

    @classmethod
    def from_data(cls, data: Any, source: str | None = None) -> Self:
        """Validate a dict; errors become :class:`ProviderError` naming the field (typed values strictly)."""
        lax = lax_scalar(cls, data) if isinstance(data, Mapping) else None
        if lax:
            raise ProviderError(f"{source or cls.SOURCE}: {lax}")
        return validate(cls, data, source or cls.SOURCE, ProviderError, keep_class=False)
