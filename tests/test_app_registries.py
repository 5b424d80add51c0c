"""The registries are the code path: a provider and a publisher added by name run the real pipeline.

A dummy topology source and a dummy publisher are registered the way a new module would be (one
line each), selected by ``TOPOCAST_PROVIDER`` / ``TOPOCAST_PUBLISHERS`` values, and driven through
the AWS Lambda handlers on moto: discover -> render -> publish, no code path naming them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import ClassVar

import pytest
from pipeline_helpers import graph

from topocast.model.changes import InstanceChange
from topocast.model.graph import TopologyGraph
from topocast.ports.records import Manifest, PublishResult
from topocast.providers import PROVIDERS, ProviderInputs, register_provider
from topocast.providers.base import DiscoveryResult
from topocast.publish import PUBLISHERS, PublisherInputs, register_publisher


class DummyProvider:
    name = "dummy"
    incremental = False

    def __init__(self, inputs: ProviderInputs) -> None:
        self.cluster = inputs.cluster
        self.size = int(inputs.options.get("size", 12))

    def discover_full(self, previous: TopologyGraph | None) -> DiscoveryResult:
        return DiscoveryResult(graph(self.cluster, self.size), {"dummy.list": 1})

    def discover_changes(self, previous: TopologyGraph, changes: Sequence[InstanceChange]) -> DiscoveryResult:
        return self.discover_full(previous)

    def scope(self, change: InstanceChange) -> str | None:
        return None


class DummyPublisher:
    name = "memory"
    received: ClassVar[list[tuple[int, dict[str, bytes]]]] = []

    def publish(self, manifest: Manifest, artifacts: Mapping[str, bytes]) -> PublishResult:
        DummyPublisher.received.append((manifest.generation, dict(artifacts)))
        return PublishResult(True, f"generation {manifest.generation} kept in memory")


@pytest.fixture
def registered() -> Iterator[None]:
    register_provider("dummy", DummyProvider)
    register_publisher("memory", lambda inputs: DummyPublisher())
    DummyPublisher.received = []
    try:
        yield
    finally:
        PROVIDERS.pop("dummy")
        PUBLISHERS.pop("memory")


def test_a_registered_provider_and_publisher_run_the_pipeline(
    registered: None, aws_env: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from topocast_sim.aws_pipeline import LocalAwsPipeline

    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "true")
    pl = LocalAwsPipeline("c1", quiet=0.5, max_wait=2.0, provider="dummy", publishers=("memory",),
                          formats=("slurm-tree",), real_time=False)  # fmt: skip
    pl.request_reconcile()
    assert pl.run_until_idle(timeout=30)
    assert [n.name for n in pl.runtime.graphs.latest().graph.nodes] == [f"gpu-{i:04d}" for i in range(12)]
    ((generation, files),) = DummyPublisher.received
    assert generation == 1 and set(files) == {"topology-tree.conf"}
    assert b"SwitchName=leaf-002 Nodes=gpu-[0008-0011]" in files["topology-tree.conf"]
    assert (pl.runtime.counters.renders, pl.runtime.counters.publishes, pl.runtime.counters.api_calls) == (1, 1, 1)


def test_unknown_names_fail_with_the_known_ones() -> None:
    import topocast.aws.root
    import topocast.gcp.root  # noqa: F401  (the composition roots register ssm and gcs)
    from topocast.errors import ProviderError, TopocastError
    from topocast.providers import build_provider
    from topocast.publish import build_publishers

    known = "aws, azure, dra, gcp, ibnetdiscover, k8s-labels, nebius, netq, oci"
    with pytest.raises(ProviderError, match=rf"unknown provider 'nope'; known: {known}"):
        build_provider("nope", ProviderInputs("c1"))
    with pytest.raises(TopocastError, match=r"unknown publisher 'nope'; known: gcs, kubernetes, slurmrestd, ssm$"):
        build_publishers(["nope"], PublisherInputs(None, lambda g: graph("c1", 1)))


def test_a_cloud_publisher_is_known_only_where_its_cloud_registered_it() -> None:
    """A Cloud Run process loads the GCP root only: ``TOPOCAST_PUBLISHERS=ssm`` there is one clear line."""
    import subprocess
    import sys

    code = (
        "import topocast.gcp.root\n"
        "from topocast.publish import PublisherInputs, build_publishers\n"
        "build_publishers(['ssm'], PublisherInputs(None, lambda g: None))\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert run.returncode == 1
    assert run.stderr.strip().splitlines()[-1] == (
        "topocast.errors.TopocastError: unknown publisher 'ssm'; known: gcs, kubernetes, slurmrestd"
    )
