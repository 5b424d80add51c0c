"""Helpers shared by the pipeline tests: small graphs and boto3 clients against a moto server.

The server is the ``moto_server`` fixture from aws_fixtures.py (loaded by conftest). Tests
give every bucket/table/queue a unique name, so they never see each other.
"""

from __future__ import annotations

import uuid
from typing import Any

from topocast.model.graph import TopologyGraph

REGION = "us-east-1"


def endpoint_of(server: Any) -> str:
    """The fixture may yield the URL itself or an object carrying it."""
    if isinstance(server, str):
        return server
    for attr in ("endpoint_url", "endpoint", "url"):
        if hasattr(server, attr):
            return str(getattr(server, attr))
    raise TypeError(f"cannot find the endpoint URL in {server!r}")


def client(server: Any, service: str, **config: Any) -> Any:
    import boto3
    from botocore.config import Config

    return boto3.client(
        service,
        endpoint_url=endpoint_of(server),
        region_name=REGION,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        config=Config(**config) if config else None,
    )


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def make_bucket(server: Any) -> str:
    name = unique("tc")
    client(server, "s3").create_bucket(Bucket=name)
    return name


def graph(cluster: str, n: int, *, per_leaf: int = 4, prefix: str = "gpu", offset: int = 0) -> TopologyGraph:
    """``n`` nodes ``<prefix>-NNNN`` under leaves of ``per_leaf`` nodes, one spine."""
    nodes = [
        {
            "name": f"{prefix}-{i:04d}",
            "id": f"i-{i:017x}",
            "fabric": [f"leaf-{i // per_leaf:03d}", "spine-0"],
            "accelerator": f"nvl-{i // 8:03d}",
        }
        for i in range(offset, offset + n)
    ]
    return TopologyGraph.model_validate({"cluster": cluster, "provider": "test", "nodes": nodes})
