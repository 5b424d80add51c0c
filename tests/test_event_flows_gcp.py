"""GPU VMs through host maintenance and host errors, end to end on the local Compute Engine: System Event
audit-log entries as the Logging sink publishes them (Pub/Sub -> Eventarc -> discover through
functions-framework), the fake Compute API moving the VM between sub-blocks, the stored graph.

One read per event is what the pipeline does on this branch; the ``follow`` re-read (until the VM
runs again or is gone) belongs to the application layer and narrows the window between the events.
"""

from __future__ import annotations

from typing import Any

import pytest
from gce_fake_server import FakeCompute
from test_gcp_functions import app, env, post  # noqa: F401  (env: the fixture)

from topocast.gcp import handlers
from topocast_sim import eventarc
from topocast_sim.gce import Placement

ZONE = "us-central1-a"
VM = "gpu-002"


def node(name: str) -> Any:
    stored = handlers.runtime().graphs.latest()
    assert stored is not None
    return next((n for n in stored.graph.nodes if n.name == name), None)


def system_event(fake: FakeCompute, method: str) -> tuple[dict[str, Any], dict[str, Any]]:
    inst = fake.instances[(ZONE, VM)]
    return eventarc.system_event(project=fake.project, zone=ZONE, name=VM, instance_id=inst["id"], method=method)


def move(fake: FakeCompute, where: Placement) -> None:
    with fake.lock:
        inst = fake.instances[(ZONE, VM)]
        inst["resourceStatus"] = {
            "physicalHost": f"/{where.block}/{where.subblock}/{where.host}",
            "physicalHostTopology": {
                "cluster": where.cluster, "block": where.block, "subblock": where.subblock, "host": where.host,
            },
        }  # fmt: skip
        inst["status"] = "RUNNING"


@pytest.fixture
def placed(env: dict[str, str], fake_compute: FakeCompute) -> Any:  # noqa: F811  (env: the imported fixture)
    client = app("discover")
    assert post(client, *eventarc.pubsub_event(fake_compute.project, "reconcile", {"cluster": "c1"})).status_code == 200
    before = node(VM)
    assert before is not None and before.fabric
    return client, before


def test_terminate_on_host_maintenance_then_automatic_restart_on_another_subblock(
    placed: Any, fake_compute: FakeCompute
) -> None:
    client, before = placed
    rejected = handlers.STATS["rejected"]
    fake_compute.set_status(ZONE, VM, "TERMINATED")  # GPU VMs cannot live-migrate: they stop
    assert post(client, *system_event(fake_compute, "compute.instances.terminateOnHostMaintenance")).status_code == 200
    assert node(VM) is None  # stopped: out of the graph, not left with its old fabric

    elsewhere = Placement(before.fabric[-1], "block-new", "subblock-new", "host-new")
    move(fake_compute, elsewhere)  # Compute Engine restarts it on another sub-block
    assert post(client, *system_event(fake_compute, "compute.instances.automaticRestart")).status_code == 200
    after = node(VM)
    assert after is not None and after.fabric[0] == "subblock-new" and after.fabric != before.fabric
    assert handlers.STATS["rejected"] == rejected


def test_host_error_then_restart_never_leaves_the_vm_missing(placed: Any, fake_compute: FakeCompute) -> None:
    client, before = placed
    fake_compute.set_status(ZONE, VM, "TERMINATED")
    post(client, *system_event(fake_compute, "compute.instances.hostError"))  # read before the restart
    move(fake_compute, Placement(before.fabric[-1], "block-b", "subblock-b", "host-b"))
    assert post(client, *system_event(fake_compute, "compute.instances.automaticRestart")).status_code == 200
    after = node(VM)
    assert after is not None and after.fabric[0] == "subblock-b"  # the restart's event brought it back

    # the other order: the restart already happened when the host-error entry is read
    move(fake_compute, Placement(before.fabric[-1], "block-c", "subblock-c", "host-c"))
    post(client, *system_event(fake_compute, "compute.instances.hostError"))
    assert node(VM).fabric[0] == "subblock-c"


def test_a_guest_shutdown_takes_the_vm_out(placed: Any, fake_compute: FakeCompute) -> None:
    client, _ = placed
    fake_compute.set_status(ZONE, VM, "TERMINATED")
    post(client, *system_event(fake_compute, "compute.instances.guestTerminate"))
    assert node(VM) is None
