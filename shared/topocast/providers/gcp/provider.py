"""GCP discovery: Compute Engine ``instances`` + ``resourceStatus.physicalHostTopology`` -> graph.

Full discovery (:func:`discover_full`) lists the cluster's VMs with
``instances.aggregatedList`` (or ``instances.list`` per zone when ``zones`` is
set), filtered server-side by the cluster label(s) and status
(``(labels.KEY = "VALUE") AND (status = "RUNNING")``), ``maxResults`` up to 500
per page, following ``nextPageToken``. ``ceil(N/500)`` calls for N VMs (per
zone when zones are listed). The same filter is applied again client-side, so
an endpoint that ignores it cannot pull foreign VMs into the graph.
Incremental updates (:func:`discover_instances`) cost one ``instances.get``
per changed VM (8 in flight); a VM that is gone (404), stopped or relabelled is removed,
except a *followed* one (host maintenance, restarts) that is not steady yet (:func:`unsettled`):
it keeps its node and is reported in ``DiscoveryResult.unsettled`` for a later re-read. A window
read by listing sees only RUNNING VMs: the followed VMs it misses get one ``instances.get`` each.

Mapping (GCE -> graph), Topograph-compatible by default:

* fabric, closest first: ``[subblock, block, cluster]`` (``fabric_levels``
  picks a subset, e.g. ``["block", "cluster"]``);
* accelerator (NVLink) domain: the sub-block (``domain_tier``: ``subblock``,
  ``block`` or ``none``);
* VMs without ``physicalHostTopology`` fall back to ``resourceStatus.physicalHost``
  (``[/]block/subBlock/host`` as the API reference documents it, or
  ``/cluster/block/subBlock/host``), taking the cluster from another VM of the
  same block when one reports it; a VM with neither, or with a partial topology,
  is kept with an empty fabric (``no-topology``) and reported in ``warnings``.
* Topology IDs are used as switch names as they come. Should the same sub-block
  ID appear under two blocks (or a block under two clusters), the later one is
  qualified with a short digest of its parent so the paths still form a tree,
  and a warning says so.

Node names (``name_from``): ``name`` (the VM name, default), ``hostname`` (the
first label of a custom ``hostname``), ``instance-id`` or ``label:<key>``. A VM
whose name source is missing, unsafe or shared falls back to its VM name, then
to its numeric ID, with a warning; it is never dropped.

Errors: a failed call (after retries of 429/5xx) raises
:class:`~topocast.errors.ProviderError` naming the operation, project and zone
and what to do (403: which role to grant); a discovery never returns a partial
graph. A VM whose data breaks a rule of the graph (a topology ID that is not a safe switch name, a
path that contradicts the other VMs', an unsafe sub-block as domain) is set aside with the reason in
``graph.unplaced`` (:func:`topocast.model.placement.place_nodes`); the other VMs are placed. An incremental
update keeps what the previous graph set aside unless that VM was read again or is gone.
The Compute calls themselves (paging, retries, errors) are :mod:`topocast.providers.gcp.api`;
google-cloud-compute is imported lazily (see :mod:`topocast.providers.gcp.sdk`).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Annotated, Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from topocast.errors import InvalidGraphError, ProviderError, TopocastError
from topocast.model.changes import InstanceChange
from topocast.model.graph import Node, TopologyGraph
from topocast.model.health import HealthRecord, carry_forward
from topocast.model.names import check_domain_name, check_switch_name
from topocast.model.placement import carry_unplaced, place_nodes
from topocast.providers import base
from topocast.providers.base import NeedsFullScan, ProviderInputs
from topocast.providers.gcp.api import ComputeCalls, InstanceRef, Vm
from topocast.providers.gcp.health import SOURCE as HEALTH_SOURCE
from topocast.providers.gcp.health import parse_sub_block, sub_block_record
from topocast.providers.gcp.retry import RetryPolicy
from topocast.providers.naming import WANTED_NAME_LABEL, Machine, Naming, claim_freed_names, name_machines, summary
from topocast.providers.options import ClusterConfig, OptionSpec
from topocast.safeio.validation import describe

__all__ = [
    "DiscoveryResult",
    "GcpDiscoveryConfig",
    "GcpProvider",
    "Options",
    "discover_full",
    "discover_instances",
    "listing_pages",
    "parse_label",
    "prefer_listing",
    "provider",
]

MAX_PAGE = 500
#: instances.get calls in flight during an incremental update
GET_CONCURRENCY = 8
LEVELS: tuple[Literal["subblock", "block", "cluster"], ...] = ("subblock", "block", "cluster")
_LABEL_KEY = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
_LABEL_VALUE = re.compile(r"^[a-z0-9_-]{0,63}$")


def parse_label(text: str) -> tuple[str, str]:
    """``"topocast-cluster=c1"`` -> ``("topocast-cluster", "c1")``; GCE label syntax is enforced."""
    key, sep, value = text.partition("=")
    key, value = key.strip(), value.strip()
    if not sep or not key:
        raise ValueError(f"label {text!r} must look like KEY=VALUE (e.g. topocast-cluster=c1)")
    if not _LABEL_KEY.match(key):
        raise ValueError(f"label key {key!r} is not a GCE label key (lowercase letters, digits, _ and -)")
    if not _LABEL_VALUE.match(value):
        raise ValueError(f"label value {value!r} of {key!r} is not a GCE label value (lowercase, digits, _ and -)")
    return key, value


class Options(BaseModel):
    """The ``gcp`` provider's options (``ProviderInputs.options``; the cluster comes from the shell)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: TOPOCAST_GCP_PROJECT is also the functions' own project (their bucket's): a setting of the GCP shell
    project: Annotated[str, OptionSpec(env="TOPOCAST_GCP_PROJECT", flags=("--project",), help="project ID",
                                       required="--project")] = Field(
        min_length=1, description="Project ID (or number) that owns the VMs."
    )  # fmt: skip
    zones: Annotated[
        list[str],
        OptionSpec(
            env="TOPOCAST_GCP_ZONES", flags=("--zone",), many=True, help="zone (repeatable; default: all zones)",
            env_help="zones to list (';'); empty: aggregatedList over all zones",
        ),
    ] = Field(default_factory=list, description="List only these zones (empty: aggregatedList).")  # fmt: skip
    labels: Annotated[
        dict[str, str],
        OptionSpec(
            env="TOPOCAST_GCP_LABEL", split=";", flags=("--label",), many=True, help="cluster label",
            env_help="cluster membership, GCE labels KEY=VALUE (';', all must match)",
        ),
    ] = Field(default_factory=dict, description="Cluster membership: every label must match.")  # fmt: skip
    statuses: list[str] = Field(
        default_factory=lambda: ["RUNNING"], min_length=1, description="VM statuses that are cluster nodes."
    )
    name_from: Annotated[
        str, OptionSpec(env="TOPOCAST_NAME_FROM", flags=("--name-from",), help="name, hostname, label:<k>")
    ] = Field("name", description="name | hostname | instance-id | label:<key>")
    domain_tier: Annotated[
        Literal["subblock", "block", "none"],
        OptionSpec(
            env="TOPOCAST_GCP_DOMAIN_TIER", env_help="NVLink domain from physicalHostTopology: subblock, block, none"
        ),
    ] = Field("subblock", description="The physicalHostTopology level that is the NVLink domain.")
    fabric_levels: list[Literal["subblock", "block", "cluster"]] = Field(
        default_factory=lambda: list(LEVELS), description="The physicalHostTopology levels of the fabric path."
    )
    page_size: int = Field(MAX_PAGE, ge=1, le=MAX_PAGE, description="VMs per listing page.")
    sub_block_health: bool = Field(
        False,
        description="On a full discovery, read the healthInfo of the reservation sub-blocks the VMs run in "
        "(one reservationSubBlocks.get each) into the graph's health records (providers/gcp/health.py).",
    )
    read: Annotated[
        Literal["auto", "list", "get"],
        OptionSpec(
            env="TOPOCAST_GCP_READ",
            env_help="apply a window of changes by auto (cheaper of list/get), list or get",
        ),
    ] = Field(
        "auto", description="How a window of changed VMs is read: the cheaper of a listing and gets, or always one."
    )

    @classmethod
    def default_cluster(cls, options: Mapping[str, Any]) -> str | None:
        """``topocast discover`` without ``--cluster``: the value of the only label, else the project."""
        labels = options.get("labels") or []
        value = labels[0].partition("=")[2] if isinstance(labels, list) and len(labels) == 1 else ""
        return str(value or options.get("project") or "") or None

    @field_validator("labels", mode="before")
    @classmethod
    def _labels(cls, v: Any) -> Any:
        if isinstance(v, list | tuple):
            return dict(parse_label(str(item)) for item in v)
        if isinstance(v, dict):
            return dict(parse_label(f"{k}={val}") for k, val in v.items())
        return v

    @field_validator("statuses")
    @classmethod
    def _statuses(cls, v: list[str]) -> list[str]:
        return [s.strip().upper() for s in v]

    @field_validator("name_from", mode="before")
    @classmethod
    def _name_from(cls, v: Any) -> Any:
        v = "name" if v in (None, "") else v
        if v in ("name", "hostname", "instance-id") or (isinstance(v, str) and v.startswith("label:") and len(v) > 6):
            return v
        raise ValueError(f"name_from {v!r} is not one of name, hostname, instance-id, label:<key>")

    @model_validator(mode="after")
    def _levels(self) -> Self:
        order = [lvl for lvl in LEVELS if lvl in self.fabric_levels]
        if not self.fabric_levels or order != list(self.fabric_levels):
            raise ValueError(f"fabric_levels must be a non-empty closest-first subset of {list(LEVELS)}")
        return self


class GcpDiscoveryConfig(Options, ClusterConfig):
    """What makes up the cluster in a GCP project and how its nodes are named: the options and the cluster."""

    SOURCE = "GCP discovery config"

    def list_filter(self) -> str:
        """The server-side filter: every label, plus the status when there is exactly one."""
        terms = [f'(labels.{k} = "{v}")' for k, v in sorted(self.labels.items())]
        if len(self.statuses) == 1:
            terms.append(f'(status = "{self.statuses[0]}")')
        return " AND ".join(terms)


@dataclass
class DiscoveryResult(base.DiscoveryResult):
    """``api_calls`` counts requests made (each page counts); ``retries`` the retried attempts."""

    retries: int = 0
    upserted: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)


