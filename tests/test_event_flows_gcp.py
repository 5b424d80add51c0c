"""GPU VMs through host maintenance and host errors, end to end on the local Compute Engine: System Event
audit-log entries as the Logging sink publishes them (Pub/Sub -> Eventarc -> discover through
functions-framework), the fake Compute API scripting the VM's status and moving it between sub-blocks,
the local Cloud Tasks holding discover's delayed re-checks (``dev.topocast.recheck.v1``), the stored graph.

A followed VM (``follow`` rows of the event table) is re-read until it runs again or is out, bounded by
``TOPOCAST_FOLLOW_RECHECKS``; the tests deliver each re-check task by hand (the interval is long enough
that the fake queue's dispatcher never fires during a test).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from gce_fake_server import FakeCompute
from test_gcp_functions import app, env, post  # noqa: F401  (env: the fixture)

from topocast.gcp import handlers
from topocast_sim import eventarc
from topocast_sim.gce import Placement

ZONE = "us-central1-a"
VM = "gpu-002"
RECHECK = "dev.topocast.recheck.v1"


def node(name: str) -> Any:
    stored = handlers.runtime().graphs.latest()
    assert stored is not None
    return next((n for n in stored.graph.nodes if n.name == name), None)


def generation() -> int:
    stored = handlers.runtime().graphs.latest()
    assert stored is not None
    return stored.generation


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


def take_recheck(fake_tasks: Any) -> tuple[dict[str, Any], Any] | None:
    """The re-check task discover queued (its CloudEvent), taken off the local queue; None when there is none."""
    with fake_tasks.cond:
        task = next((t for t in fake_tasks.tasks.values() if t.headers.get("ce-type") == RECHECK), None)
        if task is None:
            return None
        fake_tasks._finish(task.name)
    attrs = {k.removeprefix("ce-"): v for k, v in task.headers.items() if k.startswith("ce-")}
    return attrs, json.loads(task.body)


@pytest.fixture
def placed(
    env: dict[str, str],  # noqa: F811  (the imported fixture)
    fake_compute: FakeCompute,
    monkeypatch: pytest.MonkeyPatch,
) -> Any:
    monkeypatch.setenv("TOPOCAST_DISCOVER_URL", "http://127.0.0.1:9/discover")  # tasks are delivered by hand
    monkeypatch.setenv("TOPOCAST_FOLLOW_RECHECKS", "3")
    monkeypatch.setenv("TOPOCAST_FOLLOW_INTERVAL_SECONDS", "120")
    client = app("discover")
    assert post(client, *eventarc.pubsub_event(fake_compute.project, "reconcile", {"cluster": "c1"})).status_code == 200
    before = node(VM)
    assert before is not None and before.fabric
    return client, before


def test_terminate_on_host_maintenance_then_restart_on_another_subblock_is_followed_without_its_event(
    placed: Any, fake_compute: FakeCompute, fake_tasks: Any
) -> None:
    client, before = placed
    rejected = handlers.STATS["rejected"]
    fake_compute.set_status(ZONE, VM, "TERMINATED")  # GPU VMs cannot live-migrate: they stop
    assert post(client, *system_event(fake_compute, "compute.instances.terminateOnHostMaintenance")).status_code == 200
    assert node(VM).fabric == before.fabric  # stopped, restart expected: kept at its last place, not dropped

    first = take_recheck(fake_tasks)
    assert first is not None and first[1] == {
        "cluster": "c1",
        "attempt": 1,
        "instances": [
            {"instance": f"{fake_compute.project}/{ZONE}/{VM}", "kind": "compute.instances.terminateOnHostMaintenance"}
        ],
    }
    fake_compute.set_status(ZONE, VM, "STAGING")  # the restart has begun
    assert post(client, *first).status_code == 200
    assert node(VM).fabric == before.fabric

    second = take_recheck(fake_tasks)
    assert second is not None and second[1]["attempt"] == 2
    elsewhere = Placement(before.fabric[-1], "block-new", "subblock-new", "host-new")
    move(fake_compute, elsewhere)  # running again, on another sub-block; its automaticRestart entry is not read
    assert post(client, *second).status_code == 200
    after = node(VM)
    assert after.fabric == ["subblock-new", "block-new", before.fabric[-1]]
    assert take_recheck(fake_tasks) is None  # steady: the follow ends
    assert handlers.STATS["rejected"] == rejected


def test_a_read_after_a_host_error_never_removes_the_vm_and_the_restart_places_it_anew(
    placed: Any, fake_compute: FakeCompute, fake_tasks: Any
) -> None:
    client, before = placed
    fake_compute.set_status(ZONE, VM, "TERMINATED")
    assert post(client, *system_event(fake_compute, "compute.instances.hostError")).status_code == 200
    assert node(VM) is not None and node(VM).fabric == before.fabric  # the read before the restart kept it
    pending = take_recheck(fake_tasks)
    assert pending is not None

    move(fake_compute, Placement(before.fabric[-1], "block-b", "subblock-b", "host-b"))
    assert post(client, *system_event(fake_compute, "compute.instances.automaticRestart")).status_code == 200
    assert node(VM).fabric[:2] == ["subblock-b", "block-b"]  # the restart's event placed it anew
    assert take_recheck(fake_tasks) is None  # running: nothing more to follow
    settled = generation()
    assert post(client, *pending).status_code == 200  # the re-check queued earlier finds it steady
    assert generation() == settled and node(VM).fabric[:2] == ["subblock-b", "block-b"]
    assert take_recheck(fake_tasks) is None


def test_a_vm_that_never_comes_back_is_removed_at_the_bound(
    placed: Any, fake_compute: FakeCompute, fake_tasks: Any
) -> None:
    client, before = placed
    bound = handlers.STATS["follow_bound_reached"]
    fake_compute.set_status(ZONE, VM, "TERMINATED")
    assert post(client, *system_event(fake_compute, "compute.instances.hostError")).status_code == 200
    for attempt in (1, 2):
        task = take_recheck(fake_tasks)
        assert task is not None and task[1]["attempt"] == attempt
        assert post(client, *task).status_code == 200
        assert node(VM).fabric == before.fabric  # still waiting for the restart
    last = take_recheck(fake_tasks)
    assert last is not None and last[1]["attempt"] == 3  # TOPOCAST_FOLLOW_RECHECKS=3: the last one
    assert post(client, *last).status_code == 200
    assert node(VM) is None  # out at the bound: removed
    assert take_recheck(fake_tasks) is None
    assert handlers.STATS["follow_bound_reached"] == bound + 1


def test_a_vm_stuck_in_transition_at_the_bound_is_kept_with_a_warning(
    placed: Any, fake_compute: FakeCompute, fake_tasks: Any, caplog: pytest.LogCaptureFixture
) -> None:
    client, before = placed
    kept = handlers.STATS["follow_unsettled_kept"]
    fake_compute.set_status(ZONE, VM, "STAGING")
    assert post(client, *system_event(fake_compute, "compute.instances.automaticRestart")).status_code == 200
    while (task := take_recheck(fake_tasks)) is not None:
        assert post(client, *task).status_code == 200
    assert node(VM).fabric == before.fabric
    assert handlers.STATS["follow_unsettled_kept"] == kept + 1
    assert any("still not steady at the last re-check" in r.getMessage() for r in caplog.records)


def test_a_guest_shutdown_takes_the_vm_out_at_once(placed: Any, fake_compute: FakeCompute, fake_tasks: Any) -> None:
    client, _ = placed
    fake_compute.set_status(ZONE, VM, "TERMINATED")  # the guest shut down: automaticRestart does not apply
    post(client, *system_event(fake_compute, "compute.instances.guestTerminate"))
    assert node(VM) is None
    assert take_recheck(fake_tasks) is None


def test_a_guest_shutdown_read_while_stopping_is_followed_until_out(
    placed: Any, fake_compute: FakeCompute, fake_tasks: Any
) -> None:
    client, before = placed
    fake_compute.set_status(ZONE, VM, "STOPPING")
    post(client, *system_event(fake_compute, "compute.instances.guestTerminate"))
    assert node(VM).fabric == before.fabric  # in transition: kept
    task = take_recheck(fake_tasks)
    assert task is not None
    fake_compute.set_status(ZONE, VM, "TERMINATED")
    assert post(client, *task).status_code == 200
    assert node(VM) is None  # the kind travelled with the re-check: a guest stop stays stopped


def test_a_followed_event_batched_in_a_discover_window_is_followed_too(
    placed: Any, fake_compute: FakeCompute, fake_tasks: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import time

    client, before = placed
    monkeypatch.setenv("TOPOCAST_DISCOVER_WINDOW_SECONDS", "1")
    fake_compute.set_status(ZONE, VM, "TERMINATED")
    assert post(client, *system_event(fake_compute, "compute.instances.terminateOnHostMaintenance")).status_code == 200
    with fake_tasks.cond:  # the window's task, taken off the queue to be delivered by hand
        task = next(
            t for t in fake_tasks.tasks.values() if t.headers.get("ce-type") == "dev.topocast.discover.window.v1"
        )
        fake_tasks._finish(task.name)
    window = {k.removeprefix("ce-"): v for k, v in task.headers.items() if k.startswith("ce-")}, json.loads(task.body)
    time.sleep(1.1)  # the window is over and no marker is younger than one window
    assert post(client, *window).status_code == 200
    assert node(VM).fabric == before.fabric  # the marker kept the follow: not removed
    recheck = take_recheck(fake_tasks)
    assert recheck is not None and recheck[1]["instances"][0]["kind"] == "compute.instances.terminateOnHostMaintenance"


def test_a_window_read_by_listing_still_follows_the_vm_it_does_not_list(
    placed: Any, fake_compute: FakeCompute, fake_tasks: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    client, before = placed
    monkeypatch.setenv("TOPOCAST_GCP_READ", "list")  # what a window of many changed VMs does
    fake_compute.set_status(ZONE, VM, "TERMINATED")  # the RUNNING-only listing does not show it
    assert post(client, *system_event(fake_compute, "compute.instances.hostError")).status_code == 200
    assert node(VM).fabric == before.fabric  # one get on top of the listing: kept, not dropped
    task = take_recheck(fake_tasks)
    assert task is not None
    move(fake_compute, Placement(before.fabric[-1], "block-l", "subblock-l", "host-l"))
    assert post(client, *task).status_code == 200
    assert node(VM).fabric[:2] == ["subblock-l", "block-l"]
    assert len(handlers.runtime().graphs.latest().graph.nodes) == 6  # type: ignore[union-attr]
