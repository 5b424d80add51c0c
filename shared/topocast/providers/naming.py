"""Node names for cloud machines: one rule for every provider that names machines from cloud data.

A machine (EC2 instance, Compute Engine VM) has a unique key (its ID, the name of last resort) and the
name its source gives (a tag, a label, a template, the VM name). Names are what Slurm and Kubernetes
see, so two machines must never share one, and a machine must not be renamed under a running job
without a reason. The rule, the same on every cloud and in full and incremental discovery:

- a machine whose source gives no usable name takes its provider's fallback (GCP: the VM name), else
  its key;
- a name claimed by several machines stays with the one that already held it (a node outside this
  batch, or the machine that had it in the previous graph); every other claimant is named by its key
  and *waits* for the name (:data:`WANTED_NAME_LABEL` on its node);
- when nobody held it before, no claimant gets it: all are named by their key and wait (which of two
  new machines deserves a contested name is not topocast's guess);
- a waiting machine takes its name once no node holds it, unless several wait for it
  (:func:`claim_freed_names`): a replacement reusing a terminated machine's name gets it as soon as the
  termination is applied, in whatever order the two events arrive.

:func:`name_machines` applies it to a batch of machines read one by one or listed (AWS, GCP: full and
incremental discovery, names held outside the batch kept); :func:`name_listing` to one full listing (OCI,
Nebius, Azure: no per-machine read), with the previous graph as the record of who held a name.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from topocast.errors import UnsafeNameError
from topocast.model.graph import Node, TopologyGraph
from topocast.model.names import check_node_name

__all__ = [
    "WANTED_NAME_LABEL",
    "ListedNames",
    "Machine",
    "NameRequest",
    "Naming",
    "assign_names",
    "claim_freed_names",
    "name_listing",
    "name_machines",
    "summary",
]

#: on a node named by its key because another machine held its name: the name it waits for
WANTED_NAME_LABEL = "topocast/wanted-name"


def summary(what: str, items: Sequence[str], limit: int = 10) -> str:
    """``"3 instance(s) …: a, b, c"``: a warning line naming at most ``limit`` items."""
    shown = ", ".join(sorted(items)[:limit])
    more = f" (+{len(items) - limit} more)" if len(items) > limit else ""
    return f"{len(items)} {what}: {shown}{more}"


@dataclass(frozen=True)
class NameRequest:
    """One machine's claim. ``name`` is already checked (``names.check_node_name``) or None."""

    key: str  #: the unique machine ID: the name of last resort
    name: str | None  #: the name its source gives; None when there is none or it is unsafe
    problem: str | None = None  #: why ``name`` is None, for the warning ("have no tag 'Name'")
    fallback: str | None = None  #: a checked name to use before the key when ``name`` is None
    shown: str = ""  #: how warnings show the machine (default: its key)


@dataclass
class Naming:
    names: dict[str, str] = field(default_factory=dict)  #: key -> node name
    wanted: dict[str, str] = field(default_factory=dict)  #: key -> the name it waits for
    warnings: list[str] = field(default_factory=list)


def assign_names(
    requests: Iterable[NameRequest],
    *,
    held: Mapping[str, str],
    previous: Mapping[str, str],
    noun: str,
    source: str,
) -> Naming:
    """Names for ``requests`` (see the module docstring for the rule).

    ``held``: name -> key of the nodes outside this batch (they keep their names). ``previous``: key ->
    the name the machine had in the previous graph. ``noun`` ("instance(s)") and ``source``
    ("name_from=tag:Name") word the warnings.
    """
    out = Naming()
    shown: dict[str, str] = {}
    problems: dict[str, list[str]] = {}
    for req in requests:
        shown[req.key] = req.shown or req.key
        if req.name is not None:
            out.names[req.key] = req.name
        else:
            out.names[req.key] = req.fallback or req.key
            problems.setdefault(req.problem or "have no usable name", []).append(shown[req.key])
    claimants: dict[str, list[str]] = {}
    for key, name in out.names.items():
        claimants.setdefault(name, []).append(key)
    contested: list[str] = []
    for name, keys in claimants.items():
        holder = held.get(name)
        if holder is not None and holder not in keys:
            winner = None  # a node outside this batch holds it
        elif len(keys) == 1:
            continue
        else:
            had_it = [k for k in keys if previous.get(k) == name]
            winner = had_it[0] if len(had_it) == 1 else None
        for key in keys:
            if key != winner and name != key:
                out.names[key] = key
                out.wanted[key] = name
                contested.append(shown[key])
    if contested:
        problems.setdefault("share their name with another machine; named by ID until it is free", []).extend(contested)
    out.warnings = [summary(f"{noun} {why} ({source})", items) for why, items in problems.items()]
    return out