# ----- following a VM through host maintenance -------------------------------------------------
#: VM statuses between two steady ones (running, or out); a followed VM in one is read again later
TRANSITIONAL = frozenset({"PROVISIONING", "STAGING", "STOPPING", "SUSPENDING", "REPAIRING", "PENDING_STOP"})
#: events after which a stopped VM stays stopped: the guest shut it down (automaticRestart does not apply)
_NO_RESTART = ("compute.instances.guestTerminate",)


def unsettled(vm: Vm | None, change: InstanceChange) -> bool:
    """Is the followed ``change``'s VM not steady yet (kept at its last place, read again later)?

    Steady: RUNNING, gone (404), or stopped (TERMINATED / STOPPED / SUSPENDED) with no restart
    expected. A VM that Compute Engine stopped for a host event and restarts by itself
    (``automaticRestart``) is not steady while TERMINATED, unless this is the last re-check.
    """
    if vm is None or not change.follow:
        return False
    if vm.status in TRANSITIONAL:
        return True
    restart_expected = vm.status == "TERMINATED" and vm.automatic_restart and not change.kind.endswith(_NO_RESTART)
    return restart_expected and not change.final


# ----- building nodes --------------------------------------------------------------------------
def _member(vm: Vm, config: GcpDiscoveryConfig) -> bool:
    return (
        vm.status in config.statuses
        and all(vm.labels.get(k) == v for k, v in config.labels.items())
        and (not config.zones or vm.zone in config.zones)
    )


