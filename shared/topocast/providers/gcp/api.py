"""The Compute Engine ``instances`` API as the GCP provider calls it: the VM fields it reads, paging,
retries (:mod:`topocast.providers.gcp.sdk`) and the errors it raises.

What to list or get, and what a VM becomes in the graph, is :mod:`topocast.providers.gcp.provider`'s business.
:class:`ComputeApi` and :class:`SubBlocksApi` are exactly the client calls made here; mypy checks
google-cloud-compute's typed ``InstancesClient`` / ``ReservationSubBlocksClient`` against them
(:func:`topocast.providers.gcp.sdk.compute_client` returns one as the other). The Compute simulator
(``topocast_sim/gce*.py``) is wire-level: the real client talks to it, so the same check covers it.
google-cloud-compute is imported inside the calls (see :mod:`topocast.providers.gcp.sdk`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from topocast.errors import ProviderError
from topocast.providers.gcp.retry import RetryPolicy, transient_retry
from topocast.safeio.paging import PageGuard

if TYPE_CHECKING:  # google-cloud-compute's own types (typed, py.typed); imported for mypy only
    from google.cloud import compute_v1

__all__ = ["IAM_PERMISSIONS", "ComputeApi", "ComputeCalls", "InstanceRef", "Paged", "SubBlocksApi", "Vm", "vm_of"]


class Paged(Protocol):
    """A google-cloud pager: its ``pages`` (each page one request)."""

    @property
    def pages(self) -> Iterator[Any]: ...


class ComputeApi(Protocol):
    """The ``instances`` calls of the ``gcp`` provider (``sdk_client("compute")``: ``compute_v1.InstancesClient``)."""

    def list(self, *, request: compute_v1.ListInstancesRequest, retry: Any) -> Paged: ...

    def aggregated_list(self, *, request: compute_v1.AggregatedListInstancesRequest, retry: Any) -> Paged: ...

    def get(self, *, project: str, zone: str, instance: str, retry: Any) -> compute_v1.Instance: ...


class SubBlocksApi(Protocol):
    """``reservationSubBlocks.get`` (``sdk_client("compute-sub-blocks")``: a ``ReservationSubBlocksClient``)."""

    def get(
        self, *, project: str, zone: str, parent_name: str, reservation_sub_block: str, retry: Any
    ) -> compute_v1.ReservationSubBlocksGetResponse: ...


#: the permission each kind of call needs (named in a 403's error)
IAM_PERMISSIONS = {"list": "compute.instances.list", "get": "compute.instances.get",
                   "sub-block": "compute.reservations.get"}  # fmt: skip


@dataclass(frozen=True)
class InstanceRef:
    """A VM named by an event: zone + name, and its numeric ID when the event carried it."""

    zone: str
    name: str
    instance_id: str | None = None


@dataclass(frozen=True)
class Vm:
    """The fields topocast reads from a Compute ``Instance``."""

    id: str
    name: str
    zone: str
    machine_type: str
    status: str
    labels: dict[str, str]
    hostname: str
    topology: dict[str, str] | None  # physicalHostTopology (non-empty fields only)
    physical_host: str
    #: ``scheduling.automaticRestart`` (Compute's default: true): Compute restarts it after a host event
    automatic_restart: bool = True
    #: ``resourceStatus.reservationConsumptionInfo.consumedReservationSubBlock``: the full resource name of
    #: the reservation sub-block the VM runs in ("" when none)
    sub_block: str = ""


def _last(url: str) -> str:
    return url.rsplit("/", 1)[-1]


def vm_of(inst: Any) -> Vm:
    topo: dict[str, str] | None = None
    physical_host = ""
    sub_block = ""
    if "resource_status" in inst:
        rs = inst.resource_status
        physical_host = rs.physical_host or ""
        if "reservation_consumption_info" in rs:
            sub_block = rs.reservation_consumption_info.consumed_reservation_sub_block or ""
        if "physical_host_topology" in rs:
            pht = rs.physical_host_topology
            topo = {k: v for k in ("cluster", "block", "subblock", "host") if (v := getattr(pht, k, "") or "")}
    sched = inst.scheduling if "scheduling" in inst else None
    restarts = bool(sched.automatic_restart) if sched is not None and "automatic_restart" in sched else True
    return Vm(
        id=str(inst.id),
        name=inst.name,
        zone=_last(inst.zone),
        machine_type=_last(inst.machine_type),
        status=inst.status,
        labels=dict(inst.labels),
        hostname=inst.hostname or "",
        topology=topo,
        physical_host=physical_host,
        automatic_restart=restarts,
        sub_block=sub_block,
    )


class ComputeCalls:
    """The Compute ``InstancesClient`` calls of one discovery: counted (``calls``, ``retries``), retried
    (429/5xx), every page followed, and failures as one :class:`ProviderError` naming what to do."""

    def __init__(self, client: ComputeApi, project: str, retry: RetryPolicy | None = None) -> None:
        self.client = client
        self.project = project
        self.calls: dict[str, int] = {}
        self.retries = 0
        self._lock = threading.Lock()
        self.retry = transient_retry(retry, on_error=self._on_error)

    def _on_error(self, exc: Exception) -> None:
        with self._lock:
            self.retries += 1

    def _count(self, op: str) -> None:
        with self._lock:
            self.calls[op] = self.calls.get(op, 0) + 1

    def error(self, op: str, where: str, exc: Exception) -> ProviderError:
        from google.api_core import exceptions as gexc

        kind = "sub-block" if "reservation" in op else "get" if op.endswith(".get") else "list"
        perm = IAM_PERMISSIONS[kind]
        if isinstance(exc, gexc.Forbidden | gexc.Unauthorized):
            return ProviderError(
                f"{op} on {where} was denied ({exc.message if hasattr(exc, 'message') else exc}); the caller needs "
                f"{perm} (e.g. roles/compute.viewer on project {self.project})"
            )
        if isinstance(exc, gexc.RetryError):
            cause = exc.cause if exc.cause is not None else exc
            return ProviderError(f"{op} on {where} kept failing after retries: {cause}; try again later")
        if isinstance(exc, gexc.NotFound):
            return ProviderError(f"{op} on {where}: not found ({exc}); check the project ID and zones")
        return ProviderError(f"{op} on {where} failed: {exc}")

    def _pages(self, op: str, where: str, start: Callable[[], Any]) -> Iterator[Any]:
        from google.api_core import exceptions as gexc

        try:
            self._count(op)
            pager = start()
            first = True
            for page in pager.pages:
                if not first:
                    self._count(op)
                first = False
                yield page
        except (gexc.GoogleAPICallError, gexc.RetryError) as exc:
            raise self.error(op, where, exc) from None

    def list_all(self, zones: Sequence[str], page_size: int, flt: str) -> list[Vm]:
        """Every VM ``flt`` selects: ``instances.list`` in each of ``zones``, else one aggregatedList."""
        from google.cloud import compute_v1

        project = self.project
        vms: list[Vm] = []
        if zones:
            for zone in zones:
                req = compute_v1.ListInstancesRequest(project=project, zone=zone, max_results=page_size, filter=flt)

                def start(req: Any = req) -> Any:
                    return self.client.list(request=req, retry=self.retry)

                guard = PageGuard(f"compute.instances.list on project {project} zone {zone}", page_size)
                for page in self._pages("compute.instances.list", f"project {project} zone {zone}", start):
                    vms.extend(vm_of(i) for i in page.items)
                    if not guard.more((i.id or i.name for i in page.items), page.next_page_token):
                        break
            return vms
        # aggregatedList pages through scopes: a page of zones without VMs is empty and not the end
        guard = PageGuard(f"compute.instances.aggregatedList on project {project}", page_size, empty_ends=False)
        req = compute_v1.AggregatedListInstancesRequest(project=project, max_results=page_size, filter=flt)
        for page in self._pages(
            "compute.instances.aggregatedList",
            f"project {project}",
            lambda: self.client.aggregated_list(request=req, retry=self.retry),
        ):
            for scope, scoped in page.items.items():
                if "warning" in scoped and scoped.warning.code not in ("NO_RESULTS_ON_PAGE", ""):
                    raise ProviderError(
                        f"compute.instances.aggregatedList on project {project}: {scope} answered "
                        f"{scoped.warning.code} ({scoped.warning.message}); refusing a partial listing"
                    )
                vms.extend(vm_of(i) for i in scoped.instances)
            ids = [i.id or i.name for scoped in page.items.values() for i in scoped.instances]
            if not guard.more(ids, page.next_page_token):
                break
        return vms

    def sub_block(self, client: SubBlocksApi, zone: str, reservation: str, block: str, sub_block: str) -> Any:
        """``reservationSubBlocks.get`` (a ``ReservationSubBlocksClient``): the sub-block, None when gone (404)."""
        from google.api_core import exceptions as gexc

        op = "compute.reservationSubBlocks.get"
        self._count(op)
        parent = f"reservations/{reservation}/reservationBlocks/{block}"
        try:
            got = client.get(project=self.project, zone=zone, parent_name=parent, reservation_sub_block=sub_block,
                             retry=self.retry)  # fmt: skip
        except gexc.NotFound:
            return None
        except (gexc.GoogleAPICallError, gexc.RetryError) as exc:
            raise self.error(op, f"{self.project}/{zone}/{parent}/{sub_block}", exc) from None
        return got.resource

    def get(self, ref: InstanceRef) -> Vm | None:
        """One VM, None when it is gone (404)."""
        from google.api_core import exceptions as gexc

        self._count("compute.instances.get")
        try:
            inst = self.client.get(project=self.project, zone=ref.zone, instance=ref.name, retry=self.retry)
        except gexc.NotFound:
            return None
        except (gexc.GoogleAPICallError, gexc.RetryError) as exc:
            raise self.error("compute.instances.get", f"{self.project}/{ref.zone}/{ref.name}", exc) from None
        return vm_of(inst)
