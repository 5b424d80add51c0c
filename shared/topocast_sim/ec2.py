"""A faithful EC2 ``DescribeInstanceTopology`` for moto, a fault injector and a cluster generator.

moto 5.x has no ``DescribeInstanceTopology``. :func:`install` adds it to moto's
``EC2Response`` (moto serializes the returned dict to EC2 XML from the botocore
model, so boto3 parses it exactly like the real answer). The patch is a class
attribute, so it works with ``mock_aws()`` in-process *and* with a
``ThreadedMotoServer`` running in the same process. The topology is computed
from the instances moto holds, so ``DescribeInstances`` and the topology call
always agree.

What the simulated call implements (as documented in the EC2 API reference):

* ``InstanceIds`` (at most 100, else ``InvalidParameterValue`` "instance-ids
  cannot contain over 100 values", the message AWS users reported),
  ``MaxResults`` (1..100, default 20), ``NextToken``, ``GroupNames``, ``DryRun``
  (-> ``DryRunOperation``) and ``Filters`` ``instance-type`` (``*`` matches any
  run, ``?`` zero or one character, as documented), ``availability-zone`` and
  ``zone-id``; other filter names -> ``InvalidParameterValue``. Values of one
  filter are OR-ed, filters AND-ed.
* Only ``running`` instances of a type in :data:`SUPPORTED_FAMILIES` are
  returned, sorted by instance ID. Listings page at ``MaxResults``.
* ``NetworkNodes`` come from the instance tag :data:`NETWORK_NODES_TAG`
  (comma-separated, **root first**, as AWS returns them). An instance of a
  supported type without the tag gets a fixed default path (3 or 4 nodes,
  4 for :data:`FOUR_LEVEL_FAMILIES`) so that untagged instances still look real.
* ``CapacityBlockId`` comes from :data:`CAPACITY_BLOCK_TAG`; with
  :data:`CAPACITY_BLOCK_LAG_TAG` = K it is omitted (null) in the first K
  responses that contain the instance, which is how AWS behaves right after an
  UltraServer instance launches.
* ``GroupName`` (placement group), ``AvailabilityZone`` and ``ZoneId`` (from
  moto's zone table).

Assumed where the reference is silent (our best reading, not observations):
``MaxResults`` together with ``InstanceIds`` -> ``InvalidParameterCombination``
(the reference only says "you can't"); a request with ``InstanceIds`` is
answered in one response without ``NextToken`` (clients should follow a token
anyway, topocast does); unknown or non-running IDs are silently left out; the
``NextToken`` format (opaque here too; garbage -> ``InvalidParameterValue``).

``DescribeCapacityReservationTopology`` (topology *before launch*) answers from
reservations registered with :func:`add_capacity_reservation` (moto has no Capacity
Reservations): ``CapacityReservationIds`` (at most 10, else ``InvalidParameterValue``;
unknown IDs -> ``InvalidCapacityReservationId.NotFound``), ``MaxResults`` (1..10, default
10; not with IDs -> ``InvalidParameterCombination``), ``NextToken``, ``DryRun`` and
``Filters`` ``availability-zone`` / ``instance-type`` (wildcards as above). Without IDs it
lists every registered reservation, sorted by ID, paged. ``NetworkNodes`` are null unless
the state is ``active`` or ``pending`` and the type reports topology (as documented);
``CapacityBlockId`` as registered. The error codes for unknown IDs and for IDs with
``MaxResults`` are our reading (the reference names neither).

``DescribeCapacityBlockStatus`` answers from blocks registered with :func:`add_capacity_block` (a fault is
:func:`set_capacity_block_status`); an instance tagged :data:`CAPACITY_RESERVATION_TAG` reports that
``CapacityReservationId`` in ``DescribeInstances``, which ties it to its block.

Not implemented: per-account hashing of node IDs, instance types added after
:data:`SUPPORTED_FAMILIES` was written, ``DescribeCapacityReservations`` (reservations live
only in this simulator), and throttling of its own (use the fault injector).

The fault injector (:func:`inject_faults`) makes a fraction of EC2 calls (any
action, or the ones named) fail before moto handles them, with HTTP 503 and
EC2's error body ``<Response><Errors><Error><Code>RequestLimitExceeded</Code>``,
which botocore classifies as throttling and retries. :func:`call_counts`
counts the calls the server saw per action (injected faults included), a
server-side check on client-side call counters.

:func:`install` also replaces moto's ``get_tags`` (a scan of every tag of every
resource, so O(n²) over a describe) with a dictionary lookup returning the same
list; without that, 10k instances take tens of minutes. It also caches moto's
per-request ``inspect.getmembers`` of the response class. For thousands of
instances also set ``MOTO_EC2_LOAD_DEFAULT_AMIS=false`` *before* the backend is
created: moto looks up the AMI of every new instance by scanning ~1,300 default
images.

:func:`generate_cluster` launches a tagged fake GPU cluster through the normal
EC2 API: ``RunInstances`` in batches of up to 1,000, one ``CreateTags`` per
leaf path and per capacity block, and one per instance for its ``Name``.
:func:`generate_mixed_cluster` puts several instance types on one fabric, 3-layer types
(p5, p6e-gb200 UltraServers with their ``CapacityBlockId``) beside 4-layer ones (p6-b200,
p6-b300) under one layer-1 node, as AWS's "at or below the third layer" describes.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import threading
import uuid
from collections.abc import Iterable
from fractions import Fraction
from typing import Any

#: Instance tag holding the simulated NetworkNodes, root first, comma-separated.
NETWORK_NODES_TAG = "topocast:sim:network-nodes"
#: Instance tag holding the simulated CapacityBlockId (UltraServer / NVLink domain).
CAPACITY_BLOCK_TAG = "topocast:sim:capacity-block"
#: Instance tag: CapacityBlockId is null in the first K topology responses containing the instance.
CAPACITY_BLOCK_LAG_TAG = "topocast:sim:capacity-block-lag"

#: Instance families that report topology (EC2 user guide, "prerequisites", 2026).
SUPPORTED_FAMILIES: frozenset[str] = frozenset(
    {
        "g6e", "g7e", "hpc6a", "hpc6id", "hpc7a", "hpc7g", "hpc8a", "p3dn", "p4d", "p4de",
        "p5", "p5e", "p5en", "p6-b200", "p6-b300", "p6e-gb200", "p6e-gb300",
        "trn1", "trn1n", "trn2", "trn2u",
    }
)  # fmt: skip
#: UltraServer families: the only ones whose topology carries a ``CapacityBlockId`` (botocore's ec2 model,
#: ``InstanceTopology.CapacityBlockId`` and ``CapacityReservationTopology.CapacityBlockId``: "only supported
#: for UltraServer instances and identifies instances within the UltraServer domain").
ULTRASERVER_FAMILIES: frozenset[str] = frozenset({"p6e-gb200", "p6e-gb300", "trn2u"})
#: what :func:`generate_cluster` launches: an UltraServer type with capacity blocks, p5 without
ULTRASERVER_TYPE = "p6e-gb200.36xlarge"
PLAIN_GPU_TYPE = "p5.48xlarge"
#: Families whose topology has four network nodes instead of three.
FOUR_LEVEL_FAMILIES: frozenset[str] = frozenset({"p6-b200", "p6-b300"})

_TOPOLOGY_FILTERS = ("instance-type", "availability-zone", "zone-id")
_TOKEN_PREFIX = "topocast-sim:"
_SEEN_ATTR = "_topocast_topology_responses"  # per moto Instance: how many responses included it


def family(instance_type: str) -> str:
    return instance_type.split(".", 1)[0]


def _wildcard(pattern: str) -> re.Pattern[str]:
    """EC2 filter wildcards: ``*`` = any run, ``?`` = zero or one character."""
    parts = (".*" if ch == "*" else ".?" if ch == "?" else re.escape(ch) for ch in pattern)
    return re.compile("".join(parts), re.DOTALL)


def _token(last_id: str) -> str:
    return base64.urlsafe_b64encode((_TOKEN_PREFIX + last_id).encode()).decode()


def _untoken(token: str) -> str | None:
    try:
        raw = base64.urlsafe_b64decode(token.encode()).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None
    return raw.removeprefix(_TOKEN_PREFIX) if raw.startswith(_TOKEN_PREFIX) else None


def _default_nodes(instance_type: str) -> list[str]:
    depth = 4 if family(instance_type) in FOUR_LEVEL_FAMILIES else 3
    return [f"nn-sim-default-{tier}" for tier in range(depth, 0, -1)]


# ----- the DescribeInstanceTopology action ---------------------------------------------------
def _describe_instance_topology(self: Any) -> Any:
    """moto ``EC2Response`` method; ``self`` is the response object of one request."""
    from moto.core.responses import ActionResult
    from moto.ec2.exceptions import DryRunClientError, InvalidParameterCombination, InvalidParameterValue

    if self._get_param("DryRun"):
        raise DryRunClientError()
    ids: list[str] = list(self._get_param("InstanceIds", []) or [])
    groups: list[str] = list(self._get_param("GroupNames", []) or [])
    max_results = self._get_param("MaxResults")
    token = self._get_param("NextToken")
    if len(ids) > 100:
        raise InvalidParameterValue("instance-ids cannot contain over 100 values")
    if len(groups) > 100:
        raise InvalidParameterValue("group-names cannot contain over 100 values")
    if ids and max_results is not None:
        raise InvalidParameterCombination("The parameter instancesSet cannot be used with the parameter maxResults")
    page_size = 20 if max_results is None else int(max_results)
    if not 1 <= page_size <= 100:
        raise InvalidParameterValue(f"Value ( {page_size} ) for parameter maxResults is invalid. Expecting 1-100.")
    matchers: dict[str, list[re.Pattern[str]]] = {}
    for flt in self._get_param("Filters", []) or []:
        name = flt.get("Name")
        if name not in _TOPOLOGY_FILTERS:
            raise InvalidParameterValue(f"The filter '{name}' is invalid")
        values = flt.get("Values") or []
        pats = [_wildcard(v) if name == "instance-type" else re.compile(re.escape(v)) for v in values]
        matchers.setdefault(name, []).extend(pats)
    after = None
    if token:
        after = _untoken(token)
        if after is None:
            raise InvalidParameterValue(f"The token '{token}' is invalid.")

    zone_ids = {z.name: z.zone_id for z in self.ec2_backend.describe_availability_zones()}
    wanted = set(ids)
    selected = []
    for inst in self.ec2_backend.all_instances():
        if inst.state != "running" or family(inst.instance_type) not in SUPPORTED_FAMILIES:
            continue
        if wanted and inst.id not in wanted:
            continue
        if groups and inst.placement.group_name not in groups:
            continue
        fields = {
            "instance-type": inst.instance_type,
            "availability-zone": inst.availability_zone or "",
            "zone-id": zone_ids.get(inst.availability_zone or "", ""),
        }
        if all(any(p.fullmatch(fields[name]) for p in pats) for name, pats in matchers.items()):
            selected.append(inst)
    selected.sort(key=lambda i: i.id)
    if after is not None:
        selected = [i for i in selected if i.id > after]
    page = selected if ids else selected[:page_size]
    more = not ids and len(selected) > len(page)

    out = []
    for inst in page:
        tags = {t["key"]: t["value"] for t in inst.get_tags()}
        raw_nodes = tags.get(NETWORK_NODES_TAG)
        nodes = [n.strip() for n in raw_nodes.split(",") if n.strip()] if raw_nodes else []
        seen = getattr(inst, _SEEN_ATTR, 0)
        setattr(inst, _SEEN_ATTR, seen + 1)
        item: dict[str, Any] = {
            "InstanceId": inst.id,
            "InstanceType": inst.instance_type,
            "NetworkNodes": nodes or _default_nodes(inst.instance_type),
            "AvailabilityZone": inst.availability_zone,
            "ZoneId": zone_ids.get(inst.availability_zone or ""),
        }
        if inst.placement.group_name:
            item["GroupName"] = inst.placement.group_name
        lag = int(tags.get(CAPACITY_BLOCK_LAG_TAG, "0") or 0)
        if tags.get(CAPACITY_BLOCK_TAG) and seen >= lag and family(inst.instance_type) in ULTRASERVER_FAMILIES:
            item["CapacityBlockId"] = tags[CAPACITY_BLOCK_TAG]
        out.append(item)
    result: dict[str, Any] = {"Instances": out}
    if more:
        result["NextToken"] = _token(page[-1].id)
    return ActionResult(result)


# ----- the DescribeCapacityReservationTopology action ---------------------------------------
_RESERVATIONS: dict[str, dict[str, Any]] = {}
_RESERVATION_FILTERS = ("availability-zone", "instance-type")


def add_capacity_reservation(
    reservation_id: str,
    *,
    instance_type: str = "p5.48xlarge",
    zone: str = "us-east-1a",
    network_nodes: Iterable[str] = (),
    capacity_block_id: str | None = None,
    state: str = "active",
    group_name: str | None = None,
) -> None:
    """Register a capacity reservation / block whose topology the simulated call returns (root first)."""
    with _INSTALL_LOCK:
        _RESERVATIONS[reservation_id] = {
            "CapacityReservationId": reservation_id,
            "InstanceType": instance_type,
            "AvailabilityZone": zone,
            "NetworkNodes": list(network_nodes),
            "CapacityBlockId": capacity_block_id,
            "State": state,
            "GroupName": group_name,
        }


def clear_capacity_reservations() -> None:
    with _INSTALL_LOCK:
        _RESERVATIONS.clear()


def _describe_capacity_reservation_topology(self: Any) -> Any:
    """moto ``EC2Response`` method (see the module docstring)."""
    from moto.core.responses import ActionResult
    from moto.ec2.exceptions import (
        DryRunClientError,
        EC2ClientError,
        InvalidParameterCombination,
        InvalidParameterValue,
    )

    if self._get_param("DryRun"):
        raise DryRunClientError()
    ids: list[str] = list(self._get_param("CapacityReservationIds", []) or [])
    max_results = self._get_param("MaxResults")
    token = self._get_param("NextToken")
    if len(ids) > 10:
        raise InvalidParameterValue("capacityReservationIds cannot contain over 10 values")
    if ids and max_results is not None:
        raise InvalidParameterCombination(
            "The parameter capacityReservationIds cannot be used with the parameter maxResults"
        )
    page_size = 10 if max_results is None else int(max_results)
    if not 1 <= page_size <= 10:
        raise InvalidParameterValue(f"Value ( {page_size} ) for parameter maxResults is invalid. Expecting 1-10.")
    matchers: dict[str, list[re.Pattern[str]]] = {}
    for flt in self._get_param("Filters", []) or []:
        name = flt.get("Name")
        if name not in _RESERVATION_FILTERS:
            raise InvalidParameterValue(f"The filter '{name}' is invalid")
        values = flt.get("Values") or []
        pats = [_wildcard(v) if name == "instance-type" else re.compile(re.escape(v)) for v in values]
        matchers.setdefault(name, []).extend(pats)
    after = _untoken(token) if token else None
    if token and after is None:
        raise InvalidParameterValue(f"The token '{token}' is invalid.")
    with _INSTALL_LOCK:
        known = {k: dict(v) for k, v in _RESERVATIONS.items()}
    unknown = [i for i in ids if i not in known]
    if unknown:
        raise EC2ClientError(
            "InvalidCapacityReservationId.NotFound", f"The capacity reservation ID '{unknown[0]}' does not exist"
        )
    zone_ids = {z.name: z.zone_id for z in self.ec2_backend.describe_availability_zones()}
    selected = []
    for cr_id in sorted(ids or known):
        cr = known[cr_id]
        fields = {"availability-zone": cr["AvailabilityZone"], "instance-type": cr["InstanceType"]}
        if all(any(p.fullmatch(fields[name]) for p in pats) for name, pats in matchers.items()):
            selected.append(cr)
    if after is not None:
        selected = [c for c in selected if c["CapacityReservationId"] > after]
    page = selected if ids else selected[:page_size]
    out = []
    for cr in page:
        reports = cr["State"] in ("active", "pending") and family(cr["InstanceType"]) in SUPPORTED_FAMILIES
        item = {
            "CapacityReservationId": cr["CapacityReservationId"],
            "State": cr["State"],
            "InstanceType": cr["InstanceType"],
            "AvailabilityZone": cr["AvailabilityZone"],
            "AvailabilityZoneId": zone_ids.get(cr["AvailabilityZone"]),
        }
        if reports and cr["NetworkNodes"]:
            item["NetworkNodes"] = cr["NetworkNodes"]
        if cr["CapacityBlockId"] and family(cr["InstanceType"]) in ULTRASERVER_FAMILIES:
            item["CapacityBlockId"] = cr["CapacityBlockId"]
        if cr["GroupName"]:
            item["GroupName"] = cr["GroupName"]
        out.append(item)
    result: dict[str, Any] = {"CapacityReservations": out}
    if not ids and len(selected) > len(page):
        result["NextToken"] = _token(page[-1]["CapacityReservationId"])
    return ActionResult(result)


# ----- the DescribeCapacityBlockStatus action -------------------------------------------------
_CAPACITY_BLOCKS: dict[str, dict[str, Any]] = {}
#: interconnectStatus values (botocore ec2 model, ``CapacityBlockInterconnectStatus``)
INTERCONNECT_STATES = ("ok", "impaired", "insufficient-data")
#: Instance tag holding the capacity reservation an instance runs in (DescribeInstances ``CapacityReservationId``).
CAPACITY_RESERVATION_TAG = "topocast:sim:capacity-reservation"


def add_capacity_block(
    block_id: str, reservations: dict[str, int], *, interconnect: str = "ok", unavailable: dict[str, int] | None = None
) -> None:
    """Register a capacity block: its reservations (ID -> instance count), its interconnect status and how
    many instances of each reservation are unavailable (failed a system status check)."""
    if interconnect not in INTERCONNECT_STATES:
        raise ValueError(f"interconnect {interconnect!r} is not one of {INTERCONNECT_STATES}")
    with _INSTALL_LOCK:
        _CAPACITY_BLOCKS[block_id] = {
            "reservations": dict(reservations),
            "interconnect": interconnect,
            "unavailable": dict(unavailable or {}),
        }


def set_capacity_block_status(block_id: str, interconnect: str, unavailable: dict[str, int] | None = None) -> None:
    """A fault (or its repair) on a registered block: the next DescribeCapacityBlockStatus reports it."""
    if interconnect not in INTERCONNECT_STATES:
        raise ValueError(f"interconnect {interconnect!r} is not one of {INTERCONNECT_STATES}")
    with _INSTALL_LOCK:
        block = _CAPACITY_BLOCKS[block_id]
        block["interconnect"] = interconnect
        if unavailable is not None:
            block["unavailable"] = dict(unavailable)


def clear_capacity_blocks() -> None:
    with _INSTALL_LOCK:
        _CAPACITY_BLOCKS.clear()


def _totals(total: int, unavailable: int) -> dict[str, int]:
    # in a running block every instance is launched, so nothing is "available" to launch into
    return {"TotalCapacity": total, "TotalAvailableCapacity": 0, "TotalUnavailableCapacity": unavailable}


def _describe_capacity_block_status(self: Any) -> Any:
    """moto ``EC2Response`` method: ``DescribeCapacityBlockStatus`` (EC2 API reference; botocore ec2 model).

    ``CapacityBlockIds`` (unknown ones -> ``InvalidCapacityBlockId.NotFound``, our reading), ``MaxResults``
    1-1000 (``InvalidParameterValue`` otherwise), ``NextToken``, ``DryRun`` and ``Filters`` with the one
    documented name ``interconnect-status`` (others -> ``InvalidParameterValue``). Sorted by block ID, paged.
    """
    from moto.core.responses import ActionResult
    from moto.ec2.exceptions import DryRunClientError, EC2ClientError, InvalidParameterValue

    if self._get_param("DryRun"):
        raise DryRunClientError()
    ids: list[str] = list(self._get_param("CapacityBlockIds", []) or [])
    max_results = self._get_param("MaxResults")
    page_size = 1000 if max_results is None else int(max_results)
    if not 1 <= page_size <= 1000:
        raise InvalidParameterValue(f"Value ( {page_size} ) for parameter maxResults is invalid. Expecting 1-1000.")
    wanted_status: set[str] | None = None
    for flt in self._get_param("Filters", []) or []:
        if flt.get("Name") != "interconnect-status":
            raise InvalidParameterValue(f"The filter '{flt.get('Name')}' is invalid")
        wanted_status = (wanted_status or set()) | set(flt.get("Values") or [])
    token = self._get_param("NextToken")
    after = _untoken(token) if token else None
    if token and after is None:
        raise InvalidParameterValue(f"The token '{token}' is invalid.")
    with _INSTALL_LOCK:
        known = {k: {**v, "reservations": dict(v["reservations"]), "unavailable": dict(v["unavailable"])}
                 for k, v in _CAPACITY_BLOCKS.items()}  # fmt: skip
    unknown = [i for i in ids if i not in known]
    if unknown:
        raise EC2ClientError("InvalidCapacityBlockId.NotFound", f"The capacity block ID '{unknown[0]}' does not exist")
    selected = [b for b in sorted(ids or known) if wanted_status is None or known[b]["interconnect"] in wanted_status]
    if after is not None:
        selected = [b for b in selected if b > after]
    page = selected[:page_size]
    out = []
    for block_id in page:
        block = known[block_id]
        per = [
            {"CapacityReservationId": cr, **_totals(n, block["unavailable"].get(cr, 0))}
            for cr, n in sorted(block["reservations"].items())
        ]
        out.append(
            {
                "CapacityBlockId": block_id,
                "InterconnectStatus": block["interconnect"],
                **_totals(sum(block["reservations"].values()), sum(block["unavailable"].values())),
                "CapacityReservationStatuses": per,
            }
        )
    result: dict[str, Any] = {"CapacityBlockStatuses": out}
    if len(selected) > len(page):
        result["NextToken"] = _token(page[-1])
    return ActionResult(result)


def _capacity_reservation_id(self: Any) -> str | None:
    """moto ``Instance.capacity_reservation_id``: DescribeInstances' ``CapacityReservationId``, from the tag."""
    return self.ec2_backend.tags.get(self.id, {}).get(CAPACITY_RESERVATION_TAG)