def _raw_name(vm: Vm, name_from: str) -> tuple[str | None, str]:
    if name_from == "name":
        return vm.name, "VM name"
    if name_from == "hostname":
        return (vm.hostname.split(".", 1)[0] or None), "hostname"
    if name_from == "instance-id":
        return vm.id, "instance ID"
    key = name_from.removeprefix("label:")
    return vm.labels.get(key) or None, f"label {key}"


def _names(vms: Sequence[Vm], name_from: str, taken: dict[str, str], previous: TopologyGraph | None) -> Naming:
    """Node name per VM ID by the shared rule (:func:`topocast.providers.naming.name_machines`): a VM whose
    source gives no usable name is named by its VM name, then its numeric ID. ``taken``: names held outside
    this batch."""
    machines = [Machine(vm.id, *_raw_name(vm, name_from), f"{vm.zone}/{vm.name}", vm.name) for vm in vms]
    return name_machines(machines, kind="VM", name_from=name_from, taken=taken, previous=previous)


def _parse_physical_host(text: str) -> dict[str, str] | None:
    """``[/]block/subblock/host`` or ``/cluster/block/subblock/host``; None if neither."""
    parts = [p for p in text.strip().strip("/").split("/")]
    if any(not p for p in parts):
        return None
    if len(parts) == 3:
        return dict(zip(("block", "subblock", "host"), parts, strict=True))
    if len(parts) == 4:
        return dict(zip(("cluster", "block", "subblock", "host"), parts, strict=True))
    return None


