"""Kubernetes naming rules and YAML output shared by the Kubernetes-side renderers.

The API server rejects an object whose names break these rules, and a publisher
only finds out at apply time. Checking here turns that into a render error that
names the offending key or value, before anything is written.

Rules (Kubernetes ``apimachinery/pkg/util/validation``):

* label key = qualified name: optional ``<DNS-1123 subdomain>/`` prefix (<= 253)
  plus a name of <= 63 characters ``[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?``;
* label value: empty, or <= 63 characters of the same shape as a name;
* object names (ConfigMap, HyperNode, Topology): DNS-1123 subdomain, lowercase;
* namespaces: DNS-1123 label (<= 63, no dots).
"""

from __future__ import annotations

import functools
import hashlib
import operator
import re
from typing import TYPE_CHECKING, Any

from topocast.errors import RenderError
from topocast.model.fabric import node_columns, shared

if TYPE_CHECKING:
    from topocast.model.graph import TopologyGraph

MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "topocast"
HOSTNAME_LABEL = "kubernetes.io/hostname"

MAX_LABEL_VALUE = 63
MAX_SUBDOMAIN = 253

_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_CONFIGMAP_KEY = re.compile(r"[-._a-zA-Z0-9]+")

_FNV64_OFFSET = 0xCBF29CE484222325
_FNV64_PRIME = 0x100000001B3
_MASK64 = 0xFFFFFFFFFFFFFFFF


def qualified_name_problem(key: str) -> str | None:
    """Why ``key`` is not a valid label key (Kubernetes qualified name), or None."""
    if not key:
        return "it is empty"
    prefix, sep, name = key.rpartition("/")
    if sep:
        if not prefix:
            return "the prefix before '/' is empty"
        if len(prefix) > MAX_SUBDOMAIN or not _DNS_SUBDOMAIN.fullmatch(prefix):
            return f"prefix {prefix!r} must be a lowercase DNS subdomain (e.g. example.com)"
    if len(name) > MAX_LABEL_VALUE:
        return f"the name part {name!r} is {len(name)} characters (limit 63)"
    if not _NAME.fullmatch(name):
        return (
            f"the name part {name!r} must be letters, digits, '-', '_' or '.', "
            "starting and ending with a letter or digit"
        )
    return None


def check_label_key(key: str, where: str) -> str:
    problem = qualified_name_problem(key)
    if problem:
        raise RenderError(f"{where} {key!r} is not a valid Kubernetes label key: {problem}")
    return key


def is_label_value(value: str) -> bool:
    return value == "" or (len(value) <= MAX_LABEL_VALUE and _NAME.fullmatch(value) is not None)


def fnv64a_hex(value: str) -> str:
    """FNV-1a 64-bit of the UTF-8 bytes, as Go's ``%x`` prints it (no zero padding)."""
    h = _FNV64_OFFSET
    for byte in value.encode():
        h = ((h ^ byte) * _FNV64_PRIME) & _MASK64
    return format(h, "x")


def label_value(value: str) -> str:
    """``value`` itself when Kubernetes accepts it as a label value, else ``x`` + FNV-64a hex.

    Topograph hashes only values longer than 63 characters; we also hash values
    with characters or edges Kubernetes rejects (``+``, ``@``, ``/``...), which
    would otherwise make the whole node PATCH fail.
    """
    if is_label_value(value):
        return value
    return "x" + fnv64a_hex(value)


def is_dns_subdomain(name: str) -> bool:
    return len(name) <= MAX_SUBDOMAIN and _DNS_SUBDOMAIN.fullmatch(name) is not None


def all_dns_subdomains(names: list[str]) -> bool:
    """``all(map(is_dns_subdomain, names))`` in C-level passes (the node names of a large graph)."""
    return not names or (max(map(len, names)) <= MAX_SUBDOMAIN and all(map(_DNS_SUBDOMAIN.fullmatch, names)))


