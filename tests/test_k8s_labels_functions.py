"""``TOPOCAST_PROVIDER=k8s-labels`` in the AWS functions: the discover handler lists the nodes of the
cluster the Kubernetes publisher reaches (``TOPOCAST_K8S_*``) on the fake API server, with the label
scheme of ``TOPOCAST_NODE_LABELS``, and the graph goes through render and publish (SSM on moto)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from k8s_fake_apiserver import FakeKubeApiServer
from test_k8s_node_label_provider import eks_nodes


@pytest.fixture
def fake() -> Iterator[FakeKubeApiServer]:
    with FakeKubeApiServer(token="function-token") as server:
        yield server


def test_aws_discover_handler_reads_topology_from_node_labels(
    fake: FakeKubeApiServer, aws_env: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from topocast.config import settings_from_env
    from topocast_sim.aws_pipeline import LocalAwsPipeline

    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "true")
    # what Terraform sets on the discover function (the connection exactly as the publisher reads it)
    monkeypatch.setenv("TOPOCAST_K8S_ENDPOINT", fake.url)
    monkeypatch.setenv("TOPOCAST_K8S_TOKEN", "function-token")
    p6 = {"node.kubernetes.io/instance-type": "p6-b200.48xlarge"}
    env = {
        "TOPOCAST_CLUSTER": "c1",
        "TOPOCAST_PROVIDER": "k8s-labels",
        "TOPOCAST_NODE_LABELS": json.dumps({"node_selector": p6}),
    }
    node_labels = settings_from_env(env).provider_options()
    assert node_labels == {"node_selector": p6}
    eks_nodes(fake)  # 7 nodes; the selector keeps the two p6-b200 ones (4 network layers)

    pl = LocalAwsPipeline("c1", quiet=0.5, max_wait=2.0, provider="k8s-labels", formats=("slurm-tree",),
                          extra_settings={"provider_settings": node_labels}, real_time=False)  # fmt: skip
    pl.request_reconcile()
    assert pl.run_until_idle(timeout=30)

    stored = pl.runtime.graphs.latest()
    assert stored is not None
    nodes = {n.name: (n.id, list(n.fabric)) for n in stored.graph.nodes}
    assert nodes == {  # the ID is the provider ID's last segment; layer 4 is the closest switch
        "ip-10-0-1-0.ec2.internal": ("i-00010", ["nn-b-leaf", "nn-b-3", "nn-mid-b", "nn-top"]),
        "ip-10-0-1-1.ec2.internal": ("i-00011", ["nn-b-leaf", "nn-b-3", "nn-mid-b", "nn-top"]),
    }
    envelope = json.loads(pl.ssm.get_parameter(Name="/topocast/c1/slurm/topology-tree.conf")["Parameter"]["Value"])
    assert envelope["data"].splitlines() == [
        "SwitchName=nn-top Switches=nn-mid-b",
        "SwitchName=nn-mid-b Switches=nn-b-3",
        "SwitchName=nn-b-3 Switches=nn-b-leaf",
        "SwitchName=nn-b-leaf Nodes=ip-10-0-1-0.ec2.internal,ip-10-0-1-1.ec2.internal",
    ]
    assert len(fake.calls("GET", resource="nodes")) == 1  # one LIST per discovery
    assert (pl.runtime.counters.renders, pl.runtime.counters.publishes, pl.runtime.counters.nodes) == (1, 1, 2)


def test_gcp_root_builds_the_k8s_labels_provider_from_the_publishers_connection(
    fake: FakeKubeApiServer, gcs_client: Any, gcs_bucket: str
) -> None:
    from topocast.config import Settings
    from topocast.gcp.root import build

    eks_nodes(fake)  # the label schemes do not depend on the cloud: 6 nodes with topology, 1 without
    settings = Settings(
        cluster="c1", bucket=gcs_bucket, gcp_project="test", provider="k8s-labels",
        k8s_options={"connection": {"endpoint": fake.url, "token": "function-token"}},  # TOPOCAST_K8S_OPTIONS
        provider_env={"TOPOCAST_NODE_LABELS": '{"accelerator_key": "nvidia.com/gpu.clique"}'},
    )  # fmt: skip
    result = build(settings, storage=gcs_client).provider().discover_full(None)
    graph = result.graph
    assert (len(graph.nodes), len(graph.nodes_without_topology())) == (7, 1)
    domains = {n.name: n.accelerator for n in graph.nodes if n.accelerator}
    assert domains == {f"ip-10-0-0-{i}.ec2.internal": f"uuid-1.{i // 2}" for i in range(4)}
    assert result.api_calls == {"k8s_GET": 1}
