"""The EC2 calls the ``aws`` provider makes, as a Protocol: exactly these, nothing else.

:class:`Ec2Api` is what :class:`~topocast.providers.aws.ec2_calls.Ec2Calls` takes. mypy checks that
boto3's EC2 client has every member with a compatible signature (``types-boto3[ec2]``, the dev extra:
``EC2Client`` is assigned to ``Ec2Api`` in :func:`topocast.providers.aws.sdk.ec2_client`), and the EC2
simulator (``topocast_sim/ec2.py``) is that same client over moto, so it is checked too. A call the
provider starts making must be added here first, or mypy fails (Topograph's ``EC2Client`` interface,
``pkg/providers/aws``, is the model).

Paginated operations go through ``get_paginator`` (one overload per operation: the stubs type each
paginator by its literal name); ``DescribeCapacityReservationTopology`` has no paginator in botocore's
model, so it is a plain call following ``NextToken``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Literal, Protocol, overload

__all__ = ["Ec2Api", "Ec2Meta", "Pages"]


class Pages(Protocol):
    """A botocore paginator: ``paginate(**request)`` yields the response pages."""

    def paginate(self, *args: Any, **kwargs: Any) -> Iterable[Mapping[str, Any]]: ...


class Ec2Meta(Protocol):
    """``client.meta``: where the client sends its calls (named in errors)."""

    @property
    def region_name(self) -> str: ...

    @property
    def endpoint_url(self) -> str: ...


class Ec2Api(Protocol):
    """The EC2 client of one discovery run (``sdk_client("ec2")``)."""

    @property
    def meta(self) -> Ec2Meta: ...

    # in the stubs' (alphabetical) order: mypy matches overloads in order
    @overload
    def get_paginator(self, operation_name: Literal["describe_capacity_block_status"]) -> Pages: ...
    @overload
    def get_paginator(self, operation_name: Literal["describe_instance_topology"]) -> Pages: ...
    @overload
    def get_paginator(self, operation_name: Literal["describe_instances"]) -> Pages: ...

    def describe_capacity_reservation_topology(self, *args: Any, **kwargs: Any) -> Mapping[str, Any]: ...