def check_dns_subdomain(name: str, what: str) -> str:
    if not is_dns_subdomain(name):
        raise RenderError(
            f"{what} {name!r} is not a valid Kubernetes object name: use at most 253 lowercase letters, "
            "digits, '-' and '.', starting and ending with a letter or digit"
        )
    return name


def all_dns_labels(names: list[str]) -> bool:
    """Would :func:`check_dns_label` accept every one of ``names``? (in C-level passes)"""
    return not names or (max(map(len, names)) <= MAX_LABEL_VALUE and all(map(_DNS_LABEL.fullmatch, names)))


def dns_label_node_names(graph: TopologyGraph) -> bool:
    """Is every node name of ``graph`` a DNS label (:func:`check_dns_label`)? What most clusters name
    their nodes; such a name is also a DNS subdomain of at most 63 characters. Asked once per render
    call (Volcano and Slinky both need it)."""
    return shared(graph, "dns-label-node-names", lambda: all_dns_labels(node_columns(graph).names))


def check_dns_label(name: str, what: str) -> str:
    if len(name) > MAX_LABEL_VALUE or not _DNS_LABEL.fullmatch(name):
        raise RenderError(
            f"{what} {name!r} is not valid: use at most 63 lowercase letters, digits and '-', "
            "starting and ending with a letter or digit"
        )
    return name


def check_configmap_key(key: str, what: str) -> str:
    if not key or len(key) > MAX_SUBDOMAIN or not _CONFIGMAP_KEY.fullmatch(key) or key in (".", ".."):
        raise RenderError(f"{what} {key!r} is not a valid ConfigMap key: use letters, digits, '-', '_' and '.'")
    return key


def dns_name(raw: str, max_len: int = MAX_LABEL_VALUE) -> str:
    """Map an arbitrary ID to a lowercase DNS-1123 name of at most ``max_len`` characters.

    IDs that already qualify are kept. Others are lowercased, invalid characters
    become '-', and a short hash of the *original* ID is appended, so two IDs
    that differ only in case or punctuation never map to the same name.
    """
    if len(raw) <= max_len and _DNS_SUBDOMAIN.fullmatch(raw):
        return raw
    suffix = hashlib.sha256(raw.encode()).hexdigest()[:8]
    # Runs of anything else become one '-' (dots too: a dot next to a '-' would be invalid).
    base = re.sub(r"[^a-z0-9]+", "-", raw.lower()).strip("-")[: max_len - len(suffix) - 1].strip("-")
    return f"{base}-{suffix}" if base else f"x-{suffix}"


@functools.cache
def _pyyaml() -> tuple[Any, type, Any]:
    """PyYAML, topocast's dumper and a resolver, imported on first use: k8s-labels (JSON) never
    needs them, and ``import yaml`` is a tenth of ``topocast render``'s start-up."""
    import yaml

    class Dumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):  # type: ignore[misc]
        """Safe dumper that prints multi-line strings as ``|`` blocks (a ConfigMap's file stays readable)."""

    def represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
        style = "|" if "\n" in value else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    Dumper.add_representer(str, represent_str)
    return yaml, Dumper, yaml.resolver.Resolver()


# The fast path below prints exactly what PyYAML prints, for the simple shapes
# Kubernetes objects have. PyYAML's representer costs ~30 us per value, which is
# seconds for 100k HyperNode members; formatting the text directly is ~20x faster.
_PLAIN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]*")
_STR_TAG = "tag:yaml.org,2002:str"


class _NotSimple(Exception):
    """A value the fast path does not handle: PyYAML prints the document instead."""


def _scalar(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str) and _PLAIN.fullmatch(value):
        # Strings that would read back as another type (1101, true, 1e3, null) get quotes.
        if value[0] not in _resolved_first_chars():
            return value  # no implicit type starts with this character (node names: "gpu-…")
        yaml, _, resolver = _pyyaml()
        plain = resolver.resolve(yaml.ScalarNode, value, (True, False)) == _STR_TAG
        return value if plain else f"'{value}'"
    raise _NotSimple


