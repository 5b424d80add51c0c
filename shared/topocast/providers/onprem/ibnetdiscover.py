"""InfiniBand fabrics from ``ibnetdiscover`` output -> :class:`TopologyGraph` (provider ``ibnetdiscover``).

Reads the default ``ibnetdiscover`` topology format: one record per node
(``Switch``/``Ca``/``Rt`` line after ``vendid=``-style header lines), one line
per connected port, a blank line between records::

    Switch  65 "S-2c5eab0300b87a80"   # "MF0;A09-P1-IBLEAF-01-02:MQM9701/U1" enhanced port 0 lid 120 lmc 0
    [1]     "H-e09d7303008594bc"[1](e09d7303008594bc)   # "a06-p1-dgx-02-c01 HCA-1" lid 525 4xNDR
    [35]    "S-2c5eab0300c26280"[9]   # "MF0;A10-P1-IBSPINE-02:MQM9701/U1" lid 236 4xNDR

    Ca      1 "H-e09d7303008594bc"    # "a06-p1-dgx-02-c01 HCA-1"
    [1](e09d7303008594bc)   "S-2c5eab0300b87a80"[1]   # lid 525 lmc 0 "MF0;A09-..." lid 120 4xNDR

Mapping to the graph:

* **Hosts** come from ``Ca`` node descriptions: ``host_regex`` (default
  ``(?P<host>\\S+)\\s+\\S+``, i.e. rdma-ndd's ``"%h %d"``: ``"dgx-01 mlx5_0"`` ->
  ``dgx-01``) must match the whole description; group ``host`` (or group 1)
  is the node name. Other HCAs (unnamed ``"MT4129 ConnectX7 ..."``, SHARP
  aggregation nodes) are not hosts. ``nodes`` restricts the graph to those hosts;
  a requested host missing from the fabric is kept without fabric and reported.
* **Leaves** are the host-carrying switches except the upper-tier ones a stray host
  is cabled to (see :func:`_leaves`); a host's cable to an upper tier is ignored
  (warning; a host with no leaf cable has no topology). **Upper tiers** follow from
  switch-to-switch links by distance from the leaves (links inside a tier are ignored).
* **Machines**: a host name two machines claim (by ``sysimgguid``, :func:`_claims`)
  is set aside, never merged.
* **CLOS collapse and multi-rail**: :func:`topocast.providers.clos.collapse`
  (identical-children merge, then "most cables" choice). Switch IDs are the raw
  ``S-<guid>``; ``switch_names=True`` adds the descriptions' names
  (``MF0;NAME:MODEL`` -> ``NAME``) as display names.
* **Port selection** (``selection``, :mod:`topocast.providers.port_selection`): on a
  dual-fabric dump (compute + storage HCAs), only the selected HCAs are host cables and only
  the switches they reach (never through a storage leaf) are placed (:func:`_select`).
* **Accelerator domains** are not in the IB fabric: pass ``domains`` (see
  :mod:`topocast.providers.domains`). They only annotate hosts the fabric (or
  ``nodes``) names; entries for other hosts are reported and ignored.

Deliberate divergence from Topograph (``pkg/ib``): Topograph treats only switches
with *requested* hosts as leaves, so a leaf whose hosts were not requested
becomes a bogus tier above the spines (in its own test data the root is the
leaf ``A09-P1-IBLEAF-04-04``). We keep such leaves at tier 0;
``topograph_compat=True`` restores Topograph's rule for byte-for-byte comparisons.

One bad record (an unreadable or unsafe description, a damaged line) is set aside
in ``graph.unplaced`` with its line; the rest is placed (:func:`topocast.model.placement.place_nodes`).
Output unusable as a whole fails with :class:`ProviderError` ``<file>:<line>: what``:
no readable record, links to nodes the output never describes or that only one end
reports (a cut-off file), duplicate records. :func:`check_upload` is the same parse
and build, for the upload quarantine and the collector. Pure: no I/O except
reading the files :func:`discover` is given.
"""

from __future__ import annotations

import re
from collections import defaultdict, deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from topocast.errors import ProviderError, UnsafeNameError
from topocast.model.graph import Node
from topocast.model.hostlist import compact_str
from topocast.model.names import MAX_SWITCH_NAME, check_name, check_node_name, check_switch_name
from topocast.model.placement import place_nodes, record_label
from topocast.providers.base import DiscoveryResult
from topocast.providers.clos import Collapse, collapse, summarize_choices
from topocast.providers.domains import HostDomain, load_domains
from topocast.providers.port_selection import PortSelection, no_host_selected
from topocast.safeio.limits import MAX_UPLOAD_BYTES, check_size, read_capped

