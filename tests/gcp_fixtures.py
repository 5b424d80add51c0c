"""GCP test fixtures (loaded from conftest): local Cloud Storage, Cloud Tasks and Compute.

* ``local_gcs`` (session): gcp-storage-emulator behind topocast's generation-precondition
  proxy (:class:`topocast_sim.gcs.LocalGcs`); ``gcs_objects`` gives each test its own bucket.
* ``fake_tasks``: a started :class:`topocast_sim.cloudtasks.FakeCloudTasks` with one queue.
* ``fake_compute``: from :mod:`gce_fake_server`.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from gce_fake_server import fake_compute  # noqa: F401  (re-exported fixture)

from topocast_sim.cloudtasks import FakeCloudTasks
from topocast_sim.gcs import LocalGcs

QUEUE = "projects/demo-project/locations/us-central1/queues/topocast"


@pytest.fixture(scope="session")
def local_gcs() -> Iterator[LocalGcs]:
    with LocalGcs() as gcs:
        yield gcs


@pytest.fixture
def gcs_client(local_gcs: LocalGcs) -> Any:
    from topocast.gcp.clients import storage_client

    return storage_client("test", local_gcs.url)


@pytest.fixture
def gcs_bucket(gcs_client: Any) -> str:
    name = f"tc-{uuid.uuid4().hex[:12]}"
    gcs_client.create_bucket(name)
    return name


@pytest.fixture
def gcs_objects(gcs_client: Any, gcs_bucket: str) -> Any:
    from topocast.gcp.gcs import GcsObjects

    return GcsObjects(gcs_bucket, gcs_client)


@pytest.fixture
def fake_tasks() -> Iterator[FakeCloudTasks]:
    with FakeCloudTasks(min_backoff=0.05, max_backoff=0.5) as fake:
        fake.add_queue(QUEUE)
        yield fake


@pytest.fixture
def tasks_client(fake_tasks: FakeCloudTasks) -> Any:
    from topocast.gcp.clients import tasks_client as make

    return make(fake_tasks.url)