# ----- fault injection and call counting -------------------------------------------------------
class _Faults:
    """Shared by every request thread of the server, hence the lock."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.fraction = Fraction(0)
        self.actions: frozenset[str] | None = None
        self.code = "RequestLimitExceeded"
        self.status = 503
        self.debt = Fraction(0)
        self.counts: dict[str, int] = {}
        self.injected: dict[str, int] = {}

    def should_fail(self, action: str) -> bool:
        with self.lock:
            self.counts[action] = self.counts.get(action, 0) + 1
            if not self.fraction or (self.actions is not None and action not in self.actions):
                return False
            # Error diffusion instead of random(): exactly `fraction` of the calls fail, spread evenly
            # (1/3 -> every third call), so tests are deterministic and retries always recover.
            self.debt += self.fraction
            if self.debt >= 1:
                self.debt -= 1
                self.injected[action] = self.injected.get(action, 0) + 1
                return True
            return False


_FAULTS = _Faults()


def inject_faults(
    fraction: float,
    *,
    actions: Iterable[str] | None = None,
    code: str = "RequestLimitExceeded",
    status: int = 503,
) -> None:
    """Fail ``fraction`` (0..1) of the EC2 calls (only ``actions``, e.g. ``["DescribeInstances"]``, if given).

    Failures are spread evenly and deterministically. ``code``/``status`` choose
    the error, e.g. ``("UnauthorizedOperation", 403)`` with ``fraction=1``.
    """
    if not 0 <= fraction <= 1:
        raise ValueError(f"fault fraction must be within 0..1, got {fraction}")
    with _FAULTS.lock:
        _FAULTS.fraction = Fraction(fraction).limit_denominator(1000)
        _FAULTS.actions = frozenset(actions) if actions is not None else None
        _FAULTS.code, _FAULTS.status = code, status
        _FAULTS.debt = Fraction(0)


def clear_faults() -> None:
    inject_faults(0)


def call_counts() -> dict[str, int]:
    """EC2 calls the simulator saw per action (each HTTP attempt, so retries count)."""
    with _FAULTS.lock:
        return dict(_FAULTS.counts)


def injected_counts() -> dict[str, int]:
    with _FAULTS.lock:
        return dict(_FAULTS.injected)


def reset_counts() -> None:
    with _FAULTS.lock:
        _FAULTS.counts.clear()
        _FAULTS.injected.clear()


def _error_body(code: str, message: str) -> str:
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Response><Errors><Error><Code>{code}</Code><Message>{message}</Message></Error></Errors>"
        f"<RequestID>{uuid.uuid4()}</RequestID></Response>"
    )


def _wrap_call_action(original: Any) -> Any:
    def call_action(self: Any) -> Any:
        action = self._get_action() or ""
        if _FAULTS.should_fail(action):
            message = "Request limit exceeded." if _FAULTS.code == "RequestLimitExceeded" else "Injected fault."
            headers = dict(self.response_headers)
            headers["Content-Type"] = "text/xml;charset=UTF-8"
            headers["status"] = str(_FAULTS.status)
            return _FAULTS.status, headers, _error_body(_FAULTS.code, message)
        return original(self)

    call_action._topocast_sim = True  # type: ignore[attr-defined]
    return call_action


def _fast_get_tags(self: Any) -> list[dict[str, str]]:
    """Same result as moto's ``TaggedEC2Resource.get_tags`` without scanning every tag in the region."""
    from moto.ec2.utils import EC2_PREFIX_TO_RESOURCE, get_prefix

    rid = getattr(self, "id", None)
    if not rid:
        return []
    rtype = EC2_PREFIX_TO_RESOURCE.get(get_prefix(rid), "")
    tags = self.ec2_backend.tags.get(rid, {})
    return [{"resource_id": rid, "key": k, "value": v, "resource_type": rtype} for k, v in tags.items()]