__all__ = [
    "DEFAULT_HOST_REGEX",
    "Fabric",
    "IbNode",
    "build_graph",
    "check_upload",
    "discover",
    "parse",
    "uplinks",
]

PROVIDER = "ibnetdiscover"
DEFAULT_HOST_REGEX = r"(?P<host>\S+)\s+\S+"

_RECORD = re.compile(r'^(Switch|Ca|Rt)\s+(\d+)\s+"([^"]+)"\s*#\s*"([^"]*)"(.*)$')
# [port][ext]  "remote"[rport][ext](guid)   # comment    (Ca lines carry (portguid) after [port])
_PORT = re.compile(
    r'^\[(\d+)\](?:\[[^\]]*\])?(?:\(([0-9A-Fa-f]+)\))?\s+"([^"]+)"\[(\d+)\](?:\[[^\]]*\])?(?:\([0-9A-Fa-f]+\))?\s*#(.*)$'
)
_META = re.compile(r"^[A-Za-z_]\w*=\S+$")
_SWITCH_NAME = re.compile(r"^[^;:]+;([^;:]+):[^;:]+$")


@dataclass(frozen=True)
class Port:
    port: int
    remote: str
    remote_port: int
    line: int
    #: the local port GUID a ``Ca`` record's port line carries (``[1](e09d...)``)
    guid: str | None = None


@dataclass
class IbNode:
    """One ``Switch``/``Ca``/``Rt`` record."""

    kind: str
    id: str
    desc: str
    source: str
    line: int
    ports: dict[int, Port] = field(default_factory=dict)
    #: the ``sysimgguid=`` header: HCAs with one system image GUID are one machine
    sysimg: str | None = None
    #: why the description cannot be used (the record's structure, its ports, still can)
    problem: str | None = None


@dataclass
class Fabric:
    """Every node record of one or more ibnetdiscover outputs, links checked from both ends."""

    nodes: dict[str, IbNode] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    #: records and lines the parser set aside: record label -> ``source:line: reason``
    bad: dict[str, str] = field(default_factory=dict)


# ----- parsing --------------------------------------------------------------------------
# a record line whose comment cannot be read (an unbalanced '"' in the description): its ID still can
_RECORD_ID = re.compile(r'^(Switch|Ca|Rt)\s+(\d+)\s+"([^"]+)"\s*#(.*)$')


@dataclass
class _Reader:
    """Per-record damage found while reading one output, resolved once every record is known."""

    source: str
    fabric: Fabric
    #: records whose port list cannot be trusted (an unreadable line inside them, an unsafe ID): dropped
    broken: set[str] = field(default_factory=set)
    #: the text of every line set aside, to excuse links to a record that could not be read at all
    lines: list[str] = field(default_factory=list)
    first_error: str | None = None

    def set_aside(self, value: str, number: int, why: str, line: str | None = None) -> None:
        """Set aside one record or line; ``line``: an unreadable line that may have been a record's own."""
        message = f"{self.source}:{number}: {why}"
        self.first_error = self.first_error or message
        self.fabric.bad.setdefault(record_label(value), f"{message}; set aside")
        if line is not None:
            self.lines.append(line)


