"""AWS discovery: EC2 ``DescribeInstances`` + ``DescribeInstanceTopology`` -> :class:`TopologyGraph`.

Full discovery (:func:`discover_full`) makes ``ceil(N/1000)`` DescribeInstances
pages (cluster filters + state pending/running, ``MaxResults=1000``) and
``ceil(R/100)`` DescribeInstanceTopology calls with explicit ``InstanceIds``
(R = running instances; never with ``MaxResults``). That is the minimum: a
paged listing (``MaxResults=100``, Topograph's choice above 100 instances) also
returns at most 100 instances per call but includes every other running
instance of a supported type in the region, so it never needs fewer calls; it
is available as ``topology_strategy="listing"`` for accounts where the listing
*is* the cluster. Incremental updates (:func:`discover_instances`) cost one
DescribeInstances and one DescribeInstanceTopology call per 100 changed
instances; removals cost nothing.

Mapping (AWS -> graph): ``NetworkNodes`` arrive root-first and are stored
closest-first (3 or 4 levels); ``CapacityBlockId`` is the accelerator domain.
A null ``CapacityBlockId`` for an UltraServer-class instance
(:data:`DEFAULT_ULTRASERVER_FAMILIES`) or for an instance that had a domain in
``previous`` means "not reported yet" (AWS is eventually consistent right after
launch): the node keeps its previous domain and gets ``accelerator_pending``.
Instances without topology (type not supported, still pending) stay in the
graph with an empty fabric and are reported in ``warnings``.

Node names (``name_from``), default ``private-dns``:

* ``private-dns`` - short host name of ``PrivateDnsName`` (``ip-10-0-1-17``),
  what ``hostname -s`` prints on stock AMIs and so what Slurm uses;
* ``private-dns-fqdn`` - the full ``PrivateDnsName``, the EKS node name;
* ``instance-id``;
* ``tag:<key>`` - a tag value, e.g. ``tag:Name``;
* ``template:<text>`` - text with ``{placeholder}`` fields: ``{instance_id}``,
  ``{instance_type}``, ``{zone}``, ``{private_dns}``, ``{private_dns_fqdn}``,
  ``{private_ip}``, ``{tag[Key]}``. No format specs, attribute access or
  expressions: it is not ``str.format``.

The default is ``private-dns`` because it exists for every VPC instance and is
unique by construction, while ``Name`` tags are often shared (ParallelCluster
tags every compute node ``Compute``). A node whose name source is missing,
unsafe or shared with another instance falls back to its instance ID and is
reported in ``warnings``, never dropped.

Topology before launch: with ``reserved_nodes`` (capacity reservation / block ID -> Slurm node
names), a full discovery also calls ``DescribeCapacityReservationTopology`` (batches of 10) and
places the named nodes no running instance carries yet (see :mod:`topocast.providers.aws.capacity`).

Errors: every failed call (after botocore's adaptive retries) raises
:class:`~topocast.errors.ProviderError` naming the operation, the region and
what to do; a discovery never returns a partial graph.
``InvalidInstanceID.NotFound`` means the instance is gone: it is removed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from topocast.errors import ProviderError, TopocastError
from topocast.model.changes import InstanceChange
from topocast.model.graph import Node, TopologyGraph
from topocast.model.health import CAPACITY_BLOCK_LABEL, HealthRecord, carry_forward
from topocast.model.placement import carry_unplaced, place_nodes
from topocast.providers import base
from topocast.providers.aws.capacity import parse_reserved_nodes, reserved_nodes
from topocast.providers.aws.ec2_calls import Ec2Calls
from topocast.providers.aws.health import SOURCE as HEALTH_SOURCE
from topocast.providers.aws.health import block_records, reservation_blocks
from topocast.providers.base import ProviderInputs
from topocast.providers.naming import WANTED_NAME_LABEL, Machine, Naming, claim_freed_names, name_machines, summary
from topocast.providers.options import ClusterConfig, OptionSpec
from topocast.safeio.validation import describe

__all__ = [
    "AwsDiscoveryConfig",
    "AwsProvider",
    "DiscoveryResult",
    "Ec2Filter",
    "Options",
    "discover_full",
    "discover_instances",
    "parse_filter",
    "provider",
]

DEFAULT_ULTRASERVER_FAMILIES = ("p6e-gb200", "p6e-gb300", "trn2u")
#: removal kinds that take out an instance that still runs (so EC2's state does not confirm them)
LEAVES_WHILE_RUNNING = frozenset({"aws.autoscaling/EC2 Instance-terminate Lifecycle Action"})
GONE_STATES = frozenset({"shutting-down", "terminated", "stopping", "stopped"})
#: states between two steady ones (running, or out): a *followed* instance in one keeps its node and is
#: reported in ``DiscoveryResult.unsettled`` (EC2 restarts nothing by itself: stopped / terminated are out)
TRANSITIONAL_STATES = frozenset({"pending", "stopping", "shutting-down"})
_PLACEHOLDER = re.compile(r"\{([a-z_]+)(?:\[([^\]{}]+)\])?\}")
_TEMPLATE_VARS = frozenset(
    {"instance_id", "instance_type", "zone", "private_dns", "private_dns_fqdn", "private_ip", "tag"}
)


# ----- configuration ---------------------------------------------------------------------------
class Ec2Filter(BaseModel):
    """One EC2 filter, in the API's own shape."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    Name: str = Field(min_length=1)
    Values: list[str] = Field(min_length=1)