#: the reason :meth:`_Paths.path` gives for a topology ID that is not a safe switch name
UNUSABLE = "unusable topology ID"


def _digest(*parts: str) -> str:
    return hashlib.sha256("/".join(parts).encode()).hexdigest()[:8]


class _Paths:
    """Turns per-VM topology into switch paths that form a tree (see the module doc)."""

    def __init__(self, config: GcpDiscoveryConfig, previous: TopologyGraph | None) -> None:
        self.levels = list(config.fabric_levels)
        self.block_cluster: dict[str, str] = {}
        #: switch ID -> (height below the root of its path, parent ID)
        self.owner: dict[str, tuple[int, str | None]] = {}
        self.qualified: list[str] = []
        if previous is not None:
            for node in previous.nodes:
                self._remember(node.fabric)
                if self.levels[-2:] == ["block", "cluster"] and len(node.fabric) == len(self.levels):
                    self.block_cluster.setdefault(node.fabric[-2], node.fabric[-1])

    def _remember(self, path: Sequence[str]) -> None:
        depth = len(path)
        for i, sw in enumerate(path):
            self.owner.setdefault(sw, (depth - 1 - i, path[i + 1] if i + 1 < depth else None))

    def learn(self, topo: dict[str, str]) -> None:
        if topo.get("block") and topo.get("cluster"):
            self.block_cluster.setdefault(topo["block"], topo["cluster"])

    def path(self, vm: Vm) -> tuple[list[str], str | None, str | None]:
        """(fabric closest-first, sub-block, block) or ([], None, None) with the reason in the 2nd slot."""
        topo = vm.topology
        if not topo or not all(topo.get(k) for k in ("cluster", "block", "subblock")):
            parsed = _parse_physical_host(vm.physical_host) if vm.physical_host else None
            if parsed is None:
                why = "partial physicalHostTopology" if topo else "no physicalHostTopology"
                return [], why, None
            parsed.setdefault("cluster", self.block_cluster.get(parsed["block"], ""))
            topo = parsed
        raw = [topo[level] for level in self.levels if topo.get(level)]
        if len(raw) != len(self.levels):
            return [], "no cluster for its block (physicalHost only)", None
        try:
            for sw in raw:
                check_switch_name(sw, vm.name)
        except TopocastError as exc:
            return [], f"{UNUSABLE} ({exc})", None
        # qualify from the root down, so a parent's final ID is known before its children
        final: list[str] = []
        parent: str | None = None
        for height, sw in enumerate(reversed(raw)):  # height: distance from the root, as in graph.py
            want = (height, parent)
            current = sw
            seen = self.owner.get(sw)
            if seen is not None and seen != want:
                current = f"{sw}-{_digest(str(height), parent or '')}"
                self.qualified.append(sw)
            self.owner.setdefault(current, want)
            final.append(current)
            parent = current
        return list(reversed(final)), topo.get("subblock"), topo.get("block")