def parse(text: str | bytes, source: str = "ibnetdiscover") -> Fabric:
    """Parse one ibnetdiscover output; raises :class:`ProviderError` ``source:line: what``.

    A record or line that cannot be read (an unbalanced ``"`` in a description, a damaged line,
    an unsafe switch ID) is set aside in :attr:`Fabric.bad` with its line and the rest is kept;
    what means the output as a whole is unusable still raises: not UTF-8, ``-p`` format, cut off
    (incomplete last line, links to records it never describes), no readable record at all.
    Inputs over :data:`~topocast.safeio.limits.MAX_UPLOAD_BYTES` are refused before parsing: the
    parse holds about 4x its input, and a discover function has 512 MB.
    """
    check_size(len(text), MAX_UPLOAD_BYTES, source, ProviderError)
    if isinstance(text, bytes):
        data = text
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            at = data.count(b"\n", 0, exc.start) + 1
            raise ProviderError(f"{source}:{at}: not UTF-8 text (is this ibnetdiscover output?)") from None
    fabric = Fabric()
    reader = _Reader(source, fabric)
    lines = text.split("\n")
    complete = text.endswith("\n")
    if complete:
        lines.pop()
    current: IbNode | None = None
    meta_line = 0  # a header line (vendid=...) waiting for its record line
    sysimg: str | None = None
    for number, raw in enumerate(lines, 1):
        line = raw.rstrip("\r")
        stripped = line.strip()
        last_partial = number == len(lines) and not complete
        if not stripped:
            if meta_line:
                raise ProviderError(f"{source}:{meta_line}: node header without a Switch/Ca/Rt line")
            current = None
            continue
        if stripped.startswith("#"):
            continue
        if _META.match(stripped):
            if current is not None:
                raise ProviderError(f"{source}:{number}: header line {stripped!r} inside a node record")
            meta_line = meta_line or number
            key, _, value = stripped.partition("=")
            if key == "sysimgguid":
                sysimg = value
            continue
        record = _RECORD.match(line)
        if last_partial and not _complete(line, record):  # a cut-off dump: the whole upload is suspect
            raise ProviderError(f"{source}:{number}: {_unknown(stripped, last_partial)}")
        loose = None if record and record.group(5).count('"') % 2 == 0 else _RECORD_ID.match(line)
        if record or loose:
            if loose is not None:
                kind, _, node_id, comment = loose.groups()
                desc, problem = "", f"{source}:{number}: the node description {comment.strip()!r} is not readable"
            else:
                kind, _, node_id, desc, _ = record.groups()  # type: ignore[union-attr]
                problem = None
            if node_id in fabric.nodes:
                first = fabric.nodes[node_id]
                raise ProviderError(f"{source}:{number}: {node_id} is described twice (first at line {first.line})")
            current = IbNode(kind, node_id, desc, source, number, sysimg=sysimg, problem=problem)
            fabric.nodes[node_id] = current
            meta_line, sysimg = 0, None
            if kind == "Switch":
                try:
                    check_name(node_id, "switch ID", "this record", MAX_SWITCH_NAME)
                except UnsafeNameError as exc:
                    reader.set_aside(node_id, number, str(exc))
                    reader.broken.add(node_id)
            continue
        port = _PORT.match(line)  # the comment is the remote's description: free text, quotes and all
        if port:
            if current is None:
                reader.set_aside(stripped, number, "port line outside a Switch/Ca record")
                continue
            num = int(port.group(1))
            if num in current.ports:
                raise ProviderError(
                    f"{source}:{number}: port {num} of {current.id} is listed twice "
                    f"(first at line {current.ports[num].line})"
                )
            current.ports[num] = Port(num, port.group(3), int(port.group(4)), number, port.group(2))
            continue
        why = _unknown(stripped, last_partial)
        if re.match(r"^(SW|CA|RT)\s", stripped):
            raise ProviderError(f"{source}:{number}: {why}")
        if current is not None:  # a damaged line inside a record: that record's ports cannot be trusted
            reader.set_aside(current.desc or current.id, number, f"{why} in the record of {current.id}")
            reader.broken.add(current.id)
        else:
            reader.set_aside(stripped, number, why, line)
    if meta_line:
        raise ProviderError(f"{source}:{meta_line}: node header without a Switch/Ca/Rt line (output cut off?)")
    if not fabric.nodes or len(reader.broken) == len(fabric.nodes):
        if reader.first_error:  # nothing readable: not an ibnetdiscover dump, or a damaged copy
            raise ProviderError(reader.first_error)
        raise ProviderError(f"{source}:1: no Switch or Ca records (empty file, or not ibnetdiscover output)")
    _check_links(fabric, reader)
    return fabric


def _complete(line: str, record: re.Match[str] | None) -> bool:
    """A last line without its newline is whole only when it reads as a record or port line with balanced quotes."""
    if record is not None:
        return record.group(5).count('"') % 2 == 0
    port = _PORT.match(line)
    return port is not None and port.group(5).count('"') % 2 == 0


def _unknown(line: str, last_partial: bool) -> str:
    shown = line if len(line) <= 80 else line[:77] + "..."
    if last_partial:
        return f"incomplete last line {shown!r} (the output was cut off)"
    if re.match(r"^(SW|CA|RT)\s", line):
        return f"{shown!r} looks like 'ibnetdiscover -p/-l' output; run ibnetdiscover without options"
    return f"unrecognized line {shown!r} (not ibnetdiscover output, or a damaged copy)"


