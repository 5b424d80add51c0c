"""The publish reaches the head node by notification: GCS finalize -> Pub/Sub -> ``pull --watch``, and the demos.

The GCP path on the local Cloud Storage (gcp-storage-emulator behind the proxy, which serves the
bucket's ``notificationConfigs`` and publishes ``OBJECT_FINALIZE`` messages) and the local Pub/Sub
(:class:`topocast_sim.pubsub.FakePubSub`), driven by the real google-cloud-storage client and the
agent's own :class:`~topocast.agents.pull_watch.PubSubWaker`. Then ``topocast demo --watch`` on both
clouds: the agent installs the published file because a notification woke it, not by its fallback.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from cli_runner import invoke

pytest.importorskip("gcp_storage_emulator")

PROJECT = "p1"
PREFIX = "topocast/c1/slurm/"


@pytest.fixture
def gcs_with_pubsub(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Any, Any, str]]:
    from topocast.gcp.clients import storage_client
    from topocast_sim.gcs import LocalGcs
    from topocast_sim.pubsub import FakePubSub
    from topocast_sim.watch_agent import gcs_notification_subscription

    pubsub = FakePubSub(pull_wait=0.3).start()
    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", pubsub.url.removeprefix("http://"))
    with LocalGcs(("b1",)) as gcs:
        client = storage_client("local", gcs.url)
        sub = gcs_notification_subscription(
            pubsub.url, client, bucket="b1", object_prefix=PREFIX, project=PROJECT, name="topocast-c1"
        )
        yield client, pubsub, sub
    pubsub.stop()


def test_a_finalized_object_under_the_prefix_wakes_the_agent_once(gcs_with_pubsub: tuple[Any, Any, str]) -> None:
    from topocast.agents.pull_watch import PubSubWaker

    client, pubsub, sub = gcs_with_pubsub
    bucket = client.bucket("b1")
    bucket.blob("topocast/c1/graphs/7.json").upload_from_string(b"{}")  # not under the Slurm prefix
    blob = bucket.blob(PREFIX + "topology-tree.conf")
    blob.upload_from_string(b"SwitchName=s1 Nodes=gpu-1\n")
    blob.reload()

    session = requests.Session()
    reply = session.post(f"{pubsub.url}/v1/{sub}:pull", json={"maxMessages": 10}, timeout=10).json()
    [received] = reply["receivedMessages"]
    attrs = received["message"]["attributes"]
    assert attrs["eventType"] == "OBJECT_FINALIZE" and attrs["payloadFormat"] == "JSON_API_V1"
    assert (attrs["bucketId"], attrs["objectId"]) == ("b1", PREFIX + "topology-tree.conf")
    assert attrs["objectGeneration"] == str(blob.generation)
    assert json.loads(base64.b64decode(received["message"]["data"]))["name"] == PREFIX + "topology-tree.conf"
    session.post(f"{pubsub.url}/v1/{sub}:acknowledge", json={"ackIds": [received["ackId"]]}, timeout=10)

    # the agent's waker: the next write is one wake-up, acknowledged after its pull; then nothing
    waker = PubSubWaker(sub, session, pubsub.url)
    blob.upload_from_string(b"SwitchName=s1 Nodes=gpu-[1-2]\n")
    assert waker.wait(5) == 1
    waker.done()
    assert waker.wait(0.5) == 0
    assert pubsub.published == 2 and pubsub.acknowledged == 2


def test_an_unacknowledged_notification_comes_back_after_its_deadline(gcs_with_pubsub: tuple[Any, Any, str]) -> None:
    """A head node that dies between the wake-up and its pull is woken again (at least once delivery)."""
    client, pubsub, _ = gcs_with_pubsub
    sub = f"projects/{PROJECT}/subscriptions/short-deadline"
    topic = f"projects/{PROJECT}/topics/topocast-c1-slurm-published"
    requests.put(f"{pubsub.url}/v1/{sub}", json={"topic": topic, "ackDeadlineSeconds": 1}, timeout=10)
    client.bucket("b1").blob(PREFIX + "topology.yaml").upload_from_string(b"- topology: {}\n")
    url = f"{pubsub.url}/v1/{sub}:pull"
    first = requests.post(url, json={"maxMessages": 1}, timeout=10).json()["receivedMessages"]
    assert first[0]["deliveryAttempt"] == 1
    again: dict[str, Any] = {}
    for _ in range(20):  # each pull waits 0.3 s on the server: together they outlast the 1 s deadline
        if again := requests.post(url, json={"maxMessages": 1}, timeout=10).json():
            break
    assert again["receivedMessages"][0]["message"]["messageId"] == first[0]["message"]["messageId"]
    assert again["receivedMessages"][0]["deliveryAttempt"] == 2


def test_a_config_without_a_pubsub_topic_is_refused(gcs_with_pubsub: tuple[Any, Any, str]) -> None:
    client, _, _ = gcs_with_pubsub
    url = f"{client._connection.API_BASE_URL}/storage/v1/b/b1/notificationConfigs"
    reply = requests.post(url, json={"topic": "not-a-topic"}, timeout=10)
    assert reply.status_code == 400 and "topic" in reply.json()["error"]["message"]


# GCP's demo is a real-time run with its storage emulator in a child process (10 s): the slow tier's; the
# GCS notification path to the agent is checked in the default run by the tests above and test_pull_watch
@pytest.mark.parametrize("cloud", ["aws", pytest.param("gcp", marks=pytest.mark.slow)])
def test_demo_watch_installs_by_notification_on_both_clouds(cloud: str, tmp_path: Path) -> None:
    """``topocast demo --watch``: the installed file is the published one, and a notification put it there."""
    pytest.importorskip("moto")
    out = tmp_path / cloud
    result = invoke(
        ["demo", "--cloud", cloud, "--nodes", "24", "--events", "1", "--watch", "--leading-edge", "--quiet", "1",
         "--out", str(out)]
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    report = json.loads((out / "report.json").read_text())
    pulled = report["pull"]
    assert pulled["mode"] == "watch" and pulled["action"] == "installed", pulled
    assert pulled["watch"]["notified"] >= 1 and pulled["watch"]["fallbacks"] == 0, pulled
    assert set(report["latency"]) == {"graph", "published", "installed"}
    assert "by pull --watch" in result.output
    assert "SwitchName=" in (out / "topology.conf").read_text()
