"""EC2 calls for discovery: pagination, call counting, batching and error translation.

:class:`Ec2Calls` wraps one EC2 client (:class:`~topocast.providers.aws.api.Ec2Api`) for one discovery run. Every
request is counted per operation (``calls``; a page is a request, botocore's
retries are summed separately in ``retries``). Failures that survive botocore's
adaptive retries become :class:`~topocast.errors.ProviderError` messages that
name the operation and region and say what to do (IAM action to grant,
endpoint to check...). ``InvalidInstanceID.NotFound`` is not an error here: the
IDs it names are returned as "missing" and the batch is retried without them
(AWS names every unknown ID; moto names one per answer, which costs an extra
call per unknown ID).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Literal

from topocast.errors import ProviderError, TopocastError
from topocast.providers.aws.api import Ec2Api
from topocast.safeio.paging import PageGuard

DESCRIBE_PAGE = 1000  # DescribeInstances MaxResults limit
TOPOLOGY_BATCH = 100  # DescribeInstanceTopology InstanceIds limit (and MaxResults limit)
LIVE_STATES = ("pending", "running")
IAM_ACTIONS = {
    "DescribeInstances": "ec2:DescribeInstances",
    "DescribeInstanceTopology": "ec2:DescribeInstanceTopology",
    "DescribeCapacityReservationTopology": "ec2:DescribeCapacityReservationTopology",
    "DescribeCapacityBlockStatus": "ec2:DescribeCapacityBlockStatus",
}
RESERVATION_BATCH = 10  # DescribeCapacityReservationTopology CapacityReservationIds limit
#: the paginated operations discovery makes, and their botocore paginator names (:class:`Ec2Api`)
PagedOp = Literal["DescribeInstances", "DescribeInstanceTopology", "DescribeCapacityBlockStatus"]
PAGINATORS: dict[
    PagedOp, Literal["describe_instances", "describe_instance_topology", "describe_capacity_block_status"]
] = {
    "DescribeInstances": "describe_instances",
    "DescribeInstanceTopology": "describe_instance_topology",
    "DescribeCapacityBlockStatus": "describe_capacity_block_status",
}
_INSTANCE_ID = re.compile(r"\bi-[0-9a-f]{8,17}\b")


class Ec2Calls:
    """One discovery run: wraps the client, counts calls and maps errors."""

    def __init__(self, ec2: Ec2Api, cluster: str, region: str | None = None) -> None:
        self.ec2 = ec2
        self.region = ec2.meta.region_name or "?"
        if region and region != self.region:
            raise ProviderError(
                f"AWS discovery for cluster {cluster!r}: config region {region!r} but the EC2 "
                f"client is for {self.region!r}; build the client with ec2_client({region!r})"
            )
        self.calls: dict[str, int] = {}
        self.retries = 0

    def pages(self, op: PagedOp, **kwargs: Any) -> Iterator[Mapping[str, Any]]:
        """Yield pages of a paginated operation, counting each call."""
        pages = iter(self.ec2.get_paginator(PAGINATORS[op]).paginate(**kwargs))
        while True:
            self.calls[op] = self.calls.get(op, 0) + 1
            try:
                page = next(pages)
            except StopIteration:
                self.calls[op] -= 1
                return
            except TopocastError:
                raise
            except Exception as exc:
                raise self.error(op, exc) from exc
            self.retries += page.get("ResponseMetadata", {}).get("RetryAttempts", 0)
            yield page

    def error(self, op: str, exc: Exception) -> Exception:
        """Translate a botocore failure into a ProviderError an operator can act on."""
        from botocore.exceptions import (
            ClientError,
            ConnectionError,
            NoCredentialsError,
            NoRegionError,
            ParamValidationError,
            PartialCredentialsError,
        )

        where = f"EC2 {op} in region {self.region}"
        endpoint = self.ec2.meta.endpoint_url or "?"
        if isinstance(exc, ClientError):
            err = exc.response.get("Error", {})
            code, message = err.get("Code", "?"), (err.get("Message") or "")[:300]
            attempts = exc.response.get("ResponseMetadata", {}).get("RetryAttempts", 0) + 1
            if code in ("RequestLimitExceeded", "Throttling", "ThrottlingException"):
                hint = (
                    f"throttled ({code}) on all {attempts} attempts; nothing was updated. Space out reconciles, "
                    "check other tools calling EC2 in this account/region, or raise TOPOCAST_AWS_MAX_ATTEMPTS"
                )
            elif code == "UnauthorizedOperation":
                hint = (
                    f"denied (UnauthorizedOperation): grant IAM action {IAM_ACTIONS.get(op, 'ec2:' + op)} "
                    'on Resource "*" to the role topocast runs as'
                )
            elif code == "UnsupportedOperation":
                hint = (
                    "is not supported here (UnsupportedOperation): instance topology is not available in this "
                    "region/partition; run discovery only in supported regions"
                )
            elif code in ("AuthFailure", "InvalidClientTokenId", "ExpiredToken", "RequestExpired"):
                hint = f"rejected the credentials ({code}): check the role/session and the clock"
            else:
                hint = f"failed with {code}"
            return ProviderError(f"{where} {hint}." + (f" AWS said: {message}" if message else ""))
        if isinstance(exc, ConnectionError):
            return ProviderError(
                f"{where}: cannot reach endpoint {endpoint} ({type(exc).__name__}). Check network access "
                "(VPC endpoint or NAT for a Lambda in a VPC) and AWS_ENDPOINT_URL / AWS_ENDPOINT_URL_EC2"
            )
        if isinstance(exc, NoCredentialsError | PartialCredentialsError):
            return ProviderError(f"{where}: no usable AWS credentials ({exc}); attach a role or set a profile")
        if isinstance(exc, NoRegionError):
            return ProviderError(f"EC2 {op}: no region configured; set AWS_REGION or the config's region")
        if isinstance(exc, ParamValidationError):
            return ProviderError(f"{where}: invalid request parameters ({exc})")
        return ProviderError(f"{where} failed: {type(exc).__name__}: {exc}")

    def describe(self, filters: list[dict[str, Any]], ids: Sequence[str] = ()) -> tuple[dict[str, dict], set[str]]:
        """DescribeInstances: the cluster's live instances, or the given ones (any state).

        ``filters`` select the cluster. Returns instances by ID and the IDs AWS does not know.
        """
        found: dict[str, dict[str, Any]] = {}
        missing: set[str] = set()
        if not ids:
            flt = [*filters, {"Name": "instance-state-name", "Values": list(LIVE_STATES)}]
            batches: list[list[str]] = [[]]
        else:
            flt = list(filters)
            batches = [list(ids[i : i + TOPOLOGY_BATCH]) for i in range(0, len(ids), TOPOLOGY_BATCH)]
        for batch in batches:
            while True:
                kwargs: dict[str, Any] = {"Filters": flt} if flt else {}
                if batch:
                    kwargs["InstanceIds"] = batch
                else:
                    kwargs["PaginationConfig"] = {"PageSize": DESCRIBE_PAGE}
                gone = self._collect(
                    "DescribeInstances", kwargs, lambda p: (i for r in p["Reservations"] for i in r["Instances"]), found
                )
                if not gone:
                    break
                missing |= gone
                batch = [i for i in batch if i not in gone]
                if not batch:
                    break
        return found, missing

    def topology(
        self, ids: Sequence[str], strategy: str = "ids", listing_filters: Sequence[dict[str, Any]] = ()
    ) -> tuple[dict[str, dict], set[str]]:
        """DescribeInstanceTopology for ``ids``; returns entries by ID and IDs AWS no longer knows.

        ``strategy="listing"`` pages through every instance (``listing_filters``
        narrow it server-side) and keeps ``ids``; "ids" asks for them in batches of 100.
        """
        found: dict[str, dict[str, Any]] = {}
        missing: set[str] = set()
        if not ids:
            return found, missing
        if strategy == "listing":
            flt = list(listing_filters)
            kwargs: dict[str, Any] = {"PaginationConfig": {"PageSize": TOPOLOGY_BATCH}}
            if flt:
                kwargs["Filters"] = flt
            listed: dict[str, dict[str, Any]] = {}
            self._collect("DescribeInstanceTopology", kwargs, lambda p: p.get("Instances", []), listed)
            wanted = set(ids)
            return {k: v for k, v in listed.items() if k in wanted}, missing
        for start in range(0, len(ids), TOPOLOGY_BATCH):
            batch = list(ids[start : start + TOPOLOGY_BATCH])
            while batch:
                gone = self._collect(
                    "DescribeInstanceTopology", {"InstanceIds": batch}, lambda p: p.get("Instances", []), found
                )
                if not gone:
                    break
                missing |= gone
                batch = [i for i in batch if i not in gone]
        return found, missing

    def capacity_topology(self, ids: Sequence[str]) -> tuple[dict[str, dict], set[str]]:
        """DescribeCapacityReservationTopology for ``ids`` (batches of 10, following NextToken).

        Returns entries by reservation ID and the IDs AWS does not know (asked one by one once a
        batch names an unknown ID). botocore has no paginator for this operation.
        """
        from botocore.exceptions import ClientError

        op = "DescribeCapacityReservationTopology"
        found: dict[str, dict[str, Any]] = {}
        missing: set[str] = set()

        def ask(batch: list[str]) -> None:
            kwargs: dict[str, Any] = {"CapacityReservationIds": batch}
            while True:
                self.calls[op] = self.calls.get(op, 0) + 1
                try:
                    page = self.ec2.describe_capacity_reservation_topology(**kwargs)
                except Exception as exc:
                    raise self.error(op, exc) from exc
                self.retries += page.get("ResponseMetadata", {}).get("RetryAttempts", 0)
                for item in page.get("CapacityReservations", []):
                    found[item["CapacityReservationId"]] = item
                if not page.get("NextToken"):
                    return
                kwargs["NextToken"] = page["NextToken"]

        for start in range(0, len(ids), RESERVATION_BATCH):
            batch = list(ids[start : start + RESERVATION_BATCH])
            try:
                ask(batch)
            except ProviderError as exc:
                cause = exc.__cause__
                code = cause.response.get("Error", {}).get("Code") if isinstance(cause, ClientError) else None
                if code != "InvalidCapacityReservationId.NotFound":
                    raise
                for one in batch:  # find the unknown ones; keep the others
                    try:
                        ask([one])
                    except ProviderError as again:
                        inner = again.__cause__
                        if isinstance(inner, ClientError) and inner.response.get("Error", {}).get("Code") == code:
                            missing.add(one)
                        else:
                            raise
        return found, missing

    def capacity_block_status(self) -> list[dict[str, Any]]:
        """DescribeCapacityBlockStatus: every capacity block of the account in the region (paged, 1,000 a page)."""
        op: PagedOp = "DescribeCapacityBlockStatus"
        return [item for page in self.pages(op, MaxResults=1000) for item in page.get("CapacityBlockStatuses", [])]

    def _collect(self, op: PagedOp, kwargs: dict[str, Any], items: Any, into: dict[str, dict]) -> set[str]:
        """Run one (paginated) request; return IDs named by InvalidInstanceID.NotFound, else empty."""
        from botocore.exceptions import ClientError

        # EC2 may answer a filtered page with no items and a NextToken: an empty page counts, it does not end
        guard = PageGuard(f"EC2 {op}", (kwargs.get("PaginationConfig") or {}).get("PageSize"), empty_ends=False)
        try:
            for page in self.pages(op, **kwargs):
                listed = list(items(page))
                for item in listed:
                    into[item["InstanceId"]] = item
                if not guard.more((i.get("InstanceId") for i in listed), page.get("NextToken")):
                    break
        except ProviderError as exc:
            cause = exc.__cause__
            if isinstance(cause, ClientError) and cause.response.get("Error", {}).get("Code") == (
                "InvalidInstanceID.NotFound"
            ):
                gone = set(_INSTANCE_ID.findall(cause.response["Error"].get("Message", ""))) & set(
                    kwargs.get("InstanceIds", [])
                )
                if gone:
                    return gone
            raise
        return set()
