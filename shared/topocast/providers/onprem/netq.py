"""NVIDIA NetQ (Spectrum-X Ethernet and InfiniBand) + NMX-M (NVLink) -> :class:`TopologyGraph` (provider ``netq``).

NetQ's topology graph lists devices with a ``tier`` (``-1`` = host, 1 = leaf,
2 = spine, ...) and links between them (``"a-*-b"`` IDs, or ``src``/``target``,
with one ``compounded_links`` entry per cable). Each link is oriented from the
lower tier to the higher one; links inside a tier are ignored (reported). The
resulting DAG is collapsed into a tree by :func:`topocast.providers.clos.collapse`
(the same rules as InfiniBand: merge switches with identical children, then
each host/switch keeps the group it has most cables to). Switch IDs are NetQ's
node IDs with NetQ's names as display names (``# net-unit-s1=node3`` in
topology.conf, like Topograph). Hosts keep NetQ's node ID as ``id``.

Port selection (``selection``, :mod:`topocast.providers.port_selection`): on a premise that
shows the compute and the storage fabric, only host cables whose host-side interface (the
``compounded_links[].interfaces`` entry of the host) is selected count, and switches the switch
patterns exclude are never used (:func:`select_ports`).

NVLink domains come from NMX-M ``/nmx/v1/compute-nodes`` (``Name`` ->
``DomainUUID``), or from a side input (:func:`topocast.providers.domains.load_domains`)
which then replaces NMX-M. With ``nvlink=None`` an NMX-M failure is a warning (as
in Topograph); ``nvlink=True`` makes it an error, ``False`` skips NMX-M.

With several premises, switch and host IDs get a ``p<opid>.`` prefix (NetQ numbers
nodes per premise). Premises default to those the login marks ``config_key_viewed``.

Credentials (:func:`load_credentials`) come from a JSON file
``{"username", "password"[, "nmx_username", "nmx_password"]}`` or from an AWS
Secrets Manager secret / SSM SecureString parameter ARN holding the same JSON,
never from environment variables. See docs/onprem.md.
"""

from __future__ import annotations

import json
import os
import stat
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from topocast.errors import ProviderError, UnsafeNameError
from topocast.model.graph import Node
from topocast.model.hostlist import compact_str
from topocast.model.names import check_domain_name, check_node_name, check_switch_name
from topocast.model.placement import place_nodes, record_label
from topocast.providers.base import DiscoveryResult
from topocast.providers.clos import collapse, summarize_choices
from topocast.providers.domains import HostDomain, load_domains
from topocast.providers.onprem.netq_http import NetqClient, NetqCredentials, Premise
from topocast.providers.port_selection import PortSelection, no_host_selected
from topocast.safeio.files import UnsafePathError, read_credential
from topocast.safeio.limits import MAX_CREDENTIALS_BYTES
from topocast.safeio.validation import validate

__all__ = [
    "NetqFabric",
    "build_graph",
    "discover",
    "load_credentials",
    "parse_compute_nodes",
    "parse_topology",
    "select_ports",
]

PROVIDER = "netq"
T = TypeVar("T")
HOST_TIER = -1


