"""Kubernetes node labels: the *full* desired topology label set of every node.

Default keys are Topograph v1's, so Kueue/KAI/Volcano setups written for
Topograph keep working::

    fabric.topograph.run/tier-0: <leaf switch ID>     # tier-N = N-th switch above the node
    fabric.topograph.run/tier-1: <spine switch ID>
    accelerator.topograph.run/domain: <NVLink / UltraServer domain>
    accelerator.topograph.run/sub-domain: <rack inside the domain>

Values are raw switch IDs (not display names). A value Kubernetes would reject
(over 63 characters, or characters such as ``+ @ /``) becomes ``x`` + FNV-64a
hex, as Topograph does for long values. A node of which nothing is known (no
fabric, no domain) gets ``tier-0=no-topology``.

The output is the complete desired set, not a patch: a publisher sets these
keys and removes every other key for which :func:`owns_key` is true. That is
what fixes Topograph issue #408 (labels of tiers that disappeared were never
removed), while labels owned by anyone else are never touched.
"""

from __future__ import annotations

import json
import re
from itertools import chain
from operator import attrgetter
from typing import Any

from topocast.errors import RenderError
from topocast.model.fabric import NO_TOPOLOGY, node_columns
from topocast.model.gc_pause import paused_gc
from topocast.model.graph import TopologyGraph
from topocast.model.hostlist import compact_str
from topocast.renderers.base import OBJECTS_WANTED, Artifact, FormatRenderer, LabelScheme, Renderer, RenderOptions
from topocast.renderers.k8s_common import HOSTNAME_LABEL, check_label_key, label_value

FILENAME = "labels.json"
MEDIA_TYPE = "application/json"
FORMAT = "k8s-labels"


class LabelKeys:
    """The validated keys of a :class:`LabelScheme`; raises :class:`RenderError` on a bad scheme."""

    def __init__(self, scheme: LabelScheme) -> None:
        self.prefix = scheme.tier_prefix
        self.fixed = list(scheme.fabric_keys) if scheme.fabric_keys is not None else None
        self.accelerator = check_label_key(scheme.accelerator_key, "labels.accelerator_key")
        self.subdomain = check_label_key(scheme.subdomain_key, "labels.subdomain_key")
        self._tier: list[str] = []
        named = [("labels.accelerator_key", self.accelerator), ("labels.subdomain_key", self.subdomain)]
        if self.fixed is None:
            # Any tier number must give a valid key; checking tier 0 catches a bad prefix,
            # fabric_key() checks the (longer) keys of deep tiers as they are made.
            self.fabric_key(0)
            for what, key in named:
                if _is_tier_key(key, self.prefix):
                    raise RenderError(f"{what} {key!r} collides with the fabric tier keys {self.prefix}<N>")
        else:
            named = [(f"labels.fabric_keys[{i}]", k) for i, k in enumerate(self.fixed)] + named
        seen: dict[str, str] = {}
        for what, key in named:
            check_label_key(key, what)
            if key == HOSTNAME_LABEL:
                raise RenderError(f"{what} must not be {HOSTNAME_LABEL!r}: that label identifies the node")
            if key in seen:
                raise RenderError(f"{what} {key!r} is the same key as {seen[key]}; label keys must be unique")
            seen[key] = what
        for what, key in [("labels.tier_prefix", self.prefix)] * (self.fixed is None) + named:
            _check_not_foreign(key, what)

    def fabric_key(self, tier: int) -> str | None:
        """Key of fabric tier ``tier`` (0 = closest switch), None when the scheme omits that tier."""
        if self.fixed is not None:
            return self.fixed[tier] if tier < len(self.fixed) else None
        while len(self._tier) <= tier:
            n = len(self._tier)
            self._tier.append(check_label_key(f"{self.prefix}{n}", f"labels.tier_prefix (tier {n})"))
        return self._tier[tier]

    def fabric_levels(self, depth: int) -> int:
        """How many fabric tiers get a label when the deepest path has ``depth`` switches."""
        return depth if self.fixed is None else min(depth, len(self.fixed))


#: label key prefixes Kubernetes reserves for itself (node-role.kubernetes.io/*, topology.kubernetes.io/*...)
RESERVED_KEY_DOMAINS = ("kubernetes.io", "k8s.io")