_INSTALL_LOCK = threading.Lock()


def _cached_method_names(original: Any) -> Any:
    """moto runs ``inspect.getmembers`` on the response class for every request (~1.5 ms)."""
    cache: dict[type, list[str]] = {}

    def method_names_from_class(clazz: Any) -> list[str]:
        names = cache.get(clazz)
        if names is None:
            names = cache[clazz] = original(clazz)
        return names

    method_names_from_class._topocast_sim = True  # type: ignore[attr-defined]
    method_names_from_class.cache_clear = cache.clear  # type: ignore[attr-defined]
    return method_names_from_class


def install() -> None:
    """Patch moto (idempotent): topology action, fault injector, fast tag and method lookups."""
    import moto.core.responses as moto_responses
    from moto.ec2.models.core import TaggedEC2Resource
    from moto.ec2.responses import EC2Response

    with _INSTALL_LOCK:
        if not getattr(moto_responses.method_names_from_class, "_topocast_sim", False):
            moto_responses.method_names_from_class = _cached_method_names(moto_responses.method_names_from_class)
        # the cache must see the action added below
        moto_responses.method_names_from_class.cache_clear()  # type: ignore[attr-defined]
        EC2Response.describe_instance_topology = _describe_instance_topology  # type: ignore[attr-defined]
        EC2Response.describe_capacity_reservation_topology = _describe_capacity_reservation_topology  # type: ignore[attr-defined]
        EC2Response.describe_capacity_block_status = _describe_capacity_block_status  # type: ignore[attr-defined]
        from moto.ec2.models.instances import Instance

        Instance.capacity_reservation_id = property(_capacity_reservation_id)  # type: ignore[attr-defined]
        if not getattr(EC2Response.call_action, "_topocast_sim", False):
            EC2Response.call_action = _wrap_call_action(EC2Response.call_action)  # type: ignore[method-assign]
        TaggedEC2Resource.get_tags = _fast_get_tags  # type: ignore[method-assign]