def parse_filter(text: str) -> dict[str, Any]:
    """``"tag:topocast:cluster=c1,c2"`` -> ``{"Name": "tag:topocast:cluster", "Values": ["c1", "c2"]}``.

    The name ends at the first ``=``; values are split at commas (write ``\\,``
    for a literal comma). Raises ``ValueError`` saying what is wrong.
    """
    name, sep, rest = text.partition("=")
    name = name.strip()
    if not sep or not name:
        raise ValueError(f"filter {text!r} must look like NAME=VALUE[,VALUE...] (e.g. tag:topocast:cluster=c1)")
    values = [v.replace("\\,", ",").strip() for v in re.split(r"(?<!\\),", rest)]
    if any(not v for v in values):
        raise ValueError(f"filter {text!r} has an empty value")
    return {"Name": name, "Values": values}


def _check_template(template: str) -> None:
    pos = 0
    for m in _PLACEHOLDER.finditer(template):
        literal = template[pos : m.start()]
        if "{" in literal or "}" in literal:
            raise ValueError(f"name template {template!r}: unbalanced or malformed brace in {literal!r}")
        var, key = m.group(1), m.group(2)
        if var not in _TEMPLATE_VARS:
            raise ValueError(
                f"name template {template!r}: unknown placeholder {{{var}}}; known: "
                + ", ".join(sorted(_TEMPLATE_VARS - {"tag"}))
                + ", tag[Key]"
            )
        if (var == "tag") != (key is not None):
            raise ValueError(f"name template {template!r}: write tags as {{tag[Key]}}, other fields without [...]")
        pos = m.end()
    if "{" in template[pos:] or "}" in template[pos:]:
        raise ValueError(f"name template {template!r}: unbalanced or malformed brace in {template[pos:]!r}")
    if not _PLACEHOLDER.search(template):
        raise ValueError(f"name template {template!r} has no placeholder: every node would get the same name")