#: node label holding the reservation sub-block a VM runs in (``sub_block_health``), for repair reports
SUB_BLOCK_LABEL = "gcp-sub-block"


def _labels(vm: Vm, naming: Naming, config: GcpDiscoveryConfig) -> dict[str, str]:
    labels = {WANTED_NAME_LABEL: naming.wanted[vm.id]} if vm.id in naming.wanted else {}
    ref = parse_sub_block(vm.sub_block) if config.sub_block_health and vm.sub_block else None
    if ref is not None:
        zone, reservation, block, sub = ref
        labels[SUB_BLOCK_LABEL] = (
            f"zones/{zone}/reservations/{reservation}/reservationBlocks/{block}/reservationSubBlocks/{sub}"
        )
    return labels


def _nodes(
    vms: Sequence[Vm], naming: Naming, config: GcpDiscoveryConfig, paths: _Paths
) -> tuple[list[Node], list[str], dict[str, str]]:
    """The VMs' nodes, warnings, and what was set aside (node name -> reason: data that breaks a rule)."""
    names = naming.names
    without: dict[str, list[str]] = {}
    aside: dict[str, str] = {}
    nodes: list[Node] = []
    for vm in vms:
        fabric, sub, block = paths.path(vm)
        domain: str | None = None
        if fabric:
            domain = sub if config.domain_tier == "subblock" else block if config.domain_tier == "block" else None
            if domain is not None:
                try:
                    check_domain_name(domain, names[vm.id])
                except TopocastError as exc:
                    aside[names[vm.id]] = f"accelerator domain dropped: {exc}"
                    domain = None
        else:
            without.setdefault(sub or "no topology", []).append(names[vm.id])
            if sub is not None and sub.startswith(UNUSABLE):  # broken data, not a VM without topology
                aside[names[vm.id]] = f"physicalHostTopology of VM {vm.zone}/{vm.name}: {sub}; kept without topology"
        nodes.append(
            Node(
                name=names[vm.id],
                id=vm.id,
                fabric=fabric,
                accelerator=domain,
                zone=vm.zone,
                instance_type=vm.machine_type,
                labels=_labels(vm, naming, config),
            )
        )
    warnings = [summary(f"VM(s) without topology ({why}), kept as no-topology", n) for why, n in without.items()]
    if paths.qualified:
        warnings.append(
            summary("topology ID(s) seen under two parents, qualified with a digest of the parent", paths.qualified)
        )
    return nodes, warnings, aside


def _graph(
    config: GcpDiscoveryConfig,
    nodes: Iterable[Node],
    unplaced: Mapping[str, str] | None = None,
    health: Sequence[HealthRecord] = (),
) -> TopologyGraph:
    # a VM whose data breaks a rule of the graph is set aside with the reason; the others are placed
    try:
        return place_nodes(config.cluster, "gcp", sorted(nodes, key=lambda n: n.name), unplaced=unplaced, health=health)
    except (ValidationError, TopocastError) as exc:  # not one VM's fault (the cluster name is checked first)
        message = describe(exc) if isinstance(exc, ValidationError) else str(exc)
        raise InvalidGraphError(f"GCP discovery of {config.cluster}: {message}") from None