@dataclass(frozen=True)
class Machine:
    """One machine as its provider's ``name_from`` option reads it."""

    key: str  #: the unique machine ID: the name of last resort
    name: str | None  #: the name its source gives, unchecked; None when it gives none
    source: str  #: what gives the name, for warnings ("tag 'Name'", "label slurm-name")
    shown: str = ""  #: how warnings and errors show the machine (default: its key)
    fallback: str | None = None  #: a name to try before the key when ``name`` is unusable (GCP: the VM name)


def name_machines(
    machines: Iterable[Machine],
    *,
    kind: str,
    name_from: str,
    taken: Mapping[str, str],
    previous: TopologyGraph | None,
) -> Naming:
    """Node name per machine key by the rule of this module. A machine whose name is missing or unsafe takes
    its checked ``fallback``, else its key, with a warning saying which (``kind`` words them: "instance").
    ``taken``: name -> key of the nodes outside this batch; ``previous``: the graph whose nodes' ``id`` says
    who held a name."""
    requests = []
    for m in machines:
        shown = m.shown or m.key
        fallback = m.fallback if m.fallback is not None and _safe(m.fallback) else None
        if m.name is None:
            requests.append(NameRequest(m.key, None, f"have no {m.source}", fallback, m.shown))
            continue
        try:
            requests.append(NameRequest(m.key, check_node_name(m.name, f"{kind} {shown}"), shown=m.shown))
        except UnsafeNameError:
            requests.append(NameRequest(m.key, None, f"have an unsafe name from {m.source}", fallback, m.shown))
    before = {n.id: n.name for n in previous.nodes if n.id} if previous else {}
    return assign_names(requests, held=taken, previous=before, noun=f"{kind}(s)", source=f"name_from={name_from}")


def claim_freed_names(nodes: dict[str, Node], noun: str) -> list[str]:
    """Nodes (key -> node, changed in place) named by their key while waiting for a name take it
    once no node holds it and they are its only claimant; returns the warning saying so."""
    used = {n.name for n in nodes.values()}
    waiting: dict[str, list[str]] = {}
    for key, node in nodes.items():
        wanted = node.labels.get(WANTED_NAME_LABEL)
        if wanted is not None and node.name == key:
            waiting.setdefault(wanted, []).append(key)
    renamed: list[str] = []
    for wanted, keys in sorted(waiting.items()):
        if wanted in used or len(keys) != 1:
            continue
        node = nodes[keys[0]]
        labels = {k: v for k, v in node.labels.items() if k != WANTED_NAME_LABEL}
        nodes[keys[0]] = node.model_copy(update={"name": wanted, "labels": labels})
        used.add(wanted)
        renamed.append(keys[0])
    return [summary(f"{noun} named by ID took their name once its holder left", renamed)] if renamed else []


@dataclass
class ListedNames:
    """:func:`name_listing`'s answer, one entry per listed machine in the listing's order."""

    #: the node name; None when the source gives none and the key is no safe node name (set it aside)
    names: list[str | None]
    #: ``{WANTED_NAME_LABEL: name}`` for a machine named by its key while it waits for ``name``, else ``{}``
    labels: list[dict[str, str]]
    warnings: list[str]


def _safe(name: str) -> bool:
    try:
        check_node_name(name)
    except UnsafeNameError:
        return False
    return True


def name_listing(
    listed: Sequence[tuple[str, str | None]],
    previous: TopologyGraph | None,
    name_from: str,
    *,
    noun: str = "instance(s)",
    problem: str | None = None,
) -> ListedNames:
    """Node names for one full listing by the rule of this module: ``listed`` is ``(key, name)`` per machine,
    the name as its source gives it (None or "" when it gives none; the key "" when the machine has none).

    A machine without a name is named by its key when that is a safe node name. A contested name stays
    with the machine that had it in ``previous`` (its nodes' ``id`` is the key). What the rule cannot
    decide keeps the name the source gave, for :func:`topocast.model.placement.place_nodes` to set aside
    with its reason: an unsafe name, a machine without a key or whose key is listed twice. ``name_from``
    (the option) and ``problem`` (default "have no <name_from>") word the warnings.
    """
    listed_keys = Counter(key for key, _ in listed if key)
    requests = []
    for key, name in listed:
        if not key or listed_keys[key] > 1:
            continue
        if name:
            if _safe(name):
                requests.append(NameRequest(key, name))
        elif _safe(key):
            requests.append(NameRequest(key, None, problem or f"have no {name_from}"))
    before = {n.id: n.name for n in previous.nodes if n.id} if previous else {}
    naming = assign_names(requests, held={}, previous=before, noun=noun, source=f"name_from={name_from}")
    names: list[str | None] = []
    labels: list[dict[str, str]] = []
    for key, name in listed:
        names.append(naming.names.get(key) or name or None)
        labels.append({WANTED_NAME_LABEL: naming.wanted[key]} if key in naming.wanted else {})
    return ListedNames(names, labels, naming.warnings)