class Options(BaseModel):
    """The ``aws`` provider's options (``ProviderInputs.options``; the cluster comes from the shell)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    region: Annotated[
        str | None, OptionSpec(flags=("--region",), help="region (default: the standard AWS environment)")
    ] = Field(None, description="EC2 region; None = the client's region.")
    filters: Annotated[
        list[Ec2Filter],
        OptionSpec(
            env="TOPOCAST_FILTERS", split=";", flags=("--filter",), many=True,
            help="EC2 filter NAME=V1,V2, e.g. tag:topocast:cluster=c1 (repeatable)",
            env_help="cluster membership, EC2 filter syntax NAME=V1,V2 separated by ';'",
        ),
    ] = Field(
        default_factory=list,
        description="DescribeInstances filters selecting the cluster (strings like 'tag:k=v' are parsed).",
    )  # fmt: skip
    instance_types: Annotated[
        list[str], OptionSpec(env="TOPOCAST_INSTANCE_TYPES", env_help="optional instance-type allow list (';')")
    ] = Field(default_factory=list, description="Only these instance types (empty: all).")
    zones: Annotated[list[str], OptionSpec(env="TOPOCAST_ZONES", env_help="optional zone allow list (';')")] = Field(
        default_factory=list, description="Only these availability zones (empty: all)."
    )
    name_from: Annotated[
        str,
        OptionSpec(
            env="TOPOCAST_NAME_FROM", flags=("--name-from",),
            help="tag:<key>, private-dns, instance-id, template:<fmt>",
            env_help="node name source: tag:<key>, private-dns, instance-id, template:<fmt>",
        ),
    ] = Field("private-dns", description="Node name source, see the module docstring.")  # fmt: skip
    ultraserver_families: list[str] = Field(
        default_factory=lambda: list(DEFAULT_ULTRASERVER_FAMILIES),
        description="Families whose null CapacityBlockId means 'not reported yet'.",
    )
    topology_strategy: Literal["ids", "listing"] = Field(
        "ids", description="'ids': explicit InstanceIds batches; 'listing': paged listing filtered client-side."
    )
    reserved_nodes: Annotated[
        dict[str, list[str]],
        OptionSpec(
            env="TOPOCAST_RESERVED_NODES",
            env_help="topology before launch: capacity reservation -> Slurm node names, cr-ID=HOSTLIST;... or a "
            "JSON object",
        ),
    ] = Field(
        default_factory=dict,
        description="Capacity reservation / block ID -> Slurm node names (hostlists) placed before launch "
        "from DescribeCapacityReservationTopology (providers/aws/capacity.py).",
    )

    capacity_block_health: bool = Field(
        False,
        description="Read DescribeCapacityBlockStatus on every discovery: a capacity block whose interconnect "
        "is impaired becomes a health record of the graph (providers/aws/health.py, docs/health.md).",
    )

    @field_validator("reserved_nodes", mode="before")
    @classmethod
    def _reserved(cls, v: Any) -> Any:
        return parse_reserved_nodes(v)

    @field_validator("filters", mode="before")
    @classmethod
    def _filters(cls, v: Any) -> Any:
        if isinstance(v, list):
            return [parse_filter(f) if isinstance(f, str) else f for f in v]
        return v

    @field_validator("name_from", mode="before")
    @classmethod
    def _name_from_default(cls, v: Any) -> Any:
        return "private-dns" if v is None or v == "" else v

    @field_validator("name_from")
    @classmethod
    def _name_from(cls, v: str) -> str:
        if v in ("private-dns", "private-dns-fqdn", "instance-id"):
            return v
        if v.startswith("tag:") and len(v) > 4:
            return v
        if v.startswith("template:"):
            _check_template(v.removeprefix("template:"))
            return v
        raise ValueError(
            f"name_from {v!r} is not one of private-dns, private-dns-fqdn, instance-id, tag:<key>, template:<text>"
        )

    @model_validator(mode="after")
    def _no_state_filter(self) -> Self:
        for f in self.filters:
            if f.Name == "instance-state-name":
                raise ValueError("filters: instance-state-name is set by topocast (pending, running); remove it")
        return self


class AwsDiscoveryConfig(Options, ClusterConfig):
    """What makes up the cluster in EC2 and how its nodes are named: the options and the cluster."""

    SOURCE = "AWS discovery config"

    def membership_tag_keys(self) -> set[str]:
        """The tag keys the cluster filters select on (``tag:topocast:cluster=c1`` -> ``topocast:cluster``)."""
        return {f.Name.removeprefix("tag:") for f in self.filters if f.Name.startswith("tag:")}

    def describe_filters(self) -> list[dict[str, Any]]:
        """The cluster selection as DescribeInstances filters (without the state filter)."""
        out = [f.model_dump() for f in self.filters]
        if self.instance_types:
            out.append({"Name": "instance-type", "Values": list(self.instance_types)})
        if self.zones:
            out.append({"Name": "availability-zone", "Values": list(self.zones)})
        return out


@dataclass
class DiscoveryResult(base.DiscoveryResult):
    """``api_calls`` counts requests made (each page counts, botocore's retries do not)."""

    retries: int = 0  # botocore retry attempts summed over all calls
    strategy: str = "ids"  # how DescribeInstanceTopology was asked: "ids" or "listing"


# ----- building nodes --------------------------------------------------------------------------
def _tags(inst: dict[str, Any]) -> dict[str, str]:
    return {t["Key"]: t.get("Value", "") for t in inst.get("Tags") or []}


def _template_vars(inst: dict[str, Any]) -> dict[str, str | None]:
    fqdn = inst.get("PrivateDnsName") or None
    return {
        "instance_id": inst["InstanceId"],
        "instance_type": inst.get("InstanceType"),
        "zone": (inst.get("Placement") or {}).get("AvailabilityZone"),
        "private_dns": fqdn.split(".", 1)[0] if fqdn else None,
        "private_dns_fqdn": fqdn,
        "private_ip": inst.get("PrivateIpAddress"),
    }


def _raw_name(inst: dict[str, Any], name_from: str) -> tuple[str | None, str]:
    """(name or None, what the source was) for one DescribeInstances entry."""
    values = _template_vars(inst)
    if name_from == "instance-id":
        return inst["InstanceId"], "instance ID"
    if name_from == "private-dns":
        return values["private_dns"], "PrivateDnsName"
    if name_from == "private-dns-fqdn":
        return values["private_dns_fqdn"], "PrivateDnsName"
    tags = _tags(inst)
    if name_from.startswith("tag:"):
        key = name_from.removeprefix("tag:")
        return tags.get(key) or None, f"tag {key!r}"
    template = name_from.removeprefix("template:")
    parts: list[str] = []
    pos = 0
    for m in _PLACEHOLDER.finditer(template):
        value = tags.get(m.group(2)) if m.group(1) == "tag" else values.get(m.group(1))
        if not value:
            return None, f"template field {m.group(0)}"
        parts += [template[pos : m.start()], value]
        pos = m.end()
    parts.append(template[pos:])
    return "".join(parts), "template"


def _names(instances: dict[str, dict], name_from: str, taken: dict[str, str], previous: TopologyGraph | None) -> Naming:
    """Node name per instance ID by the shared rule (:func:`topocast.providers.naming.name_machines`); an
    instance whose source gives no usable name is named by its ID. ``taken``: names held outside this batch."""
    machines = [Machine(iid, *_raw_name(inst, name_from)) for iid, inst in instances.items()]
    return name_machines(machines, kind="instance", name_from=name_from, taken=taken, previous=previous)


def _build_nodes(
    instances: dict[str, dict],
    topo: dict[str, dict],
    names: dict[str, str],
    config: AwsDiscoveryConfig,
    previous: TopologyGraph | None,
    wanted: dict[str, str] | None = None,
    blocks: Mapping[str, str] | None = None,
) -> tuple[list[Node], list[str]]:
    """``blocks``: capacity reservation -> capacity block (capacity_block_health), kept as the node's
    ``capacity-block`` label when the block is not already its accelerator domain."""
    prev_by_id = {n.id: n for n in previous.nodes if n.id} if previous else {}
    no_topology: list[str] = []
    pending_domain: list[str] = []
    nodes = []
    for iid, inst in instances.items():
        entry = topo.get(iid)
        fabric = list(reversed(entry.get("NetworkNodes") or [])) if entry else []
        if not fabric:
            no_topology.append(iid)
        itype = inst.get("InstanceType") or (entry or {}).get("InstanceType")
        block = (entry or {}).get("CapacityBlockId") or None
        prev = prev_by_id.get(iid)
        accelerator, pending = block, False
        if block is None:
            ultra = itype is not None and str(itype).split(".", 1)[0] in config.ultraserver_families
            if ultra or (prev is not None and prev.accelerator):
                accelerator, pending = (prev.accelerator if prev else None), True
                pending_domain.append(iid)
        labels = {}
        if entry and entry.get("ZoneId"):
            labels["zone-id"] = entry["ZoneId"]
        group = (entry or {}).get("GroupName") or (inst.get("Placement") or {}).get("GroupName")
        if group:
            labels["placement-group"] = group
        if wanted and iid in wanted:
            labels[WANTED_NAME_LABEL] = wanted[iid]
        in_block = (blocks or {}).get(inst.get("CapacityReservationId") or "")
        if in_block and in_block != accelerator:
            labels[CAPACITY_BLOCK_LABEL] = in_block
        try:
            nodes.append(
                Node(
                    name=names[iid],
                    id=iid,
                    fabric=fabric,
                    accelerator=accelerator,
                    accelerator_pending=pending,
                    zone=(inst.get("Placement") or {}).get("AvailabilityZone"),
                    instance_type=itype,
                    labels=labels,
                )
            )
        except (ValidationError, TopocastError) as exc:
            raise ProviderError(f"EC2 returned unusable topology for instance {iid}: {exc}") from None
    warnings = []
    if no_topology:
        warnings.append(
            summary("instance(s) without topology (type not supported or not running yet); kept", no_topology)
        )
    if pending_domain:
        warnings.append(
            summary("instance(s) whose CapacityBlockId is not reported yet; previous domain kept", pending_domain)
        )
    return nodes, warnings


def _name_switch_clashes(nodes: list[Node]) -> tuple[list[Node], list[str]]:
    """A node whose name is also a switch ID of the fabric (a `Name` tag set to a leaf's ID) is named by
    its instance ID instead, so that one tag never fails the whole cluster's discovery."""
    switches = {sw for n in nodes for sw in n.fabric}
    clashes = [n.id for n in nodes if n.name in switches and n.id]
    if not clashes:
        return nodes, []
    out = [n.model_copy(update={"name": n.id}) if n.id in clashes else n for n in nodes]
    return out, [summary("instance(s) named like a switch of the fabric; named by instance ID", clashes)]


def _graph(
    config: AwsDiscoveryConfig,
    nodes: list[Node],
    previous: TopologyGraph | None,
    warnings: list[str],
    *,
    reread: list[Node] | None = None,
    health: Sequence[HealthRecord] = (),
) -> TopologyGraph:
    """The graph, an instance whose data breaks a rule set aside with the reason (``placement``);
    adds to ``warnings``.

    ``reread``: an incremental update's re-read nodes; what ``previous`` set aside is kept for the others.
    """
    nodes, clash_warnings = _name_switch_clashes(nodes)
    warnings += clash_warnings
    carried = (
        carry_unplaced(previous, reread=[n.name for n in reread], nodes=[n.name for n in nodes])
        if previous is not None and reread is not None
        else None
    )
    try:
        return place_nodes(
            config.cluster,
            "aws",
            sorted(nodes, key=lambda n: n.id or n.name),
            switch_names=dict(previous.switch_names) if previous else {},
            unplaced=carried,
            health=health,
        )
    except ValidationError as exc:
        raise ProviderError(
            f"AWS topology of cluster {config.cluster!r} is not a valid graph: {describe(exc)}"
        ) from None


def _health(
    config: AwsDiscoveryConfig, statuses: list[dict[str, Any]], nodes: list[Node], previous: TopologyGraph | None
) -> list[HealthRecord]:
    """The graph's health records: the capacity blocks of ``nodes`` (capacity_block_health), each keeping
    the time it was first seen in its state, and what other sources reported in ``previous``."""
    before = previous.health if previous is not None else []
    others = [r for r in before if r.source != HEALTH_SOURCE]  # other sources' records stay as they are
    if not config.capacity_block_health:
        return others
    used = {n.accelerator for n in nodes if n.accelerator} | {
        n.labels[CAPACITY_BLOCK_LABEL] for n in nodes if CAPACITY_BLOCK_LABEL in n.labels
    }
    now = datetime.now(UTC)
    current = block_records(statuses, used, now)
    # this source's records are replaced (a healed block leaves the graph)
    return others + carry_forward([r for r in before if r.source == HEALTH_SOURCE], current)


# ----- public entry points ---------------------------------------------------------------------
def discover_full(ec2: Any, config: AwsDiscoveryConfig, previous: TopologyGraph | None = None) -> DiscoveryResult:
    """Discover the whole cluster; ``previous`` only supplies domains not reported yet."""
    api = Ec2Calls(ec2, config.cluster, config.region)
    warnings: list[str] = []
    if not config.filters:
        warnings.append(
            f"no filters: every pending/running instance in {api.region} is treated as part of cluster "
            f"{config.cluster!r}"
        )
    instances, _ = api.describe(config.describe_filters())
    running = sorted(i for i, inst in instances.items() if inst.get("State", {}).get("Name") == "running")
    listing_filters = [f for f in config.describe_filters() if f["Name"] in ("instance-type", "availability-zone")]
    topo, gone = api.topology(running, config.topology_strategy, listing_filters)
    if gone:  # terminated between the two calls
        warnings.append(summary("instance(s) disappeared during discovery; removed", sorted(gone)))
        instances = {k: v for k, v in instances.items() if k not in gone}
    naming = _names(dict(sorted(instances.items())), config.name_from, {}, previous)
    names, name_warnings = naming.names, naming.warnings
    statuses = api.capacity_block_status() if config.capacity_block_health else []
    blocks = reservation_blocks(statuses)
    nodes, node_warnings = _build_nodes(instances, topo, names, config, previous, naming.wanted, blocks)
    if config.reserved_nodes:  # topology before launch: reserved names no running instance carries yet
        reservations, unknown = api.capacity_topology(sorted(config.reserved_nodes))
        placed, reserve_warnings = reserved_nodes(reservations, unknown, config.reserved_nodes, set(names.values()))
        nodes += placed
        warnings += reserve_warnings
    health = _health(config, statuses, nodes, previous)
    return DiscoveryResult(
        _graph(config, nodes, previous, warnings, health=health),
        api.calls,
        warnings + name_warnings + node_warnings,
        api.retries,
        config.topology_strategy,
    )


def discover_instances(
    ec2: Any, config: AwsDiscoveryConfig, previous: TopologyGraph, changes: Sequence[InstanceChange]
) -> DiscoveryResult:
    """Apply a few instance events to ``previous`` (one DescribeInstances + one topology call per 100)."""
    api = Ec2Calls(ec2, config.cluster, config.region)
    latest: dict[str, InstanceChange] = {}
    for ch in changes:  # last event per instance wins; event time decides when both have one
        cur = latest.get(ch.instance)
        if cur is None or cur.time is None or ch.time is None or ch.time >= cur.time:
            latest[ch.instance] = ch
    by_id = {n.id: n for n in previous.nodes if n.id}
    keep = [n for n in previous.nodes if not n.id]  # nodes from elsewhere (no instance ID) stay as they are
    warnings: list[str] = []
    # A removal is confirmed by the same DescribeInstances call as the upserts: a `stopped` or `terminated`
    # delivered late (after a newer `running`, or by a retried batch) must never take out a running instance.
    # Removals of instances this graph does not hold (other clusters) need no read.
    # A terminate lifecycle hook takes a running instance out on purpose: that removal needs no read.
    for iid, ch in latest.items():
        if ch.action == "remove" and ch.kind in LEAVES_WHILE_RUNNING:
            by_id.pop(iid, None)
    removals = sorted(i for i, ch in latest.items() if ch.action == "remove" and i in by_id)
    upserts = sorted(i for i, ch in latest.items() if ch.action == "upsert")
    reads = sorted({*upserts, *removals})

    described, missing = api.describe(config.describe_filters(), reads) if reads else ({}, set())
    live: dict[str, dict[str, Any]] = {}
    outside: list[str] = []
    waiting: list[str] = []
    stale: list[str] = []
    for iid in removals:
        inst = described.get(iid)
        state = (inst or {}).get("State", {}).get("Name")
        if inst is not None and state not in GONE_STATES:
            stale.append(iid)  # it runs (or starts) again: read as an upsert
            upserts.append(iid)
        else:
            by_id.pop(iid, None)
    if stale:
        warnings.append(summary("removal event(s) older than the instance's state (it runs); kept", stale))
    for iid in upserts:
        inst = described.get(iid)
        state = (inst or {}).get("State", {}).get("Name")
        if latest[iid].follow and inst is not None and state in TRANSITIONAL_STATES:
            waiting.append(iid)  # not steady: its node (if any) stays as it was, a later re-read decides
        elif inst is None or state in GONE_STATES:
            known = by_id.pop(iid, None) is not None
            if inst is None and iid not in missing:  # exists, but the cluster filters exclude it
                if known:
                    warnings.append(f"instance {iid} no longer matches the cluster filters; removed")
                else:
                    outside.append(iid)
        else:
            live[iid] = inst
    if outside:
        warnings.append(summary("instance event(s) ignored: not matching the cluster filters", outside))
    running = sorted(i for i, inst in live.items() if inst.get("State", {}).get("Name") == "running")
    topo, gone = api.topology(running)
    for iid in gone:  # terminated between the two calls
        live.pop(iid, None)
        by_id.pop(iid, None)
    taken = {n.name: i for i, n in by_id.items() if i not in live}
    naming = _names(live, config.name_from, taken, previous)
    statuses = api.capacity_block_status() if config.capacity_block_health else []
    blocks = reservation_blocks(statuses)
    nodes, node_warnings = _build_nodes(live, topo, naming.names, config, previous, naming.wanted, blocks)
    for node in nodes:
        by_id[node.id] = node  # type: ignore[index]
    name_warnings = naming.warnings + claim_freed_names(by_id, "instance(s)")
    # a launched instance replaces the before-launch placeholder of its name (providers/aws/capacity.py)
    launched = {n.name for n in by_id.values()}
    keep = [n for n in keep if n.name not in launched]
    everyone = keep + list(by_id.values())
    health = _health(config, statuses, everyone, previous)
    graph = _graph(config, everyone, previous, warnings, reread=nodes, health=health)
    return DiscoveryResult(
        graph, api.calls, warnings + name_warnings + node_warnings, api.retries, "ids", unsettled=waiting
    )


# ----- the Provider the functions and the CLI build through the registry -------------------------
class AwsProvider:
    """:class:`~topocast.providers.base.Provider` over an EC2 client the shell created (``sdk_client("ec2")``)."""

    name = "aws"
    incremental = True

    def __init__(self, inputs: ProviderInputs) -> None:
        data = {"cluster": inputs.cluster, **{k: v for k, v in inputs.options.items() if v not in (None, [])}}
        self.config = AwsDiscoveryConfig.from_data(data, "AWS discovery settings (TOPOCAST_* / flags)")
        self._client = inputs.sdk_client

    def discover_full(self, previous: TopologyGraph | None) -> DiscoveryResult:
        return discover_full(self._client("ec2"), self.config, previous)

    def discover_changes(self, previous: TopologyGraph, changes: Sequence[InstanceChange]) -> DiscoveryResult:
        return discover_instances(self._client("ec2"), self.config, previous, changes)

    def scope(self, change: InstanceChange) -> str | None:
        # the EventBridge rules and the cluster filters (checked by DescribeInstances) scope the rest
        if "changed-tag-keys" not in change.detail:  # only a tag change (aws.tag) names the keys it changed
            return None
        changed = {k for k in change.detail["changed-tag-keys"].split(",") if k}
        members = self.config.membership_tag_keys()
        if changed & members:
            return None
        return (
            f"tag change of {', '.join(sorted(changed)) or 'no key'}: not a membership tag "
            f"({', '.join(sorted(members)) or 'the cluster filters name no tag'})"
        )


def provider(inputs: ProviderInputs) -> AwsProvider:
    """Options: ``region``, ``filters``, ``instance_types``, ``zones``, ``name_from``, ``topology_strategy``."""
    return AwsProvider(inputs)