def _sub_block_health(
    api: ComputeCalls,
    sub_blocks: Any,
    config: GcpDiscoveryConfig,
    vms: Sequence[Vm],
    nodes: Sequence[Node],
    previous: TopologyGraph | None,
) -> list[HealthRecord]:
    """The sub-blocks' records (``sub_block_health``), each keeping the time first seen in its state; the
    other sources' records of ``previous`` stay."""
    before = list(previous.health) if previous is not None else []
    others = [r for r in before if r.source != HEALTH_SOURCE]
    if not config.sub_block_health or sub_blocks is None:
        return others
    kind = "domain" if config.domain_tier == "subblock" else "switch"
    known = {n.accelerator for n in nodes if n.accelerator} | {sw for n in nodes for sw in n.fabric}
    refs = sorted({ref for vm in vms if vm.sub_block and (ref := parse_sub_block(vm.sub_block)) is not None})
    now = datetime.now(UTC)
    current: list[HealthRecord] = []
    for ref in refs:
        sub = api.sub_block(sub_blocks, *ref)
        rec = sub_block_record(sub, kind, known, now) if sub is not None else None
        if rec is not None and all(r.ref != rec.ref for r in current):
            current.append(rec)
    return others + carry_forward([r for r in before if r.source == HEALTH_SOURCE], current)


def discover_full(
    client: Any,
    config: GcpDiscoveryConfig,
    previous: TopologyGraph | None = None,
    *,
    retry: RetryPolicy | None = None,
    sub_blocks: Any = None,
) -> DiscoveryResult:
    """Discover the whole cluster. ``previous`` only keeps qualified switch IDs stable (and health record
    times). ``sub_blocks``: a ``ReservationSubBlocksClient`` (``sub_block_health``)."""
    api = ComputeCalls(client, config.project, retry)
    warnings: list[str] = []
    if not config.labels:
        where = ", ".join(config.zones) if config.zones else "every zone"
        warnings.append(
            f"no labels: every {'/'.join(config.statuses)} VM of project {config.project} in {where} is "
            f"treated as part of cluster {config.cluster!r}"
        )
    listed = api.list_all(config.zones, config.page_size, config.list_filter())
    vms = sorted((vm for vm in listed if _member(vm, config)), key=lambda v: (v.zone, v.name))
    paths = _Paths(config, previous)
    for vm in vms:
        if vm.topology:
            paths.learn(vm.topology)
    naming = _names(vms, config.name_from, {}, previous)
    nodes, node_warnings, aside = _nodes(vms, naming, config, paths)
    name_warnings = naming.warnings
    health = _sub_block_health(api, sub_blocks, config, vms, nodes, previous)
    graph = _graph(config, nodes, aside, health)
    return DiscoveryResult(
        graph, api.calls, warnings + name_warnings + node_warnings, api.retries, upserted=graph.node_names()
    )


