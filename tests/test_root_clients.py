"""A function's composition root supplies the clients it builds and refuses any other in one line.

``docs/providers.md``: the AWS and GCP functions carry neither the OCI, Nebius nor Azure SDK, so a function
configured with ``TOPOCAST_PROVIDER=oci`` stops with ``this runtime supplies no 'oci' client`` (a
``ProviderError``: the discover use case answers ``retry`` and counts ``discover_failures``), never with
whatever boto3 says about a service it does not know.
"""

from __future__ import annotations

from typing import Any

import pytest

from topocast.config import settings_from_env
from topocast.errors import ProviderError

ENV = {
    "TOPOCAST_CLUSTER": "hpc",
    "TOPOCAST_BUCKET": "topocast-hpc",
    "TOPOCAST_GCP_PROJECT": "proj-1",
    "TOPOCAST_PROVIDER": "oci",
    "TOPOCAST_PROVIDER_OPTIONS": '{"compartment": "ocid1.compartment.oc1..aaaa"}',
}


def aws_runtime() -> Any:
    from topocast.aws.root import AwsRuntime

    return AwsRuntime(settings_from_env(ENV), region="us-east-1")


def gcp_runtime() -> Any:
    from topocast.gcp.root import GcpRuntime

    return GcpRuntime(settings_from_env(ENV), storage=object(), tasks=object())


@pytest.mark.parametrize("runtime", [aws_runtime, gcp_runtime], ids=["aws", "gcp"])
@pytest.mark.parametrize("service", ["oci", "azure-compute", "nebius", "secretsmanager"])
def test_a_root_refuses_a_client_it_does_not_build_in_one_line(runtime: Any, service: str) -> None:
    root = runtime()
    clients = root.client if hasattr(root, "client") else root._client
    with pytest.raises(ProviderError) as refused:
        clients(service)
    assert str(refused.value) == f"this runtime supplies no {service!r} client"


@pytest.mark.parametrize("runtime", [aws_runtime, gcp_runtime], ids=["aws", "gcp"])
def test_a_function_configured_for_oci_stops_with_the_documented_line(runtime: Any) -> None:
    with pytest.raises(ProviderError) as refused:
        runtime().provider().discover_full(None)
    assert str(refused.value) == "this runtime supplies no 'oci' client"


@pytest.mark.parametrize("runtime", [aws_runtime, gcp_runtime], ids=["aws", "gcp"])
def test_the_discover_use_case_retries_and_counts_it_with_nothing_written(runtime: Any) -> None:
    from memory_stores import MemoryArtifactStore, MemoryGraphStore, MemoryPublishState

    from topocast.app import discover
    from topocast.app.metrics import MetricCounts
    from topocast.model.changes import Reconcile
    from topocast.ports.protocols import DiscoverPorts

    graphs, metrics = MemoryGraphStore(), MetricCounts()
    ports = DiscoverPorts(
        cluster="hpc", graphs=graphs, provider=runtime().provider, debouncer=None,  # type: ignore[arg-type]
        publish_state=MemoryPublishState(), artifacts=MemoryArtifactStore(), handoff=None,  # type: ignore[arg-type]
        metrics=metrics, full_scan_threshold=100, rechecks=None, follow_rechecks=0, follow_interval=45.0,
        set_aside_limit=0.10,
    )  # fmt: skip
    outcome = discover(ports, [Reconcile("schedule")])  # type: ignore[list-item]
    assert (outcome.status, outcome.reason) == ("retry", "discovery failed: this runtime supplies no 'oci' client")
    assert metrics.get("discover_failures") == 1 and graphs.latest() is None