def _check_links(fabric: Fabric, reader: _Reader) -> None:
    """Every link must be reported by both ends: a missing end means a truncated or edited file.

    Links to a record that was set aside (or to one whose record line could not be read) are
    not evidence of a cut-off file; they are dropped, with the broken records themselves.
    """
    nodes = fabric.nodes
    unreadable = reader.broken | {q for text in reader.lines for q in re.findall(r'"([^"]+)"', text)}

    def excused(node_id: str) -> bool:
        return node_id in unreadable

    for node in nodes.values():
        if node.id in reader.broken:
            continue
        for p in list(node.ports.values()):
            where = f"{node.source}:{p.line}"
            other = nodes.get(p.remote)
            if excused(p.remote):
                del node.ports[p.port]
                continue
            if other is None:
                raise ProviderError(
                    f"{where}: {node.id} port {p.port} links to {p.remote}, which the output never describes "
                    "(output cut off?)"
                )
            back = other.ports.get(p.remote_port)
            if back is None:
                raise ProviderError(
                    f"{where}: {node.id} port {p.port} links to {p.remote} port {p.remote_port}, but that port "
                    f"is missing from {p.remote}'s record ({other.source}:{other.line}); output cut off?"
                )
            if (back.remote, back.remote_port) != (node.id, p.port):
                raise ProviderError(
                    f"{where}: {node.id} port {p.port} links to {p.remote} port {p.remote_port}, but "
                    f"{other.source}:{back.line} says that port links to {back.remote} port {back.remote_port}"
                )
    for node_id in reader.broken:
        del nodes[node_id]


def merge_fabrics(fabrics: Sequence[Fabric]) -> Fabric:
    """Union of several outputs (fabric segments, several collectors); the first one wins on conflicts."""
    if len(fabrics) == 1:
        return fabrics[0]
    out = Fabric()
    for fab in fabrics:
        for label, reason in fab.bad.items():
            out.bad.setdefault(label, reason)
        for node_id, node in fab.nodes.items():
            known = out.nodes.get(node_id)
            if known is None:
                out.nodes[node_id] = IbNode(
                    node.kind, node.id, node.desc, node.source, node.line, dict(node.ports), node.sysimg, node.problem
                )
                continue
            for num, p in node.ports.items():
                had = known.ports.setdefault(num, p)
                if (had.remote, had.remote_port) != (p.remote, p.remote_port):
                    out.warnings.append(
                        f"{node.source}:{p.line}: {node_id} port {num} links to {p.remote}[{p.remote_port}] but "
                        f"{had.remote}[{had.remote_port}] in {known.source}; keeping the latter"
                    )
    return out


# ----- graph ----------------------------------------------------------------------------
def _host_pattern(host_regex: str | re.Pattern[str]) -> re.Pattern[str]:
    try:
        rx = re.compile(host_regex) if isinstance(host_regex, str) else host_regex
    except re.error as exc:
        raise ProviderError(f"host regex {host_regex!r} is invalid: {exc}") from None
    if rx.groups == 0:
        raise ProviderError(f"host regex {rx.pattern!r} needs a group for the host name, e.g. (?P<host>...)")
    return rx


def _hosts(fabric: Fabric, rx: re.Pattern[str], warnings: list[str], aside: dict[str, str]) -> dict[str, list[IbNode]]:
    """host name -> its HCAs (``Ca`` records whose description names it).

    An HCA whose description cannot be read or names an unsafe host is set aside in ``aside`` with
    its line. Names that several machines claim are set aside too, never merged (:func:`_claims`).
    """
    group = "host" if "host" in rx.groupindex else 1
    hosts: dict[str, list[IbNode]] = defaultdict(list)
    unnamed: list[str] = []
    for node in fabric.nodes.values():
        if node.kind != "Ca":
            continue
        if node.problem:
            aside.setdefault(record_label(f"{node.id}"), f"{node.problem}; HCA set aside")
            continue
        m = rx.fullmatch(node.desc)
        name = m.group(group) if m else None
        if not name or name == "localhost":
            if not node.desc.endswith("Aggregation Node"):  # SHARP aggregation nodes are expected
                unnamed.append(node.desc)
            continue
        try:
            check_node_name(name, f"HCA {node.id}")
        except UnsafeNameError as exc:
            aside.setdefault(record_label(node.desc), f"{node.source}:{node.line}: {exc}; HCA set aside")
            continue
        hosts[name].append(node)
    if unnamed:
        examples = ", ".join(repr(d) for d in sorted(set(unnamed))[:3])
        warnings.append(
            f"{len(unnamed)} HCA(s) have a node description that names no host ({examples}) and were left out; "
            "if they are compute nodes, set their description (rdma-ndd) or adjust the host regex"
        )
    for name, reason in _claims(hosts).items():
        aside[name] = reason
        del hosts[name]
    return hosts


