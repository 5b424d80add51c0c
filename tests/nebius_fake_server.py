"""An in-process gRPC fake of Nebius ``nebius.compute.v1.InstanceService/List``, speaking the SDK's own messages.

The request and response types are the Nebius SDK's (``nebius.api.nebius.compute.v1.ListInstancesRequest``
/ ``ListInstancesResponse`` / ``Instance``, generated from ``nebius/compute/v1/instance_service.proto``),
so the wire bytes are what the real service exchanges; the fake pages by ``page_token`` (an offset),
checks that a bearer token was sent (``authorization`` metadata), and ``fail`` answers a gRPC status
instead (``UNAUTHENTICATED``, ``PERMISSION_DENIED``...).
"""

from __future__ import annotations

from concurrent import futures
from dataclasses import dataclass, field
from typing import Any

import grpc

__all__ = ["FakeNebius"]


@dataclass
class FakeNebius:
    """``with FakeNebius(instances) as fake: fake.address`` is a plaintext gRPC endpoint (``host:port``)."""

    instances: list[Any] = field(default_factory=list)  # nebius.api.nebius.compute.v1.Instance
    fail: tuple[grpc.StatusCode, str] | None = None
    repeat_token: str | None = None
    #: a hostile service: a fresh token with the first page's items again, forever
    same_items_forever: bool = False
    requests: list[Any] = field(default_factory=list)
    address: str = ""

    def list(self, request: Any, context: grpc.ServicerContext) -> Any:
        from nebius.api.nebius.compute.v1 import ListInstancesResponse

        self.requests.append(request)
        if not dict(context.invocation_metadata()).get("authorization", "").startswith("Bearer "):
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "no IAM token")
        if self.fail is not None:
            context.abort(*self.fail)
        chosen = [i for i in self.instances if i.metadata.parent_id == request.parent_id]
        start = int(request.page_token or 0)
        size = request.page_size or 100
        if self.same_items_forever:
            return ListInstancesResponse(items=chosen[:size], next_page_token=str(start + 1))
        token = str(start + size) if start + size < len(chosen) else ""
        if token and self.repeat_token:
            token = self.repeat_token
        return ListInstancesResponse(items=chosen[start : start + size], next_page_token=token)

    def __enter__(self) -> FakeNebius:
        from nebius.api.nebius.compute.v1 import ListInstancesRequest

        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        handler = grpc.method_handlers_generic_handler(
            "nebius.compute.v1.InstanceService",
            {
                "List": grpc.unary_unary_rpc_method_handler(
                    self.list,
                    request_deserializer=ListInstancesRequest.FromString,
                    response_serializer=lambda m: m.SerializeToString(),
                )
            },
        )
        self._server.add_generic_rpc_handlers((handler,))
        port = self._server.add_insecure_port("127.0.0.1:0")
        self._server.start()
        self.address = f"127.0.0.1:{port}"
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.stop(0)