@functools.cache
def _resolved_first_chars() -> frozenset[str | None]:
    """The first characters PyYAML's resolver has an implicit type for (it picks its candidate
    patterns by the value's first character); everything when it also has a wildcard pattern."""
    _, _, resolver = _pyyaml()
    keys = frozenset(resolver.yaml_implicit_resolvers)
    if None in keys or resolver.yaml_path_resolvers:
        return frozenset(chr(c) for c in range(0x110000))
    return keys


def _memo_scalar(v: object, memo: dict[str, str]) -> str:
    if type(v) is not str:  # only strings: True == 1 would share a slot
        return _scalar(v)
    text = memo.get(v)
    if text is None:
        text = memo[v] = _scalar(v)
    return text


def all_plain(values: list[str], *, dns_labels: bool = False) -> bool:
    """Does every one of ``values`` print as itself, unquoted, in dump_yaml (checked in bulk)?

    ``dns_labels``: the caller knows them to be DNS labels (:func:`dns_label_node_names`), which
    are plain strings of plain characters: only their first characters are left to check.
    """
    if not dns_labels and (not set(map(type, values)) <= {str} or not all(values)):  # strings, none empty
        return False
    if not _resolved_first_chars().isdisjoint(map(_first_char, values)):
        return False
    return dns_labels or all(map(_PLAIN.fullmatch, values))


_first_char = operator.itemgetter(0)


def yaml_scalar(value: object, memo: dict[str, str] | None) -> str | None:
    """``value`` as dump_yaml's fast path prints it (memoized in ``memo`` when given: for values
    that repeat), or None when only PyYAML can print it: for renderers that format a repetitive
    part of a document themselves."""
    try:
        return _scalar(value) if memo is None else _memo_scalar(value, memo)
    except _NotSimple:
        return None


def _emit(value: object, pad: str, out: list[str], memo: dict[str, str]) -> None:
    """Block-style lines of a non-empty mapping at indent ``pad`` (sequences not indented, as PyYAML)."""
    if not isinstance(value, dict):
        raise _NotSimple
    scalar = _memo_scalar
    for key, item in value.items():
        k = scalar(key, memo)
        if isinstance(item, dict) and item:
            out.append(f"{pad}{k}:")
            _emit(item, pad + "  ", out, memo)
        elif isinstance(item, list) and item:
            out.append(f"{pad}{k}:")
            for element in item:
                if isinstance(element, dict) and element:
                    start = len(out)
                    _emit(element, pad + "  ", out, memo)
                    out[start] = f"{pad}- {out[start][len(pad) + 2 :]}"
                else:
                    out.append(f"{pad}- {scalar(element, memo)}")
        elif isinstance(item, (dict, list)):
            out.append(f"{pad}{k}: {'{}' if isinstance(item, dict) else '[]'}")
        else:
            out.append(f"{pad}{k}: {scalar(item, memo)}")


def dump_yaml(docs: list[dict[str, Any]], memo: dict[str, str] | None = None) -> str:
    """``---``-separated YAML documents, keys in insertion order (Kubernetes style).

    Byte-identical to ``yaml.safe_dump_all(docs, sort_keys=False, explicit_start=True)``
    except that multi-line strings are ``|`` blocks. ``memo`` (printed scalars) may be shared by calls.
    """
    parts: list[str] = []
    memo = {} if memo is None else memo  # keys and values repeat a lot ("type", "Node", "selector"...)
    for doc in docs:
        lines = ["---"]
        try:
            _emit(doc, "", lines, memo)
            parts.append("\n".join(lines) + "\n")
        except _NotSimple:
            yaml, dumper, _ = _pyyaml()
            parts.append(yaml.dump(doc, Dumper=dumper, sort_keys=False, explicit_start=True))
    return "".join(parts)
