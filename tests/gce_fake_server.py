"""The local Compute Engine REST endpoint for tests: fixtures around :mod:`topocast_sim.gce_server`.

The server and the cluster generator live in the package (``topocast_sim.gce_server``,
``topocast_sim.gce``) because ``topocast demo --cloud gcp`` serves them at run time;
this module gives tests a started server per test and a real google-cloud-compute
client pointed at it (REST transport, anonymous credentials, the real pager).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from topocast_sim.gce import GeneratedCluster, generate_cluster
from topocast_sim.gce_server import FakeCompute

__all__ = ["FakeCompute", "GeneratedCluster", "compute_for", "fake_compute", "generate_cluster"]


def compute_for(fake: FakeCompute) -> Any:
    """A real ``compute_v1.InstancesClient`` talking to ``fake``."""
    from topocast.providers.gcp.sdk import compute_client

    return compute_client(fake.url)


@pytest.fixture
def fake_compute() -> Iterator[FakeCompute]:
    with FakeCompute("demo-project", "123456789012") as fake:
        yield fake