def _claims(hosts: Mapping[str, list[IbNode]]) -> dict[str, str]:
    """Host names that more than one machine claims -> why; such a host cannot be placed.

    ``sysimgguid`` only says which HCAs share a machine, not which are apart: a DGX's HCAs each
    have their own. So a claim is contested when one sysimgguid's HCAs name several hosts (root on
    that machine rewrote a description), or when HCAs of different sysimgguids carry the same
    description that is more than the host name (``gpu-00 mlx5_1`` twice: one host has one
    mlx5_1). Both names are set aside, neither HCA is moved to the other's leaf.
    """
    out: dict[str, str] = {}
    by_sysimg: dict[str, set[str]] = defaultdict(set)
    for name, hcas in hosts.items():
        for hca in hcas:
            if hca.sysimg:
                by_sysimg[hca.sysimg].add(name)
    for sysimg, names in sorted(by_sysimg.items()):
        if len(names) > 1:
            for name in sorted(names):
                guids = sorted({h.sysimg or h.id for h in hosts[name]})
                out.setdefault(
                    name,
                    f"HCAs of one machine (sysimgguid {sysimg}) name the hosts {', '.join(sorted(names))}; "
                    f"{name!r} is claimed by sysimgguid {', '.join(guids)}; left out",
                )
    for name, hcas in sorted(hosts.items()):
        by_desc: dict[str, list[IbNode]] = defaultdict(list)
        for hca in hcas:
            by_desc[hca.desc].append(hca)
        for desc, same in sorted(by_desc.items()):
            machines = sorted({h.sysimg or h.id for h in same})
            if desc != name and len(machines) > 1:
                where = ", ".join(f"{h.source}:{h.line}" for h in same)
                out.setdefault(
                    name,
                    f"{len(machines)} machines claim {desc!r} (sysimgguid {', '.join(machines)}; {where}); left out",
                )
    return out


def _device(hca: IbNode, rx: re.Pattern[str]) -> str:
    """The HCA's device name: its description after the host name (``"dgx-01 mlx5_3"`` -> ``mlx5_3``)."""
    m = rx.fullmatch(hca.desc)
    group = "host" if "host" in rx.groupindex else 1
    rest = hca.desc[m.end(group) :].strip() if m else ""
    return rest or hca.desc


def _select(
    fabric: Fabric,
    hosts: Mapping[str, list[IbNode]],
    rx: re.Pattern[str],
    selection: PortSelection,
    warnings: list[str],
) -> tuple[Fabric, dict[str, list[IbNode]]]:
    """The compute fabric only: the selected hosts' HCAs and the switches they reach.

    HCAs not selected are dropped with their cables. A switch is dropped when the switch patterns
    exclude it, or when it carries host cables that are all unselected ports making up a third of
    its cables or more: a storage leaf (a spine with one stray storage HCA among its leaf links stays).
    The rest is what the selected HCAs reach over switch links without passing a
    dropped switch, so a storage fabric (even one cabled to a compute spine) never becomes a leaf
    or a tier. Other ``Ca`` records (SHARP aggregation nodes) stay when their switch does.
    """
    kept_hcas: dict[str, list[IbNode]] = {}
    dropped: list[IbNode] = []
    for name, hcas in hosts.items():
        for hca in hcas:
            guids = [hca.id.removeprefix("H-"), *(p.guid for p in hca.ports.values() if p.guid)]
            if selection.hca(_device(hca, rx), guids):
                kept_hcas.setdefault(name, []).append(hca)
            else:
                dropped.append(hca)
    kept_ids = {hca.id for hcas in kept_hcas.values() for hca in hcas}
    dropped_ids = {hca.id for hca in dropped}
    switches = {n.id: n for n in fabric.nodes.values() if n.kind == "Switch"}
    excluded = {sw for sw, n in switches.items() if not selection.switch(_name_of(n.desc), sw)}
    for sw, node in switches.items():
        remotes = [p.remote for p in node.ports.values()]
        to_dropped = sum(1 for r in remotes if r in dropped_ids)
        if to_dropped and not any(r in kept_ids for r in remotes):
            links = sum(1 for r in remotes if r in switches)
            if to_dropped * 2 >= links:  # a third of its cables or more: a storage leaf, not a spine with a stray
                excluded.add(sw)
    reach = {p.remote for i in kept_ids for p in fabric.nodes[i].ports.values() if p.remote in switches}
    reach -= excluded
    queue = deque(sorted(reach))
    while queue:
        for p in switches[queue.popleft()].ports.values():
            if p.remote in switches and p.remote not in reach and p.remote not in excluded:
                reach.add(p.remote)
                queue.append(p.remote)
    # an HCA cabled only to switches off the compute fabric is on another fabric (a storage server's)
    for name, hcas in list(kept_hcas.items()):
        on = [h for h in hcas if not h.ports or any(p.remote in reach for p in h.ports.values())]
        dropped.extend(h for h in hcas if h not in on)
        if on:
            kept_hcas[name] = on
        else:
            del kept_hcas[name]
    if hosts and not kept_hcas:
        raise no_host_selected(selection, len(hosts))
    kept_ids = {hca.id for hcas in kept_hcas.values() for hca in hcas}
    dropped_ids = {hca.id for hca in dropped}
    keep = reach | kept_ids
    keep |= {
        n.id
        for n in fabric.nodes.values()
        if n.kind != "Switch" and n.id not in dropped_ids and any(p.remote in reach for p in n.ports.values())
    }
    out = Fabric(warnings=fabric.warnings, bad=fabric.bad)
    for node_id in keep:
        node = fabric.nodes[node_id]
        ports = {k: p for k, p in node.ports.items() if p.remote in keep}
        out.nodes[node_id] = IbNode(node.kind, node.id, node.desc, node.source, node.line, ports, node.sysimg)
    left_out = sorted(set(switches) - reach)
    hostless = sorted(set(hosts) - kept_hcas.keys())
    message = (
        f"port selection ({selection.describe()}): {len(dropped)} HCA port(s) of "
        f"{len({h for h, hcas in hosts.items() for x in hcas if x.id in dropped_ids})} host(s) not selected or "
        f"not on the compute fabric, ignored; {len(left_out)} switch(es) not on the compute fabric left out"
    )
    if left_out:
        message += f" ({', '.join(_shown(fabric, left_out[:3]))}{' ...' if len(left_out) > 3 else ''})"
    if hostless:
        message += f"; {len(hostless)} host(s) have no HCA on the compute fabric, left out: {compact_str(hostless)}"
    warnings.append(message)
    return out, {name: [out.nodes[hca.id] for hca in hcas] for name, hcas in kept_hcas.items()}


