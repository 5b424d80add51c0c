"""A generated GCE GPU cluster, as Compute Engine REST ``Instance`` JSON.

:func:`generate_cluster` lays ``n`` VMs out the way Compute Engine reports
dense GPU capacity (A3 Ultra, A4, A4X): every VM carries
``resourceStatus.physicalHostTopology`` ``{cluster, block, subblock, host}``
and the older ``resourceStatus.physicalHost`` string ``/block/subblock/host``
(the API reference documents ``blockId/subBlockId/hostId``; real values carry a
leading ``/``). VM ``i`` sits in sub-block ``i // hosts_per_subblock``;
sub-blocks group by ``subblocks_per_block`` into blocks, blocks by
``blocks_per_cluster`` into Compute Engine clusters. IDs are hex digests of the
seed, so two generated clusters never share a block.

Knobs for the awkward cases a discovery must survive:

* ``without_topology``: that many VMs (the last ones) get no ``resourceStatus``
  at all, like machine types without topology or VMs still being placed;
* ``physical_host_only``: that many VMs (just before those) report only the
  ``physicalHost`` string, no ``physicalHostTopology``;
* ``extra``: non-cluster VMs (other label) that a label filter must leave out.

The JSON is what the REST API returns (camelCase, ``id`` as a decimal string,
``zone``/``machineType`` as full URLs), so google-cloud-compute parses it as it
parses the real answer. :mod:`topocast_sim.gce_server` serves it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

API = "https://www.googleapis.com/compute/v1"
DEFAULT_MACHINE_TYPE = "a3-ultragpu-8g"
DEFAULT_LABEL = ("topocast-cluster", "demo")


def _digest(*parts: object, length: int = 16) -> str:
    return hashlib.sha256("/".join(str(p) for p in parts).encode()).hexdigest()[:length]


def instance_id(seed: str, name: str) -> str:
    """A stable uint64 instance ID (decimal string, as the REST API sends it)."""
    return str(int(_digest(seed, "id", name, length=15), 16) + 10**17)


@dataclass(frozen=True)
class Placement:
    """Where one VM sits; ``None`` fields are not reported by the API."""

    cluster: str
    block: str
    subblock: str
    host: str


def placement(
    index: int, *, seed: str, hosts_per_subblock: int, subblocks_per_block: int, blocks_per_cluster: int
) -> Placement:
    sub = index // hosts_per_subblock
    block = sub // subblocks_per_block
    cluster = block // blocks_per_cluster
    return Placement(
        cluster=f"{seed}-cluster-{_digest(seed, 'cluster', cluster, length=4)}",
        block=_digest(seed, "block", block, length=32),
        subblock=_digest(seed, "subblock", sub, length=32),
        host=_digest(seed, "host", index, length=32),
    )


def instance_json(
    project: str,
    zone: str,
    name: str,
    *,
    iid: str,
    where: Placement | None,
    topology: bool = True,
    machine_type: str = DEFAULT_MACHINE_TYPE,
    labels: dict[str, str] | None = None,
    status: str = "RUNNING",
    hostname: str | None = None,
) -> dict[str, Any]:
    """One ``compute#instance`` resource. ``topology=False``: only ``physicalHost``."""
    zone_url = f"{API}/projects/{project}/zones/{zone}"
    inst: dict[str, Any] = {
        "kind": "compute#instance",
        "id": iid,
        "creationTimestamp": datetime.now(UTC).isoformat(timespec="milliseconds"),
        "name": name,
        "machineType": f"{zone_url}/machineTypes/{machine_type}",
        "status": status,
        "zone": zone_url,
        "labels": dict(labels or {}),
        "selfLink": f"{zone_url}/instances/{name}",
        "scheduling": {"onHostMaintenance": "TERMINATE", "automaticRestart": True},
    }
    if hostname:
        inst["hostname"] = hostname
    if where is not None:
        status_block: dict[str, Any] = {"physicalHost": f"/{where.block}/{where.subblock}/{where.host}"}
        if topology:
            status_block["physicalHostTopology"] = {
                "cluster": where.cluster,
                "block": where.block,
                "subblock": where.subblock,
                "host": where.host,
            }
        inst["resourceStatus"] = status_block
    return inst


@dataclass
class GeneratedCluster:
    """The generated VMs plus what a test needs to predict the graph."""

    project: str
    project_number: str
    zones: list[str]
    label: tuple[str, str]
    instances: list[dict[str, Any]] = field(default_factory=list)
    #: VM name -> its placement (None: no resourceStatus); cluster VMs only
    placements: dict[str, Placement | None] = field(default_factory=dict)

    def members(self) -> list[dict[str, Any]]:
        key, value = self.label
        return [i for i in self.instances if i.get("labels", {}).get(key) == value]


def generate_cluster(
    n: int,
    *,
    project: str = "demo-project",
    project_number: str = "123456789012",
    zones: tuple[str, ...] = ("us-central1-a",),
    label: tuple[str, str] = DEFAULT_LABEL,
    hosts_per_subblock: int = 16,
    subblocks_per_block: int = 8,
    blocks_per_cluster: int = 4,
    without_topology: int = 0,
    physical_host_only: int = 0,
    extra: int = 0,
    name_prefix: str = "gpu-",
    machine_type: str = DEFAULT_MACHINE_TYPE,
    seed: str | None = None,
    start: int = 0,
) -> GeneratedCluster:
    """``n`` cluster VMs (names ``<name_prefix><i>``, zero-padded) spread round-robin over ``zones``.

    ``start`` numbers the VMs from there (for growing a cluster by a second call).
    """
    if n < 0 or extra < 0 or min(hosts_per_subblock, subblocks_per_block, blocks_per_cluster) < 1:
        raise ValueError("n and extra must be >= 0 and the fan-outs >= 1")
    if without_topology + physical_host_only > n:
        raise ValueError("without_topology + physical_host_only cannot exceed n")
    seed = seed or label[1]
    width = max(3, len(str(max(start + n - 1, 0))))
    out = GeneratedCluster(project, project_number, list(zones), label)
    for k in range(n):
        i = start + k
        name = f"{name_prefix}{i:0{width}d}"
        zone = zones[i % len(zones)]
        bare = k >= n - without_topology
        host_only = not bare and k >= n - without_topology - physical_host_only
        where = (
            None
            if bare
            else placement(
                i,
                seed=seed,
                hosts_per_subblock=hosts_per_subblock,
                subblocks_per_block=subblocks_per_block,
                blocks_per_cluster=blocks_per_cluster,
            )
        )
        out.placements[name] = where
        out.instances.append(
            instance_json(
                project,
                zone,
                name,
                iid=instance_id(seed, name),
                where=where,
                topology=not host_only,
                machine_type=machine_type,
                labels={label[0]: label[1]},
            )
        )
    for j in range(extra):
        name = f"other-{j:03d}"
        out.instances.append(
            instance_json(
                project,
                zones[j % len(zones)],
                name,
                iid=instance_id(seed, name),
                where=None,
                machine_type="e2-standard-4",
                labels={label[0]: "someone-else"},
            )
        )
    return out
