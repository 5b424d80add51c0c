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
from typing import Any

from topocast.errors import RenderError
from topocast.fabric import NO_TOPOLOGY
from topocast.graph import TopologyGraph
from topocast.hostlist import compact_str
from topocast.renderers.base import Artifact, LabelScheme, RenderOptions
from topocast.renderers.k8s_common import HOSTNAME_LABEL, check_label_key, label_value, paused_gc

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


def node_labels(graph: TopologyGraph, keys: LabelKeys) -> tuple[dict[str, dict[str, str]], dict[str, str]]:
    """Desired labels per node name, and ``{original value: label value}`` for every value changed."""
    cache: dict[str, str] = {}

    def value(raw: str) -> str:
        v = cache.get(raw)
        if v is None:
            v = cache[raw] = label_value(raw)
        return v

    depth = max((len(n.fabric) for n in graph.nodes), default=0)
    tier_keys = [k for i in range(keys.fabric_levels(depth)) if (k := keys.fabric_key(i)) is not None]
    no_topology_key = keys.fabric_key(0)
    out: dict[str, dict[str, str]] = {}
    for node in graph.nodes:
        labels: dict[str, str] = {}
        for key, sw in zip(tier_keys, node.fabric, strict=False):
            labels[key] = value(sw)
        if not node.fabric and node.accelerator is None and no_topology_key is not None:
            labels[no_topology_key] = NO_TOPOLOGY
        if node.accelerator is not None:
            labels[keys.accelerator] = value(node.accelerator)
            if node.subdomain is not None:
                labels[keys.subdomain] = value(node.subdomain)
        out[node.name] = labels
    return out, {raw: v for raw, v in cache.items() if raw != v}


def sample(names: list[str], limit: int = 160) -> str:
    """A hostlist of ``names`` for messages, cut at ``limit`` characters."""
    text = compact_str(sorted(names))
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _json(labels: dict[str, dict[str, str]]) -> str:
    """``json.dumps(labels, indent=2, sort_keys=True) + "\\n"``, about 10x faster: the stdlib
    encoder drops to pure Python when indenting, and most nodes share their label set
    with the other nodes of their leaf switch, so each distinct body is formatted once."""
    enc = json.encoder.encode_basestring_ascii
    bodies: dict[tuple[tuple[str, str], ...], str] = {}
    parts: list[str] = []
    for name in sorted(labels):
        inner = labels[name]
        shape = tuple(inner.items())
        body = bodies.get(shape)
        if body is None:
            if inner:
                lines = ",\n".join(f"    {enc(k)}: {enc(inner[k])}" for k in sorted(inner))
                body = bodies[shape] = f"{{\n{lines}\n  }}"
            else:
                body = bodies[shape] = "{}"
        parts.append(f"  {enc(name)}: {body}")
    if not parts:
        return "{}\n"
    return "{\n" + ",\n".join(parts) + "\n}\n"


def render(graph: TopologyGraph, options: RenderOptions) -> Artifact:
    keys = LabelKeys(options.labels)
    with paused_gc():
        return _render(graph, keys)


def _render(graph: TopologyGraph, keys: LabelKeys) -> Artifact:
    labels, changed = node_labels(graph, keys)
    warnings: list[str] = []
    if changed:
        shown = ", ".join(f"{raw!r} -> {v}" for raw, v in sorted(changed.items())[:5])
        more = f" and {len(changed) - 5} more" if len(changed) > 5 else ""
        warnings.append(
            f"{len(changed)} topology value(s) are not valid Kubernetes label values and were hashed: {shown}{more}"
        )
    pending = sorted(n.name for n in graph.nodes if n.accelerator_pending and n.accelerator is None)
    if pending:
        warnings.append(
            f"{len(pending)} node(s) wait for the provider to report their accelerator domain "
            f"({sample(pending)}); their domain labels are left as they are"
        )
    bare = sorted(n.name for n in graph.nodes if not n.fabric and n.accelerator is None)
    if bare and keys.fabric_key(0) is not None:
        label = f"{keys.fabric_key(0)}={NO_TOPOLOGY}"
        warnings.append(f"{len(bare)} node(s) have no topology and get {label}: {sample(bare)}")
    pending_set = set(pending)
    objects: list[dict[str, Any]] = [
        {
            "node": n.name,
            "id": n.id,
            "labels": labels[n.name],
            # Owned keys whose value is unknown right now (not gone): a publisher leaves them as they are.
            "keep": [keys.accelerator, keys.subdomain] if n.name in pending_set else [],
        }
        for n in sorted(graph.nodes, key=lambda n: n.name)
    ]
    return Artifact(FORMAT, FILENAME, _json(labels), MEDIA_TYPE, len(graph.nodes), objects, warnings)