def _name_of(desc: str) -> str:
    m = _SWITCH_NAME.match(desc)
    return m.group(1) if m else desc


def _leaves(
    fabric: Fabric, cabled: Mapping[str, list[str]], wanted: set[str], compat: bool, warnings: list[str]
) -> set[str]:
    """Leaf switches: the switches carrying hosts, except upper-tier switches a stray host is cabled to.

    Which switches are leaves is decided the way the majority of host switches look, so one storage
    or management host cabled to a spine (or a core) never turns that switch into a leaf and never
    changes the tiers of the rest. A host-carrying switch is an upper-tier one (:func:`_upper`)
    when it is the hub of other host switches, or when its host cables are a small minority of its
    ports while the majority of host switches are not like that. A leaf whose hosts were filtered
    out stays a leaf. ``compat``: Topograph's rule, the switches of the wanted hosts only.
    """
    own = {sw for h in wanted for sw in cabled[h]}
    if compat:
        return own
    candidates = {sw for sws in cabled.values() for sw in sws}
    upper = _upper(fabric, candidates)
    return candidates - upper if upper != candidates else candidates


def _upper(fabric: Fabric, candidates: set[str]) -> set[str]:
    """The host-carrying switches that sit above other host switches (see :func:`_leaves`)."""
    neighbours: dict[str, set[str]] = {}
    host_cables: dict[str, int] = {}
    switch_cables: dict[str, int] = {}
    for sw in candidates:
        remotes = [fabric.nodes[p.remote] for p in fabric.nodes[sw].ports.values()]
        neighbours[sw] = {r.id for r in remotes if r.id in candidates and r.id != sw}
        host_cables[sw] = sum(1 for r in remotes if r.kind == "Ca" and not r.desc.endswith("Aggregation Node"))
        switch_cables[sw] = sum(1 for r in remotes if r.kind == "Switch")
    # a hub: cabled to several host switches, each of which reaches fewer host switches than it does
    hubs = {
        sw for sw, near in neighbours.items() if len(near) >= 2 and all(len(neighbours[o]) < len(near) for o in near)
    }
    # a switch whose ports are almost all switch cables, in a fabric whose host switches mostly are not
    sparse = {sw for sw in candidates if host_cables[sw] * 8 <= switch_cables[sw]}
    if len(sparse) * 2 >= len(candidates):
        sparse = set()
    return hubs | sparse


def _tiers(fabric: Fabric, leaves: set[str]) -> dict[str, int]:
    """Switch -> hops from the nearest leaf (BFS over switch-to-switch links)."""
    tier = dict.fromkeys(leaves, 0)
    queue = deque(sorted(leaves))
    while queue:
        sw = queue.popleft()
        for p in fabric.nodes[sw].ports.values():
            other = fabric.nodes[p.remote]
            if other.kind == "Switch" and other.id not in tier:
                tier[other.id] = tier[sw] + 1
                queue.append(other.id)
    return tier