# ----- cluster generator ----------------------------------------------------------------------
def _hex_id(prefix: str, *parts: object) -> str:
    digest = hashlib.sha256("/".join(str(p) for p in parts).encode()).hexdigest()
    return f"{prefix}-{digest[:17]}"


def network_path(
    index: int, *, seed: str, levels: int, nodes_per_leaf: int, leaves_per_spine: int, upper_fanout: int = 4
) -> list[str]:
    """Root-first NetworkNodes of node number ``index`` in a generated cluster."""
    fanouts = [nodes_per_leaf, leaves_per_spine] + [upper_fanout] * (levels - 2)
    closest_first = []
    pos = index
    for tier in range(levels):
        pos //= fanouts[tier]
        closest_first.append(_hex_id("nn", seed, tier, pos))
    return closest_first[::-1]


def generate_cluster(
    ec2: Any,
    n: int,
    *,
    levels: int = 3,
    nodes_per_leaf: int = 16,
    leaves_per_spine: int = 8,
    upper_fanout: int = 4,
    block_size: int | None = 18,
    instance_type: str | None = None,
    cluster_tag: tuple[str, str] = ("topocast:cluster", "demo"),
    name_prefix: str | None = "gpu-",
    zone: str | None = None,
    capacity_block_lag: int = 0,
    image_id: str = "ami-12c6146b",
    batch_size: int = 1000,
    extra_tags: dict[str, str] | None = None,
) -> list[str]:
    """Launch ``n`` tagged instances in moto and return their IDs in node order.

    Node ``i`` hangs under leaf ``i // nodes_per_leaf``, leaves group by
    ``leaves_per_spine`` and every higher tier by ``upper_fanout``;
    ``levels`` is 3 or 4 (NetworkNodes per instance). Consecutive groups of
    ``block_size`` nodes share a capacity block (``None``: no blocks); only UltraServer types report it, so
    ``instance_type`` defaults to :data:`ULTRASERVER_TYPE` with blocks and :data:`PLAIN_GPU_TYPE` without. Names
    are ``<name_prefix><i>`` zero-padded to a common width (``None``: no Name
    tag). Network node IDs depend on the cluster tag value, so two generated
    clusters never share switches.
    """
    if levels not in (3, 4):
        raise ValueError(f"levels must be 3 or 4 (NetworkNodes per instance on AWS), got {levels}")
    if n < 0 or nodes_per_leaf < 1 or leaves_per_spine < 1 or upper_fanout < 1 or batch_size < 1:
        raise ValueError("n must be >= 0 and fan-outs/batch_size >= 1")
    if block_size is not None and block_size < 1:
        raise ValueError(f"block_size must be >= 1 or None, got {block_size}")
    if instance_type is None:
        instance_type = ULTRASERVER_TYPE if block_size else PLAIN_GPU_TYPE
    seed = cluster_tag[1]
    width = max(3, len(str(max(n - 1, 0))))
    common = {cluster_tag[0]: cluster_tag[1], **(extra_tags or {})}
    if block_size and capacity_block_lag:
        common[CAPACITY_BLOCK_LAG_TAG] = str(capacity_block_lag)

    # Few big RunInstances calls keep moto fast (it scans reservations on every lookup); the
    # per-leaf and per-block tags then go on with one CreateTags per distinct value.
    ids: list[str] = []
    for start in range(0, n, batch_size):
        count = min(batch_size, n - start)
        kwargs: dict[str, Any] = {
            "ImageId": image_id,
            "InstanceType": instance_type,
            "MinCount": count,
            "MaxCount": count,
            "TagSpecifications": [
                {"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in common.items()]}
            ],
        }
        if zone:
            kwargs["Placement"] = {"AvailabilityZone": zone}
        resp = ec2.run_instances(**kwargs)
        ids.extend(inst["InstanceId"] for inst in resp["Instances"])

    by_tag: dict[tuple[str, str], list[str]] = {}
    for i, iid in enumerate(ids):
        path = network_path(
            i, seed=seed, levels=levels, nodes_per_leaf=nodes_per_leaf,
            leaves_per_spine=leaves_per_spine, upper_fanout=upper_fanout,
        )  # fmt: skip
        by_tag.setdefault((NETWORK_NODES_TAG, ",".join(path)), []).append(iid)
        if block_size:
            by_tag.setdefault((CAPACITY_BLOCK_TAG, _hex_id("cr", seed, "block", i // block_size)), []).append(iid)
    for (key, value), members in by_tag.items():
        for start in range(0, len(members), batch_size):
            ec2.create_tags(Resources=members[start : start + batch_size], Tags=[{"Key": key, "Value": value}])
    if name_prefix is not None:
        for i, iid in enumerate(ids):
            ec2.create_tags(Resources=[iid], Tags=[{"Key": "Name", "Value": f"{name_prefix}{i:0{width}d}"}])
    return ids


def fabric_paths(groups: Iterable[tuple[str, int]], *, seed: str, nodes_per_leaf: int = 8, leaves_per_spine: int = 2,
                 leaves_per_layer3: int = 2) -> list[list[str]]:  # fmt: skip
    """Root-first NetworkNodes for the nodes of ``groups`` (instance type, count), in order, on one fabric.

    As AWS describes it: every instance type shares the top layers of the network and connects
    at or below the third layer. Three-layer types (p5, p6e-gb200, ...) hang under a layer-3 node;
    four-layer types (p6-b200, p6-b300) under a layer-4 node below a layer-3 node. There is one
    layer-1 node (the root), spines (layer 2) take ``leaves_per_spine`` layer-3 nodes each, and a
    four-layer group's layer-3 node takes ``leaves_per_layer3`` layer-4 nodes. Each group starts
    on a leaf of its own, so no layer-3 node has both instances and layer-4 nodes below it.
    """
    root = _hex_id("nn", seed, 1, 0)
    paths: list[list[str]] = []
    layer3 = 0  # layer-3 nodes handed out so far
    for instance_type, count in groups:
        four = family(instance_type) in FOUR_LEVEL_FAMILIES
        leaves = -(-count // nodes_per_leaf)
        first_l3 = layer3
        layer3 += -(-leaves // leaves_per_layer3) if four else leaves
        for j in range(count):
            leaf = j // nodes_per_leaf
            l3 = first_l3 + (leaf // leaves_per_layer3 if four else leaf)
            path = [root, _hex_id("nn", seed, 2, l3 // leaves_per_spine), _hex_id("nn", seed, 3, l3)]
            if four:
                path.append(_hex_id("nn", seed, 4, l3, leaf % leaves_per_layer3))
            paths.append(path)
    return paths


def generate_mixed_cluster(
    ec2: Any,
    groups: Iterable[tuple[str, int, int | None]],
    *,
    seed: str = "mixed",
    nodes_per_leaf: int = 8,
    leaves_per_spine: int = 2,
    cluster_tag: tuple[str, str] = ("topocast:cluster", "demo"),
    image_id: str = "ami-12c6146b",
) -> dict[str, list[str]]:
    """Launch groups of (instance type, count, capacity block size or None) on one fabric
    (:func:`fabric_paths`); instance IDs per instance type, in node order, named ``<family>-<i>``.

    A block size gives consecutive groups of that many instances one ``CapacityBlockId`` (an
    UltraServer's NVLink domain: 18 for p6e-gb200.36xlarge).
    """
    groups = list(groups)
    paths = fabric_paths([(t, c) for t, c, _ in groups], seed=seed, nodes_per_leaf=nodes_per_leaf,
                         leaves_per_spine=leaves_per_spine)  # fmt: skip
    out: dict[str, list[str]] = {}
    start = 0
    for instance_type, count, block in groups:
        common = [{"ResourceType": "instance", "Tags": [{"Key": cluster_tag[0], "Value": cluster_tag[1]}]}]
        resp = ec2.run_instances(
            ImageId=image_id, InstanceType=instance_type, MinCount=count, MaxCount=count, TagSpecifications=common
        )
        ids = [inst["InstanceId"] for inst in resp["Instances"]]
        for j, iid in enumerate(ids):
            tags = [
                {"Key": NETWORK_NODES_TAG, "Value": ",".join(paths[start + j])},
                {"Key": "Name", "Value": f"{family(instance_type)}-{j:03d}"},
            ]
            if block:
                tags.append({"Key": CAPACITY_BLOCK_TAG, "Value": _hex_id("cr", seed, instance_type, j // block)})
            ec2.create_tags(Resources=[iid], Tags=tags)
        out.setdefault(instance_type, []).extend(ids)
        start += count
    return out
