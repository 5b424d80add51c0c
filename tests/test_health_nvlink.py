"""NVLink fabric health per host: ``collect nvlink`` reads each GPU's Fabric ``State`` / ``Status`` /
``Health``-``Bandwidth`` (``nvidia-smi -q``), and the host's NVLink attachment (a link from the host to its
domain) carries the worst of them. Only that host is in the blast radius.

Driven through the ``azure`` provider (the one that reads ``collect nvlink`` records) against the fake ARM of
tests/test_azure_provider.py: gpu-00[0-3] in NVLink domain A1, gpu-00[4-7] in A2.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from azure_fake_arm import FakeArm
from test_azure_provider import IBSTAT, UUID, arm, discover  # noqa: F401  (arm: the fixture)

from topocast.model.health import node_health
from topocast.providers.nvlink import build_record, parse_smi_gpus

GPU = """GPU 0000000{bus}:01:00.0
    Product Name                          : NVIDIA GB200
    Fabric
        State                             : {state}
        Status                            : {status}
        CliqueId                          : {clique}
        ClusterUUID                       : {uuid}
        Health
            Bandwidth                     : {bandwidth}
    Persistence Mode                      : Enabled
    State                                 : not the fabric's
"""


def smi(clique: int, state: str = "Completed", status: str = "Success", bandwidth: str = "Full") -> str:
    head = "==============NVSMI LOG==============\n\n"
    ok = {"state": "Completed", "status": "Success", "bandwidth": "Full"}
    gpus = [GPU.format(bus=0, clique=clique, uuid=UUID, **ok),
            GPU.format(bus=1, clique=clique, uuid=UUID, state=state, status=status, bandwidth=bandwidth)]  # fmt: skip
    return head + "".join(gpus)


def uploads(**bad: dict[str, str]) -> dict[str, bytes]:
    out = {}
    for i in range(8):
        text = smi(1 if i < 4 else 2, **bad.get(f"gpu-{i:03d}", {}))
        out[f"r/gpu-{i:03d}.json"] = json.dumps(build_record(f"gpu-{i:03d}", text, IBSTAT.format(n=i)).model_dump())
    return {k: v.encode() for k, v in out.items()}


def test_the_fabric_section_is_read_and_nothing_outside_it() -> None:
    [first, second] = parse_smi_gpus(smi(1, status="Failure", bandwidth="Degraded"))
    assert (first.state, first.status, first.bandwidth) == ("Completed", "Success", "Full")
    assert (second.state, second.status, second.bandwidth) == ("Completed", "Failure", "Degraded")


@pytest.mark.parametrize(
    ("bad", "state", "reason"),
    [
        ({"bandwidth": "Degraded"}, "degraded", "GPU 00000001:01:00.0 fabric bandwidth Degraded"),
        ({"status": "Failure"}, "impaired", "GPU 00000001:01:00.0 fabric status Failure"),
        ({"state": "In Progress"}, "unknown", "GPU 00000001:01:00.0 fabric state In Progress"),
    ],
)
def test_one_hosts_fabric_puts_only_that_host_in_the_radius(arm: FakeArm, bad: dict, state: str, reason: str) -> None:  # noqa: F811
    graph = discover(arm, uploads(**{"gpu-005": bad})).graph
    [rec] = graph.health
    assert (rec.kind, rec.id, rec.peer, rec.state, rec.reason) == ("link", "gpu-005", f"{UUID}.2", state, reason)
    rows = [(n.name, n.fabric, n.accelerator, n.labels) for n in graph.nodes]
    assert {n: h.state for n, h in node_health(rows, graph.health).items()} == {"gpu-005": state}


def test_healthy_fabrics_add_no_record(arm: FakeArm) -> None:  # noqa: F811
    assert discover(arm, uploads()).graph.health == []


def test_records_before_the_fields_existed_still_load(arm: FakeArm) -> None:  # noqa: F811
    old: dict[str, Any] = json.loads(uploads()["r/gpu-000.json"])
    for gpu in old["gpus"]:
        del gpu["state"], gpu["status"], gpu["bandwidth"]
    got = discover(arm, {**uploads(), "r/gpu-000.json": json.dumps(old).encode()}).graph
    assert got.health == [] and "gpu-000" not in got.unplaced