def _display_names(fabric: Fabric, switches: set[str], warnings: list[str]) -> dict[str, str]:
    names: dict[str, str] = {}
    for sw in sorted(switches):
        desc = fabric.nodes[sw].desc
        m = _SWITCH_NAME.match(desc)
        name = m.group(1) if m else (desc if not re.search(r"[\s;:]", desc) else "")
        try:
            names[sw] = check_switch_name(name, f"switch {sw}") if name else sw
        except UnsafeNameError:
            names[sw] = sw
    counts: dict[str, int] = defaultdict(int)
    for name in names.values():
        counts[name] += 1
    shared = sorted({n for n, c in counts.items() if c > 1})
    if shared:
        warnings.append(f"switch names used by several switches are replaced by their IDs: {', '.join(shared)}")
    return {sw: n for sw, n in names.items() if n != sw and counts[n] == 1}


def build_graph(
    fabric: Fabric,
    *,
    cluster: str = "onprem",
    nodes: Iterable[str] | None = None,
    host_regex: str | re.Pattern[str] = DEFAULT_HOST_REGEX,
    domains: Mapping[str, HostDomain] | None = None,
    switch_names: bool = False,
    topograph_compat: bool = False,
    selection: PortSelection | None = None,
) -> tuple[DiscoveryResult, Collapse]:
    """The graph of a parsed fabric, and the collapse report (merges, multi-rail choices).

    What cannot be placed is set aside in ``graph.unplaced`` with its reason (records the parser
    could not read, HCAs naming an unsafe host, names two machines claim, hosts cabled only to an
    upper-tier switch); every other host is placed as if it were not there. ``selection``: only
    the compute fabric's ports count (:func:`_select`).
    """
    warnings = list(fabric.warnings)
    aside = dict(fabric.bad)
    rx = _host_pattern(host_regex)
    hosts = _hosts(fabric, rx, warnings, aside)
    if selection:
        fabric, hosts = _select(fabric, hosts, rx, selection, warnings)
    requested = None if nodes is None else set(nodes)
    wanted = sorted(hosts if requested is None else requested & hosts.keys())

    def cables(host: str) -> list[str]:
        return [p.remote for hca in hosts[host] for p in hca.ports.values() if fabric.nodes[p.remote].kind == "Switch"]

    cabled = {h: cables(h) for h in hosts}
    leaves = _leaves(fabric, cabled, set(wanted), topograph_compat, warnings)
    tier = _tiers(fabric, leaves)
    uplinks: dict[str, list[str]] = {}
    for sw, t in tier.items():
        uplinks[sw] = [p.remote for p in fabric.nodes[sw].ports.values() if tier.get(p.remote) == t + 1]
    # a host's cable to an upper-tier switch is ignored: the host goes under its leaves, or has no topology
    attach = {h: [sw for sw in cabled[h] if sw in leaves] for h in wanted}
    stray = {h: sorted({sw for sw in cabled[h] if sw not in leaves}) for h in wanted}
    stray = {h: sws for h, sws in stray.items() if sws}
    tree = collapse({h: sws for h, sws in attach.items() if sws or h not in stray}, uplinks)
    for host, sws in stray.items():
        if not attach[host]:
            aside[host] = (
                f"cabled only to upper-tier switch(es) {', '.join(_shown(fabric, sws))}, not to a leaf; "
                "kept without topology"
            )
    if stray:
        shown = "; ".join(f"{h} -> {', '.join(_shown(fabric, sws))}" for h, sws in sorted(stray.items())[:5])
        more = f"; and {len(stray) - 5} more" if len(stray) > 5 else ""
        warnings.append(
            f"{len(stray)} host(s) are cabled to an upper-tier switch (spine or above), not only to leaves; "
            f"those cables are ignored and the tiers of the rest are unchanged: {shown}{more}"
        )

    domains = domains or {}
    names = sorted(set(wanted) | (requested or set()))
    graph_nodes = []
    for name in names:
        dom = domains.get(name)
        graph_nodes.append(
            Node(
                name=name,
                fabric=list(tree.paths.get(name, ())),
                accelerator=dom.domain if dom else None,
                subdomain=dom.subdomain if dom else None,
            )
        )
    _report(warnings, [n for n in names if n not in aside], hosts, tree, domains)
    used = {sw for path in tree.paths.values() for sw in path}
    display = _display_names(fabric, used, warnings) if switch_names else {}
    graph = place_nodes(cluster, PROVIDER, graph_nodes, switch_names=display, unplaced=aside)
    return DiscoveryResult(graph=graph, warnings=warnings), tree