def _check_not_foreign(key: str, what: str) -> None:
    """A scheme key (or tier prefix) must not be in a namespace Kubernetes owns.

    Every key of the scheme is *owned*: the publisher deletes owned keys it does
    not set. A scheme naming ``node-role.kubernetes.io/control-plane`` would strip
    that label from every node, so such schemes are refused outright.
    """
    domain = key.partition("/")[0] if "/" in key else ""
    if any(domain == d or domain.endswith("." + d) for d in RESERVED_KEY_DOMAINS):
        raise RenderError(
            f"{what} {key!r} is in the {domain} namespace, which Kubernetes reserves; topocast would remove "
            "or overwrite labels it does not own there. Use your own prefix (e.g. fabric.example.com/)"
        )


def _is_tier_key(key: str, prefix: str) -> bool:
    rest = key[len(prefix) :] if key.startswith(prefix) else ""
    return rest.isascii() and rest.isdigit()


def owns_key(key: str, scheme: LabelScheme) -> bool:
    """True for every label key topocast manages under ``scheme``.

    A publisher removes owned keys that are not in the desired set and never
    touches any other key. ``<tier_prefix><int>`` stays owned even with explicit
    ``fabric_keys``, so switching schemes cleans up the old tier labels.
    """
    if key in (scheme.accelerator_key, scheme.subdomain_key):
        return True
    if scheme.fabric_keys is not None and key in scheme.fabric_keys:
        return True
    return _is_tier_key(key, scheme.tier_prefix)


def node_labels(graph: TopologyGraph, keys: LabelKeys) -> tuple[list[dict[str, str]], dict[str, str]]:
    """Desired labels of each node in graph order, and ``{original value: label value}`` for every
    value changed.

    Nodes with the same leaf switch, domain and sub-domain have the same labels (a validated
    graph gives one path per leaf), so they share one (read-only) dict: ~6k dicts for 100k nodes.
    """
    cache: dict[str, str] = {}

    def value(raw: str) -> str:
        v = cache.get(raw)
        if v is None:
            v = cache[raw] = label_value(raw)
        return v

    col = node_columns(graph)
    depth = max(map(len, col.fabrics), default=0)
    tier_keys = [k for i in range(keys.fabric_levels(depth)) if (k := keys.fabric_key(i)) is not None]
    no_topology_key = keys.fabric_key(0)
    shape_of = col.shapes
    shapes: dict[tuple[str | None, str | None, str | None], dict[str, str]] = {}
    for shape, fabric in dict(zip(shape_of, col.fabrics, strict=True)).items():  # one path per leaf
        _, domain, sub = shape
        labels = shapes[shape] = {}
        for key, sw in zip(tier_keys, fabric, strict=False):
            labels[key] = value(sw)
        if not fabric and domain is None and no_topology_key is not None:
            labels[no_topology_key] = NO_TOPOLOGY
        if domain is not None:
            labels[keys.accelerator] = value(domain)
            if sub is not None:
                labels[keys.subdomain] = value(sub)
    _check_no_collision(cache)
    return list(map(shapes.__getitem__, shape_of)), {raw: v for raw, v in cache.items() if raw != v}


def _check_no_collision(values: dict[str, str]) -> None:
    """Two different topology values must never end up as one label value.

    Long or invalid values are hashed with Topograph's 64-bit FNV-1a (so label
    values match Topograph's); FNV is not collision resistant, and crafted IDs
    collide in minutes. Two switches sharing a label value would silently put
    their nodes in one topology domain, so a collision is a render error.
    """
    owner: dict[str, str] = {}
    for raw, label in values.items():
        other = owner.setdefault(label, raw)
        if other != raw:
            a, b = sorted((other, raw))
            raise RenderError(
                f"topology values {a[:80]!r} and {b[:80]!r} both become the label value {label!r}; "
                "rename one of them (a hash collision or a literal that looks like a hash)"
            )