def discover_instances(
    client: Any,
    config: GcpDiscoveryConfig,
    previous: TopologyGraph | None,
    refs: Sequence[InstanceRef],
    *,
    retry: RetryPolicy | None = None,
    followed: Mapping[tuple[str, str], InstanceChange] | None = None,
) -> DiscoveryResult:
    """Re-check the VMs named by events (one ``instances.get`` each) and apply them to ``previous``.

    A VM that is found, running and labelled as a member is (re)inserted; one
    that is gone, stopped or no longer a member is removed. A ``followed`` VM
    (zone, name -> its change) that is not steady yet (:func:`unsettled`) keeps
    its node and is named in ``unsettled``. Raises :class:`NeedsFullScan` when
    the result would not be a valid graph.
    """
    api = ComputeCalls(client, config.project, retry)
    base_nodes = list(previous.nodes) if previous is not None else []
    unique: dict[tuple[str, str], InstanceRef] = {}
    for ref in refs:
        unique[(ref.zone, ref.name)] = ref
    keys = sorted(unique)
    with ThreadPoolExecutor(max_workers=max(1, min(GET_CONCURRENCY, len(keys)))) as pool:
        fetched = dict(zip(keys, pool.map(lambda k: api.get(unique[k]), keys), strict=True))
    followed = followed or {}
    waiting = {k for k, vm in fetched.items() if k in followed and unsettled(vm, followed[k])}
    for k in waiting:  # kept exactly as it was: neither dropped nor re-placed from a half-way read
        unique.pop(k)
        fetched.pop(k)
    live = [vm for vm in fetched.values() if vm is not None and _member(vm, config)]
    drop_ids = {r.instance_id for r in unique.values() if r.instance_id}
    drop_ids |= {vm.id for vm in fetched.values() if vm is not None}
    by_name = config.name_from == "name"
    drop_names = {(z, n) for (z, n) in unique} if by_name else set()
    kept = [n for n in base_nodes if n.id not in drop_ids and (n.zone, n.name) not in drop_names]
    removed = sorted({n.name for n in base_nodes} - {n.name for n in kept})
    paths = _Paths(config, previous)
    for vm in live:
        if vm.topology:
            paths.learn(vm.topology)
    naming = _names(live, config.name_from, {n.name: n.id or "" for n in kept}, previous)
    nodes, node_warnings, aside = _nodes(live, naming, config, paths)
    warnings = naming.warnings
    # a VM named by its ID because another held its name (a name reused in another zone before the
    # deletion was applied) takes the name once its holder is gone
    by_key = {n.id or n.name: n for n in [*kept, *nodes]}
    warnings += claim_freed_names(by_key, "VM(s)")
    new_name = {n.name: by_key[n.id or n.name].name for n in [*kept, *nodes]}
    aside = {new_name.get(name, name): why for name, why in aside.items()}
    renamed = [n for n in kept if new_name[n.name] != n.name]
    kept = [by_key[n.id or n.name] for n in kept]
    nodes = [by_key[n.id or n.name] for n in nodes]
    # what the previous graph set aside stays set aside unless its VM was read again now or is gone
    carried: dict[str, str] = {}
    if previous is not None:
        carried = carry_unplaced(previous, reread=[n.name for n in nodes], nodes=[n.name for n in [*kept, *nodes]])
    try:
        # sub-block health is read on full discoveries (the reconcile): an event window keeps the last records
        graph = _graph(config, [*kept, *nodes], {**carried, **aside}, previous.health if previous else ())
    except InvalidGraphError as exc:
        raise NeedsFullScan(
            f"incremental update does not fit the stored graph ({exc}); a full scan is needed"
        ) from None
    upserted = sorted({*(n.name for n in nodes), *(new_name[n.name] for n in renamed)})
    removed = sorted({*removed, *(n.name for n in renamed)})
    return DiscoveryResult(
        graph, api.calls, warnings + node_warnings, api.retries, upserted, sorted(set(removed) - set(upserted)),
        unsettled=sorted(followed[k].instance for k in waiting),
    )  # fmt: skip


# ----- list or get: the cheaper way to apply a window of changes ----------------------------------
#: a listing page carries up to 500 VMs (several times the bytes and latency of one instances.get):
#: listing wins when the changed VMs would cost more than this many gets per listing page
GETS_PER_PAGE = 4