def _shown(fabric: Fabric, switches: Iterable[str]) -> list[str]:
    """Switch IDs with the name their description gives, for messages: ``S-2c5e... (A10-P1-IBSPINE-02)``."""
    out = []
    for sw in switches:
        m = _SWITCH_NAME.match(fabric.nodes[sw].desc)
        out.append(f"{sw} ({m.group(1)})" if m else sw)
    return out


def uplinks(fabric: Fabric, leaves: Iterable[str]) -> dict[str, int]:
    """Each leaf's cables up: ports to a switch that is not itself a leaf (for fabric health)."""
    leaf_set = set(leaves)
    out: dict[str, int] = {}
    for leaf in leaf_set:
        node = fabric.nodes.get(leaf)
        if node is None:
            continue
        out[leaf] = sum(
            1
            for port in node.ports.values()
            if (remote := fabric.nodes.get(port.remote)) is not None
            and remote.kind == "Switch"
            and port.remote not in leaf_set
        )
    return out


def check_upload(data: str | bytes, source: str, *, host_regex: str | None = None) -> list[str]:
    """The check an upload must pass before discovery may use it: the same parse and build as discovery.

    Returns what the upload's build sets aside (``label: reason``, for warnings). Raises
    :class:`ProviderError` when the upload is not ibnetdiscover output, is cut off, or none of its
    records is usable (records were set aside and no host could be placed).
    """
    fabric = parse(data, source)
    result, _ = build_graph(fabric, host_regex=host_regex or DEFAULT_HOST_REGEX)
    graph = result.graph
    if graph.unplaced and not any(n.fabric for n in graph.nodes):
        first = next(iter(graph.nodes_set_aside().items()))
        raise ProviderError(
            f"{source}: no usable record: {len(graph.unplaced)} set aside and no host placed, "
            f"e.g. {first[0]}: {first[1]}"
        )
    return [f"{k}: {v}" for k, v in graph.nodes_set_aside().items()]


def _report(
    warnings: list[str],
    names: list[str],
    hosts: Mapping[str, list[IbNode]],
    tree: Collapse,
    domains: Mapping[str, HostDomain],
) -> None:
    absent = [n for n in names if n not in hosts]
    if absent:
        warnings.append(f"{len(absent)} host(s) are not on the fabric and have no topology: {compact_str(absent)}")
    if tree.unplaced:
        warnings.append(
            f"{len(tree.unplaced)} host(s) have HCAs cabled to no switch and have no topology: "
            f"{compact_str(tree.unplaced)}"
        )
    warnings.extend(summarize_choices(tree.choices))
    if domains:
        missing = [n for n in names if n not in domains]
        if missing:
            warnings.append(f"{len(missing)} host(s) have no accelerator domain: {compact_str(missing)}")
        extra = sorted(set(domains) - set(names))
        if extra:
            warnings.append(f"{len(extra)} host(s) with a domain are not in the graph, ignored: {compact_str(extra)}")


def discover(
    paths: str | Path | Sequence[str | Path] = (),
    *,
    texts: Mapping[str, str | bytes] | None = None,
    cluster: str = "onprem",
    nodes: Iterable[str] | None = None,
    host_regex: str | re.Pattern[str] = DEFAULT_HOST_REGEX,
    domains: Mapping[str, HostDomain] | str | Path | None = None,
    switch_names: bool = False,
    topograph_compat: bool = False,
    selection: PortSelection | None = None,
) -> DiscoveryResult:
    """Graph from ibnetdiscover output files (``paths``) and/or in-memory ``texts`` (source name -> content).

    Several outputs are merged (fabric segments, several collectors); on a port
    they disagree about, the first one given wins, so pass the newest first.
    ``domains`` is a mapping from :func:`load_domains` or a path to such a file.
    """
    sources: list[tuple[str, str | bytes]] = []
    for p in [paths] if isinstance(paths, str | Path) else list(paths):
        try:
            with Path(p).open("rb") as fh:
                sources.append((str(p), read_capped(fh, MAX_UPLOAD_BYTES, str(p), ProviderError)))
        except OSError as exc:
            raise ProviderError(f"{p}: cannot read ibnetdiscover output ({exc.strerror})") from None
    sources.extend((texts or {}).items())
    if not sources:
        raise ProviderError("no ibnetdiscover output given")
    fabric = merge_fabrics([parse(content, source) for source, content in sources])
    if isinstance(domains, str | Path):
        domains = load_domains(domains)
    result, _ = build_graph(
        fabric,
        cluster=cluster,
        nodes=nodes,
        host_regex=host_regex,
        domains=domains,
        switch_names=switch_names,
        topograph_compat=topograph_compat,
        selection=selection,
    )
    result.api_calls = {"ibnetdiscover.outputs": len(sources)}
    return result