def sample(names: list[str], limit: int = 160) -> str:
    """A hostlist of ``names`` for messages, cut at ``limit`` characters."""
    text = compact_str(sorted(names))
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _json(names: list[str], labels: list[dict[str, str]]) -> str:
    """``json.dumps(dict(zip(names, labels)), indent=2, sort_keys=True) + "\\n"`` for sorted ``names``,
    about 10x faster: the stdlib encoder drops to pure Python when indenting, and nodes of one
    leaf switch share their label dict (:func:`node_labels`), so each distinct body is formatted once."""
    if not names:
        return "{}\n"
    enc = json.encoder.encode_basestring_ascii
    escape = _NEEDS_ESCAPE.search("".join(names)) is not None  # graph node names never need it
    quote = "" if escape else '"'
    # '<name>": <body>,\n  "' for every node, joined in one C-level pass into the one 27 MB string of
    # a 100k-node graph: each distinct body is formatted once, with the glue up to the next name.
    bodies: dict[int, str] = {}  # id of a label dict (all alive in ``labels``) -> its JSON
    for key, inner in dict(zip(map(id, labels), labels, strict=True)).items():
        lines = ",\n".join(f"    {enc(k)}: {enc(inner[k])}" for k in sorted(inner))
        bodies[key] = f"{{\n{lines}\n  }}" if inner else "{}"
    glued = {key: f"{quote}: {body},\n  {quote}" for key, body in bodies.items()}
    tails = list(map(glued.__getitem__, map(id, labels)))
    tails[-1] = f"{quote}: {bodies[id(labels[-1])]}\n}}\n"
    quoted = list(map(enc, names)) if escape else names
    return "".join(chain((f"{{\n  {quote}",), chain.from_iterable(zip(quoted, tails, strict=True))))


#: characters ``json.dumps`` (ensure_ascii) would escape
_NEEDS_ESCAPE = re.compile(r'["\\\x00-\x1f\x7f-\U0010ffff]')


def render(graph: TopologyGraph, options: RenderOptions) -> Artifact:
    keys = LabelKeys(options.labels)
    with paused_gc():
        return _render(graph, keys)


def _render(graph: TopologyGraph, keys: LabelKeys) -> Artifact:
    per_node, changed = node_labels(graph, keys)
    warnings: list[str] = []
    if changed:
        shown = ", ".join(f"{raw!r} -> {v}" for raw, v in sorted(changed.items())[:5])
        more = f" and {len(changed) - 5} more" if len(changed) > 5 else ""
        warnings.append(
            f"{len(changed)} topology value(s) are not valid Kubernetes label values and were hashed: {shown}{more}"
        )
    nodes = graph.nodes
    in_order = node_columns(graph).names
    names = sorted(in_order)
    # The graph store writes nodes sorted by name; otherwise look each node's labels up by name.
    labels = per_node if names == in_order else list(map(dict(zip(in_order, per_node, strict=True)).__getitem__, names))
    pending = (
        sorted(n.name for n in nodes if n.accelerator_pending and n.accelerator is None)
        if any(map(attrgetter("accelerator_pending"), nodes))
        else []
    )
    if pending:
        warnings.append(
            f"{len(pending)} node(s) wait for the provider to report their accelerator domain "
            f"({sample(pending)}); their domain labels are left as they are"
        )
    fabrics = node_columns(graph).fabrics
    bare = [] if all(fabrics) else sorted(n.name for n in nodes if not n.fabric and n.accelerator is None)
    if bare and keys.fabric_key(0) is not None:
        label = f"{keys.fabric_key(0)}={NO_TOPOLOGY}"
        warnings.append(f"{len(bare)} node(s) have no topology and get {label}: {sample(bare)}")
    pending_set = set(pending)
    keep = [keys.accelerator, keys.subdomain]
    objects: list[dict[str, Any]] = (
        []
        if not OBJECTS_WANTED.get()
        else [
            {
                "node": n.name,
                "id": n.id,
                "labels": node_labels,  # shared between nodes of one leaf: read-only
                # Owned keys whose value is unknown right now (not gone): a publisher leaves them as they are.
                "keep": list(keep) if n.name in pending_set else [],
            }
            for n, node_labels in zip(sorted(nodes, key=attrgetter("name")), labels, strict=True)
        ]
    )
    content = _json(names, labels)
    return Artifact(FORMAT, FILENAME, content, MEDIA_TYPE, len(graph.nodes), objects, warnings)


RENDERER: Renderer = FormatRenderer(FORMAT, FILENAME, MEDIA_TYPE, "kubernetes-labels", ("labels",), render)
