"""``topocast controller --provider oci``: a cloud provider's clients come from its own connector inside the
controller too (before the connectors, the controller built only Kubernetes clients and ``oci`` stopped with
"no 'oci' client"). The OCI fake speaks the real SDK's HTTP; the Kubernetes fake the API server's wire.
Expected labels are written out by hand from the hosts' local and network blocks in ``test_oci_provider``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("oci", reason="the oci extra (in dev) is not installed")

from k8s_fake_apiserver import DEFAULT_CRDS, LEASES, NODES, FakeKubeApiServer
from oci_fake_server import oci_config
from test_oci_provider import COMPARTMENT, HPC_ID, cluster

from topocast.agents.controller import ControllerSettings, build_controller

TIER = "fabric.topograph.run/tier-"  # what the k8s-labels format writes, closest tier first
NAMES = ["gpu-01", "gpu-02", "gpu-03", "gpu-04", "gpu-05", "login-1"]  # the instances the OCI fake lists


@pytest.fixture
def kube() -> Iterator[FakeKubeApiServer]:
    with FakeKubeApiServer(
        crds=(*DEFAULT_CRDS, LEASES), namespaces=("default", "topocast", "slurm"), token="t"
    ) as server:
        for name in NAMES:
            server.add_node(name, {})
        yield server


def test_the_controller_reads_oci_through_the_oci_connector_and_labels_its_own_cluster(
    kube: FakeKubeApiServer, tmp_path: Path
) -> None:
    with cluster() as oci:
        settings = ControllerSettings(
            cluster="c1", provider="oci", identity="r1", quiet=0.2, max_wait=5.0, watch_window=1,
            retry_seconds=0.2, lease_seconds=2.0, reconcile_seconds=3600.0,
            provider_options={"compartment": COMPARTMENT, "config_file": str(oci_config(tmp_path)),
                              "endpoint": oci.url},
            k8s_options={"connection": {"endpoint": kube.url, "token": "t"},
                         "client": {"qps": 0, "max_attempts": 2, "backoff_initial": 0.05}},
        )  # fmt: skip
        controller = build_controller(settings)
        controller.elector.step()
        outcome = controller.step()
        assert outcome is not None
        assert (outcome.result, outcome.generation, outcome.nodes) == ("published", 1, 6), outcome.detail
        assert {op for op, _ in oci.calls} >= {"ListInstances", "ListComputeHosts"}

    def labels(name: str) -> dict[str, str]:
        obj = kube.get(NODES, name)
        assert obj is not None
        return {k: v for k, v in (obj["metadata"].get("labels") or {}).items() if k.startswith(TIER)}

    assert labels("gpu-01") == {f"{TIER}0": "lb1", f"{TIER}1": "nb1", f"{TIER}2": HPC_ID}
    assert labels("gpu-03") == {f"{TIER}0": "lb2", f"{TIER}1": "nb1", f"{TIER}2": HPC_ID}
    assert labels("gpu-04") == {f"{TIER}0": "lb3", f"{TIER}1": "nb2", f"{TIER}2": HPC_ID}
    # an instance without a compute host (login-1) has no fabric: the format's pseudo-leaf (Topograph's);
    # a host whose record breaks a rule (gpu-05: no network block) is set aside and gets no tier label
    assert labels("login-1") == {f"{TIER}0": "no-topology"}
    assert labels("gpu-05") == {}