def listing_pages(config: GcpDiscoveryConfig, vms: int) -> int:
    """Requests a full listing of ``vms`` VMs costs (at least one per listed zone)."""
    pages = -(-max(vms, 1) // config.page_size)
    return max(pages, len(config.zones) or 1)


def prefer_listing(config: GcpDiscoveryConfig, previous: TopologyGraph | None, refs: Sequence[InstanceRef]) -> bool:
    """List instead of one ``instances.get`` per VM? Decided by counts only, so the same set of changed
    VMs against the same stored graph always takes the same path (and the same number of calls)."""
    changed = {(r.zone, r.name) for r in refs}
    known = {(n.zone, n.name) for n in previous.nodes} if previous is not None else set()
    size = len(known | changed)  # the cluster when the window closes, as far as anyone knows
    return len(changed) > GETS_PER_PAGE * listing_pages(config, size)


def _ref(change: InstanceChange) -> InstanceRef:
    project, _, rest = change.instance.partition("/")
    zone, _, name = rest.partition("/")
    if not (project and zone and name):
        raise ProviderError(f"GCP instance change {change.instance!r} is not PROJECT/ZONE/NAME")
    return InstanceRef(zone, name, change.detail.get("instance_id") or None)


#: the service name the provider asks its ``sdk_client`` for: a ``compute_v1.ReservationSubBlocksClient``
SUB_BLOCKS_CLIENT = "compute-sub-blocks"


class GcpProvider:
    """:class:`~topocast.providers.base.Provider` over the shell's Compute client (``sdk_client("compute")``)."""

    name = "gcp"
    incremental = True

    def __init__(self, inputs: ProviderInputs) -> None:
        data = {"cluster": inputs.cluster, **{k: v for k, v in inputs.options.items() if v not in (None, [])}}
        self.config = GcpDiscoveryConfig.from_data(data, "TOPOCAST_GCP_* configuration")
        self._client = inputs.sdk_client

    def _sub_blocks(self) -> Any:
        return self._client(SUB_BLOCKS_CLIENT) if self.config.sub_block_health else None

    def discover_full(self, previous: TopologyGraph | None) -> DiscoveryResult:
        return discover_full(self._client("compute"), self.config, previous, sub_blocks=self._sub_blocks())

    def discover_changes(self, previous: TopologyGraph, changes: Sequence[InstanceChange]) -> DiscoveryResult:
        refs = [_ref(c) for c in changes]
        followed: dict[tuple[str, str], InstanceChange] = {}
        for r, c in zip(refs, changes, strict=True):  # a fresh event of the VM outweighs its last re-check
            if c.follow and ((r.zone, r.name) not in followed or followed[(r.zone, r.name)].final):
                followed[(r.zone, r.name)] = c
        mode = self.config.read
        if mode == "list" or (mode == "auto" and prefer_listing(self.config, previous, refs)):
            full = discover_full(self._client("compute"), self.config, previous, sub_blocks=self._sub_blocks())
            if followed:
                full = self._follow_after_listing(previous, full, refs, followed)
            before = set(previous.node_names())
            full.upserted = sorted(set(full.graph.node_names()) - before)
            full.removed = sorted(before - set(full.graph.node_names()))
            return full
        return discover_instances(self._client("compute"), self.config, previous, refs, followed=followed)

    def _follow_after_listing(
        self,
        previous: TopologyGraph,
        listed: DiscoveryResult,
        refs: Sequence[InstanceRef],
        followed: Mapping[tuple[str, str], InstanceChange],
    ) -> DiscoveryResult:
        """A listing sees only RUNNING VMs: the followed ones it misses are read one by one, from the
        listing's graph plus their previous nodes, so one that is not steady keeps its place."""
        by_name = self.config.name_from == "name"
        ids = {n.id for n in listed.graph.nodes}
        places = {(n.zone, n.name) for n in listed.graph.nodes} if by_name else set()

        def matches(n: Node, r: InstanceRef) -> bool:
            return (r.instance_id is not None and n.id == r.instance_id) or (
                by_name and (n.zone, n.name) == (r.zone, r.name)
            )

        absent = [
            r
            for r in refs
            if (r.zone, r.name) in followed and r.instance_id not in ids and (r.zone, r.name) not in places
        ]
        if not absent:
            return listed
        names = set(listed.graph.node_names())
        restore = [n for n in previous.nodes if n.name not in names and any(matches(n, r) for r in absent)]
        try:
            base = _graph(self.config, [*listed.graph.nodes, *restore], listed.graph.unplaced)
        except InvalidGraphError:
            base = listed.graph
        read = discover_instances(self._client("compute"), self.config, base, absent, followed=followed)
        calls = dict(listed.api_calls)
        for op, n in read.api_calls.items():
            calls[op] = calls.get(op, 0) + n
        return DiscoveryResult(
            read.graph, calls, listed.warnings + read.warnings, listed.retries + read.retries, unsettled=read.unsettled
        )

    def scope(self, change: InstanceChange) -> str | None:
        ref_project, _, rest = change.instance.partition("/")
        zone = rest.partition("/")[0]
        if ref_project != self.config.project and not ref_project.isdigit():
            return f"event for project {ref_project}; this function serves {self.config.project}"
        if self.config.zones and zone not in self.config.zones:
            return f"zone {zone} is not one of {self.config.zones}"
        return None


def provider(inputs: ProviderInputs) -> GcpProvider:
    """Options: ``project``, ``zones``, ``labels``, ``name_from``, ``domain_tier``, ``page_size``."""
    return GcpProvider(inputs)