# ----- credentials ----------------------------------------------------------------------
def _creds_from_json(text: str, source: str, notes: tuple[str, ...] = ()) -> NetqCredentials:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ProviderError(f"{source}: credentials are not JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(data, dict):
        raise ProviderError(f"{source}: credentials must be a JSON object")
    for key in ("username", "password"):
        if not isinstance(data.get(key), str) or not data[key]:
            raise ProviderError(f"{source}: credentials need a non-empty string {key!r}")
    nmx_user, nmx_pass = data.get("nmx_username"), data.get("nmx_password")
    if (nmx_user is None) != (nmx_pass is None):
        raise ProviderError(f"{source}: give both nmx_username and nmx_password, or neither")
    return NetqCredentials(data["username"], data["password"], nmx_user, nmx_pass, notes)


def load_credentials(
    ref: str, *, session: Any = None, read_secret: Callable[[str], tuple[str, str | None]] | None = None
) -> NetqCredentials:
    """Credentials from a file path, ``arn:aws:secretsmanager:...`` or ``arn:aws:ssm:...:parameter/...``.

    The ARN forms are read by ``read_secret(ref) -> (text, SSM parameter type or None)``, which the
    shell supplies; by default :func:`topocast.providers.aws.sdk.read_secret_arn` with ``session``.
    """
    if ref.startswith("arn:"):
        if read_secret is None:
            from topocast.providers.aws.sdk import read_secret_arn

            text, kind = read_secret_arn(ref, session=session)
        else:
            text, kind = read_secret(ref)
        warn = () if kind in (None, "SecureString") else (f"{ref} is not a SecureString parameter",)
        return _creds_from_json(text, ref, warn)
    path = Path(ref)
    try:  # never through a link, owned by root or this user, writable by nobody else (docs/security.md)
        raw = read_credential(path, MAX_CREDENTIALS_BYTES, "NetQ credentials file", private=False, root_links=True)
        text = raw.decode()
        mode = path.stat().st_mode
    except UnsafePathError as exc:
        raise ProviderError(str(exc)) from None
    except OSError as exc:
        raise ProviderError(f"{path}: cannot read credentials ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise ProviderError(f"{path}: the credentials file is not UTF-8 text") from None
    notes: tuple[str, ...] = ()
    if mode & (stat.S_IRWXG | stat.S_IRWXO) and os.name == "posix":
        notes = (f"credentials file {path} is readable by other users (mode {stat.S_IMODE(mode):04o}); chmod 600 it",)
    return _creds_from_json(text, str(path), notes)


# ----- parsing (pure) -------------------------------------------------------------------
@dataclass
class NetqFabric:
    """One premise's topology: hosts and switches by NetQ node ID, and cables between them."""

    hosts: dict[str, str] = field(default_factory=dict)  # id -> host name
    switches: dict[str, str] = field(default_factory=dict)  # id -> switch name
    tier: dict[str, int] = field(default_factory=dict)
    #: lower-tier id -> upper-tier ids, one entry per cable
    up: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    #: lower-tier id -> the lower end's interface name of each cable in ``up`` (same order; None: unknown)
    up_iface: dict[str, list[str | None]] = field(default_factory=lambda: defaultdict(list))
    warnings: list[str] = field(default_factory=list)
    #: records set aside (an unsafe host name): record label -> reason
    bad: dict[str, str] = field(default_factory=dict)


def _expect(cond: bool, source: str, where: str, what: str) -> None:
    if not cond:
        raise ProviderError(f"{source}: {where}: {what}")


def _shape_errors_as_provider_errors(source: str, parse: Callable[[], T]) -> T:
    """A value of the wrong type somewhere deep (a number where a list belongs) is the source's fault:
    one ProviderError naming the source, not a TypeError traceback."""
    try:
        return parse()
    except (TypeError, AttributeError, KeyError, ValueError, RecursionError) as exc:
        raise ProviderError(f"{source}: unexpected shape ({type(exc).__name__}: {str(exc)[:120]})") from None


def parse_topology(data: Any, source: str = "NetQ topology") -> NetqFabric:
    """The ``fetch-topology`` answer (a list with one ``{nodes, links}`` object) -> :class:`NetqFabric`."""
    return _shape_errors_as_provider_errors(source, lambda: _parse_topology(data, source))


def _parse_topology(data: Any, source: str) -> NetqFabric:
    _expect(isinstance(data, list) and len(data) == 1, source, "top level", "expected a JSON list with one object")
    body = data[0]
    _expect(isinstance(body, dict), source, "[0]", "expected an object with 'nodes' and 'links'")
    for key in ("nodes", "links"):
        _expect(isinstance(body.get(key) or [], list), source, f"[0].{key}", "expected a list")
    fab = NetqFabric()
    for i, group in enumerate(body.get("nodes") or []):
        members = group.get("compounded_nodes") if isinstance(group, dict) else None
        _expect(isinstance(members, list), source, f"[0].nodes[{i}]", "has no compounded_nodes list")
        for j, n in enumerate(members or []):
            where = f"[0].nodes[{i}].compounded_nodes[{j}]"
            ok = isinstance(n, dict) and isinstance(n.get("id"), str) and isinstance(n.get("name"), str)
            _expect(ok and isinstance(n.get("tier"), int), source, where, "needs string id, name and integer tier")
            node_id, name, tier = n["id"], n["name"], n["tier"]
            _expect(node_id not in fab.tier, source, where, f"node id {node_id!r} appears twice")
            fab.tier[node_id] = tier
            if tier == HOST_TIER:
                try:
                    fab.hosts[node_id] = check_node_name(name, f"NetQ node {node_id}")
                except UnsafeNameError as exc:  # this host only: the rest of the premise is placed
                    fab.bad[record_label(name)] = f"{source}: {where}: {exc}; set aside"
            else:
                fab.switches[node_id] = name
    unknown: set[str] = set()
    flat: list[str] = []
    for i, link in enumerate(body.get("links") or []):
        _expect(isinstance(link, dict), source, f"[0].links[{i}]", "expected an object")
        a, b = link.get("src"), link.get("target")
        if not (isinstance(a, str) and isinstance(b, str)):
            ends = str(link.get("id", "")).split("-*-")
            _expect(len(ends) == 2, source, f"[0].links[{i}]", "needs src/target or an id 'a-*-b'")
            a, b = (e.split(":", 1)[0] for e in ends)
        cables = len(link.get("compounded_links") or []) or 1
        if a not in fab.tier or b not in fab.tier:
            unknown.update(x for x in (a, b) if x not in fab.tier)
            continue
        if fab.tier[a] == fab.tier[b]:
            flat.append(f"{a}-{b}")
            continue
        low, high = (a, b) if fab.tier[a] < fab.tier[b] else (b, a)
        fab.up[low].extend([high] * cables)
        fab.up_iface[low].extend(_interfaces(link, low, cables))
    if unknown:
        fab.warnings.append(f"{source}: links name unknown node IDs, ignored: {', '.join(sorted(unknown)[:10])}")
    if flat:
        fab.warnings.append(f"{source}: {len(flat)} link(s) join devices of the same tier, ignored: {flat[0]}...")
    return fab


def _interfaces(link: Mapping[str, Any], end: str, cables: int) -> list[str | None]:
    """``end``'s interface name on each cable of ``link`` (``compounded_links[].interfaces``, else the IDs)."""
    out: list[str | None] = []
    for cable in link.get("compounded_links") or []:
        name = None
        cable = cable if isinstance(cable, dict) else {}
        for iface in cable.get("interfaces") or []:
            if isinstance(iface, dict) and iface.get("node") == end and isinstance(iface.get("interface"), str):
                name = iface["interface"]
        if name is None:  # "node9:swp17s0-*-node12:ens4f0np0"
            for part in str(cable.get("id", "")).split("-*-"):
                node, _, port = part.partition(":")
                name = port if node == end and port else name
        out.append(name)
    return out or [None] * cables


def parse_compute_nodes(data: Any, source: str = "NMX-M compute-nodes") -> dict[str, HostDomain]:
    """NMX-M compute nodes -> host name -> NVLink domain (``DomainUUID``); nodes without one are skipped."""
    return _shape_errors_as_provider_errors(source, lambda: _parse_compute_nodes(data, source))


def _parse_compute_nodes(data: Any, source: str) -> dict[str, HostDomain]:
    _expect(isinstance(data, list), source, "top level", "expected a JSON list")
    out: dict[str, HostDomain] = {}
    for i, n in enumerate(data):
        _expect(isinstance(n, dict) and isinstance(n.get("Name"), str), source, f"[{i}]", "needs a string Name")
        domain = n.get("DomainUUID")
        if not isinstance(domain, str) or not domain:
            continue
        try:
            check_node_name(n["Name"], f"NMX-M compute node [{i}]")
            check_domain_name(domain, n["Name"])
        except UnsafeNameError as exc:
            raise ProviderError(f"{source}: [{i}]: {exc}") from None
        old = out.setdefault(n["Name"], HostDomain(domain, None, i))
        _expect(
            old.domain == domain,
            source,
            f"[{i}]",
            f"compute node {n['Name']!r} is in domain {domain!r} here but {old.domain!r} at [{old.line}]",
        )
    return out


# ----- graph ----------------------------------------------------------------------------
def build_graph(
    fabrics: Sequence[NetqFabric],
    *,
    cluster: str = "onprem",
    nodes: Iterable[str] | None = None,
    domains: Mapping[str, HostDomain] | None = None,
    prefixes: Sequence[str] | None = None,
    selection: PortSelection | None = None,
) -> DiscoveryResult:
    """Graph from one parsed fabric per premise (``prefixes[i]`` is put before fabric i's IDs).

    ``selection``: only the compute fabric's cables count (:func:`select_ports`).
    """
    requested = None if nodes is None else set(nodes)
    warnings: list[str] = []
    aside: dict[str, str] = {}
    graph_nodes: dict[str, Node] = {}
    display: dict[str, str] = {}
    if selection:
        selected = [select_ports(fab, selection) for fab in fabrics]
        cabled = sum(1 for fab in fabrics for hid in fab.hosts if fab.up.get(hid))
        if cabled and not any(sel.up.get(hid) for sel in selected for hid in sel.hosts):
            raise no_host_selected(selection, cabled)
        fabrics = selected
    for k, fab in enumerate(fabrics):
        pre = prefixes[k] if prefixes else ""
        warnings.extend(fab.warnings)
        aside.update(fab.bad)
        by_name: dict[str, list[str]] = defaultdict(list)
        for host_id, name in fab.hosts.items():
            if requested is None or name in requested:
                by_name[name].append(host_id)
        for name, ids in sorted(by_name.items()):
            if len(ids) > 1:  # a NetQ node ID is a machine: two machines claiming one name are never merged
                aside[name] = f"{len(ids)} NetQ nodes claim the name {name!r} (ids {', '.join(sorted(ids))}); left out"
        by_name = {name: ids for name, ids in by_name.items() if len(ids) == 1}
        attach = _host_cables(fab, {ids[0]: name for name, ids in by_name.items()}, pre, aside, warnings)
        uplinks = {pre + sw: [pre + x for x in fab.up.get(sw, ())] for sw in fab.switches}
        tree = collapse(attach, uplinks)
        warnings.extend(summarize_choices(tree.choices))
        for name, ids in sorted(by_name.items()):
            if name in graph_nodes:
                warnings.append(f"host {name!r} is in several premises; keeping the first")
                continue
            dom = (domains or {}).get(name)
            graph_nodes[name] = _node(
                name=name,
                id=pre + ids[0],
                fabric=list(tree.paths.get(name, ())),
                accelerator=dom.domain if dom else None,
                subdomain=dom.subdomain if dom else None,
            )
        for path in tree.paths.values():
            for sw in path:
                display[sw] = fab.switches[sw.removeprefix(pre)]
    for name in sorted((requested or set()) - graph_nodes.keys()):
        dom = (domains or {}).get(name)
        graph_nodes[name] = _node(name=name, accelerator=dom.domain if dom else None)
    absent = sorted(n.name for n in graph_nodes.values() if not n.fabric and n.name not in aside)
    if absent:
        warnings.append(f"{len(absent)} host(s) have no fabric in NetQ: {compact_str(absent)}")
    if domains:
        extra = sorted(set(domains) - graph_nodes.keys())
        if extra:
            warnings.append(f"{len(extra)} host(s) with an NVLink domain are not in the graph: {compact_str(extra)}")
    nodes_sorted = sorted(graph_nodes.values(), key=lambda n: n.name)
    graph = place_nodes(cluster, PROVIDER, nodes_sorted, switch_names=_safe_names(display, warnings), unplaced=aside)
    return DiscoveryResult(graph=graph, warnings=warnings)


def select_ports(fab: NetqFabric, selection: PortSelection) -> NetqFabric:
    """The compute fabric of one premise: host cables whose host-side interface is selected, to switches
    the switch patterns allow; a host left with none is not on the compute fabric and is dropped.

    The tree is walked upwards from the hosts' leaf cables (:func:`topocast.providers.clos.collapse`),
    so a storage leaf or spine only unselected cables reach never becomes a leaf or a tier, even when
    it is cabled to a compute spine. A warning counts what was ignored.
    """
    allowed = {sw for sw, name in fab.switches.items() if selection.switch(name, sw)}
    out = NetqFabric(dict(fab.hosts), dict(fab.switches), dict(fab.tier), warnings=list(fab.warnings), bad=fab.bad)
    ignored = 0
    for low, highs in fab.up.items():
        ifaces = fab.up_iface.get(low) or [None] * len(highs)
        for high, iface in zip(highs, ifaces, strict=False):
            is_host = low in fab.hosts
            if high not in allowed or (low not in fab.hosts and low not in allowed):
                ignored += is_host
                continue
            if is_host and not selection.hca(iface or ""):
                ignored += 1
                continue
            out.up[low].append(high)
            out.up_iface[low].append(iface)
    hostless = sorted(name for hid, name in fab.hosts.items() if not out.up.get(hid) and fab.up.get(hid))
    for hid in [h for h, name in fab.hosts.items() if name in hostless]:
        del out.hosts[hid]
    message = (
        f"port selection ({selection.describe()}): {ignored} host cable(s) not selected or to a switch off the "
        f"compute fabric, ignored; {len(fab.switches) - len(allowed)} switch(es) excluded by name"
    )
    if hostless:
        message += f"; {len(hostless)} host(s) have no cable on the compute fabric, left out: {compact_str(hostless)}"
    out.warnings.append(message)
    return out


def _host_cables(
    fab: NetqFabric, hosts: Mapping[str, str], pre: str, aside: dict[str, str], warnings: list[str]
) -> dict[str, list[str]]:
    """host name -> its cables to the leaf tier; a cable to a higher tier (a spine) is ignored.

    The leaf tier is the one most host cables go to (NetQ's tier 1 in every sane fabric), so one
    host cabled to a spine neither merges that spine into its leaf nor changes the tiers of the rest.
    """
    tiers = Counter(fab.tier[sw] for hid in hosts for sw in fab.up.get(hid, ()))
    leaf_tier = min(tiers, key=lambda t: (-tiers[t], t)) if tiers else None
    attach: dict[str, list[str]] = {}
    stray: dict[str, list[str]] = {}
    for hid, name in hosts.items():
        cables = fab.up.get(hid, [])
        attach[name] = [pre + sw for sw in cables if fab.tier[sw] == leaf_tier]
        odd = sorted({sw for sw in cables if fab.tier[sw] != leaf_tier})
        if odd:
            stray[name] = odd
            if not attach[name]:
                shown = ", ".join(f"{pre}{sw} ({fab.switches.get(sw, sw)}, tier {fab.tier[sw]})" for sw in odd)
                aside[name] = (
                    f"cabled only to switch(es) {shown}, not to a leaf (tier {leaf_tier}); kept without topology"
                )
    if stray:
        shown = "; ".join(
            f"{h} -> {', '.join(f'{pre}{sw} ({fab.switches.get(sw, sw)})' for sw in sws)}"
            for h, sws in sorted(stray.items())[:5]
        )
        more = f"; and {len(stray) - 5} more" if len(stray) > 5 else ""
        warnings.append(
            f"{len(stray)} host(s) are cabled to a switch above the leaf tier (tier {leaf_tier}); those cables "
            f"are ignored and the tiers of the rest are unchanged: {shown}{more}"
        )
    return attach


def _node(**fields: Any) -> Node:
    return validate(Node, fields, f"NetQ host {fields['name']!r}", ProviderError, keep_class=False)


def _safe_names(display: dict[str, str], warnings: list[str]) -> dict[str, str]:
    """Keep display names that are safe and used by one switch only (else Slurm sees duplicates)."""
    count: dict[str, int] = defaultdict(int)
    for name in display.values():
        count[name] += 1
    out: dict[str, str] = {}
    dropped: list[str] = []
    for sw, name in sorted(display.items()):
        try:
            check_switch_name(name, f"switch {sw}")
        except UnsafeNameError:
            dropped.append(name)
            continue
        if count[name] > 1:
            dropped.append(name)
        elif name != sw:
            out[sw] = name
    if dropped:
        warnings.append(f"switch names not used (unsafe or shared), IDs printed instead: {sorted(set(dropped))}")
    return out


def _pick_premises(all_premises: list[Premise], wanted: Iterable[str | int] | None) -> list[Premise]:
    if wanted is None:
        chosen = [p for p in all_premises if p.config_key_viewed]
        if not chosen:
            raise ProviderError("NetQ login lists no premise with config_key_viewed; name one with --premise")
        return chosen
    keys = [str(w) for w in wanted]
    chosen = [p for p in all_premises if str(p.opid) in keys or p.name in keys]
    missing = [k for k in keys if not any(k in (str(p.opid), p.name) for p in chosen)]
    if missing:
        known = ", ".join(f"{p.name} ({p.opid})" for p in all_premises) or "none"
        raise ProviderError(f"NetQ premise(s) {missing} not found; the account sees: {known}")
    return chosen


def discover(
    url: str,
    *,
    credentials: NetqCredentials | str,
    cluster: str = "onprem",
    nodes: Iterable[str] | None = None,
    premises: Iterable[str | int] | None = None,
    nvlink: bool | None = None,
    domains: Mapping[str, HostDomain] | str | Path | None = None,
    insecure: bool = False,
    ca_file: str | None = None,
    client: NetqClient | None = None,
    selection: PortSelection | None = None,
    **client_options: Any,
) -> DiscoveryResult:
    """Log in, fetch each premise's topology and NMX-M compute nodes, and build the graph.

    ``credentials`` is a :class:`NetqCredentials` or a reference for :func:`load_credentials`.
    ``client_options`` go to :class:`NetqClient` (timeout, max_attempts, page_size...).
    """
    creds = credentials if isinstance(credentials, NetqCredentials) else load_credentials(credentials)
    if client is None:
        client = NetqClient(url, creds, verify_tls=not insecure, ca_file=ca_file, **client_options)
    warnings = list(creds.notes)
    if insecure:
        warnings.append(f"TLS certificate verification is off for {url} (--insecure)")
    chosen = _pick_premises(client.login(), premises)
    fabrics = [parse_topology(client.topology(p.opid), f"NetQ topology of premise {p.opid}") for p in chosen]
    prefixes = [f"p{p.opid}." for p in chosen] if len(chosen) > 1 else None
    if isinstance(domains, str | Path):
        domains = load_domains(domains)
    if domains is None and nvlink is not False:
        try:
            domains = parse_compute_nodes(client.compute_nodes())
        except ProviderError as exc:
            if nvlink:
                raise
            warnings.append(f"no NVLink domains: {exc}")
    result = build_graph(fabrics, cluster=cluster, nodes=nodes, domains=domains, prefixes=prefixes, selection=selection)
    result.warnings[:0] = warnings
    result.api_calls = dict(client.calls)
    return result
