"""Graph generations: plan_write, the in-memory store and S3GraphStore against a moto server."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from memory_stores import MemoryGraphStore
from pipeline_helpers import client, graph, make_bucket

from topocast.aws.s3_store import S3GraphStore
from topocast.errors import InvalidGraphError, StaleGenerationError
from topocast.pipeline.store import GenerationNotFoundError, commit, plan_write

# ----- pure decision ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("latest", "latest_hash", "new", "expected", "action", "generation"),
    [
        (None, None, "h1", None, "write", 1),
        (3, "h3", "h4", 3, "write", 4),
        (3, "h3", "h3", 3, "unchanged", 3),
        (3, "h3", "h3", 2, "unchanged", 3),  # stale writer, but the store already holds its content
        (3, "h3", "h4", 2, "stale", 3),
        (3, "h3", "h4", None, "stale", 3),
        (None, None, "h1", 5, "stale", 0),
    ],
)
def test_plan_write(latest, latest_hash, new, expected, action, generation) -> None:
    plan = plan_write(latest, latest_hash, new, expected)
    assert (plan.action, plan.generation) == (action, generation)


# ----- behaviour shared by every store ----------------------------------------------------------


def _exercise(store: Any, cluster: str) -> None:
    assert store.latest() is None
    g1, g2 = graph(cluster, 4), graph(cluster, 6)
    first = store.write_if_changed(g1, expected_generation=None)
    assert (first.generation, first.changed) == (1, True)
    again = store.write_if_changed(g1, expected_generation=1)
    assert (again.generation, again.changed) == (1, False)
    second = store.write_if_changed(g2, expected_generation=1)
    assert (second.generation, second.changed) == (2, True)
    latest = store.latest()
    assert latest.generation == 2 and latest.graph == g2 and latest.content_hash == g2.content_hash()
    assert store.get(1).graph == g1
    with pytest.raises(StaleGenerationError, match="generation 1"):
        store.write_if_changed(graph(cluster, 8), expected_generation=1)
    with pytest.raises(GenerationNotFoundError, match="generation 7"):
        store.get(7)
    # commit() re-reads and rebuilds on top of the newest graph
    seen: list[int | None] = []

    def add_two(current: Any) -> Any:
        seen.append(current.generation if current else None)
        return graph(cluster, len(current.graph.nodes) + 2)

    result = commit(store, add_two)
    assert (result.generation, result.changed) == (3, True)
    assert len(store.latest().graph.nodes) == 8 and seen == [2]


def test_memory_store() -> None:
    _exercise(MemoryGraphStore(), "mem")


def test_s3_store_behaves_like_memory(moto_server) -> None:
    bucket = make_bucket(moto_server)
    s3 = client(moto_server, "s3")
    store = S3GraphStore(bucket, "topocast", "c1", s3)
    _exercise(store, "c1")
    keys = sorted(o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"])
    assert keys == [
        "topocast/c1/graphs/000000000001.json",
        "topocast/c1/graphs/000000000002.json",
        "topocast/c1/graphs/000000000003.json",
        "topocast/c1/graphs/index.json",  # the history index, one entry per generation
        "topocast/c1/graphs/latest.json",
    ]
    index = json.loads(s3.get_object(Bucket=bucket, Key="topocast/c1/graphs/index.json")["Body"].read())
    assert [e["generation"] for e in index["generations"]] == [1, 2, 3]
    pointer = json.loads(s3.get_object(Bucket=bucket, Key="topocast/c1/graphs/latest.json")["Body"].read())
    assert pointer["generation"] == 3 and pointer["key"] == "topocast/c1/graphs/000000000003.json"
    # the generation objects are plain graph JSON, readable by `topocast render --graph`
    body = s3.get_object(Bucket=bucket, Key="topocast/c1/graphs/000000000001.json")["Body"].read()
    assert json.loads(body)["cluster"] == "c1"


def test_s3_store_rejects_other_cluster(moto_server) -> None:
    store = S3GraphStore(make_bucket(moto_server), "", "c1", client(moto_server, "s3"))
    with pytest.raises(InvalidGraphError, match="'c2'"):
        store.write_if_changed(graph("c2", 2), expected_generation=None)


# ----- corrupt data ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "reason"),
    [(b"\x00\xffgarbage", "not valid JSON"), (b"[1, 2]", "expected a JSON object"), (b'{"cluster": "c1"}', "provider")],
)
def test_corrupt_generation_is_a_clear_error(moto_server, body: bytes, reason: str) -> None:
    bucket = make_bucket(moto_server)
    s3 = client(moto_server, "s3")
    store = S3GraphStore(bucket, "p", "c1", s3)
    store.write_if_changed(graph("c1", 3), expected_generation=None)
    s3.put_object(Bucket=bucket, Key="p/c1/graphs/000000000001.json", Body=body)
    with pytest.raises(InvalidGraphError) as err:
        store.latest()
    assert f"s3://{bucket}/p/c1/graphs/000000000001.json" in str(err.value)
    assert reason in str(err.value) and "empty" not in str(err.value)


def test_altered_generation_and_corrupt_pointer(moto_server) -> None:
    bucket = make_bucket(moto_server)
    s3 = client(moto_server, "s3")
    store = S3GraphStore(bucket, "p", "c1", s3)
    store.write_if_changed(graph("c1", 3), expected_generation=None)
    # valid JSON, but not what the pointer recorded: someone edited the object in place
    s3.put_object(Bucket=bucket, Key="p/c1/graphs/000000000001.json", Body=graph("c1", 5).model_dump_json())
    with pytest.raises(InvalidGraphError, match="does not match the recorded"):
        store.latest()
    s3.put_object(Bucket=bucket, Key="p/c1/graphs/latest.json", Body=b"{oops")
    with pytest.raises(InvalidGraphError, match=r"latest\.json: corrupt latest-generation pointer"):
        store.latest()


# ----- concurrency ---------------------------------------------------------------------------------


def test_two_writers_race_for_one_generation(moto_server) -> None:
    bucket = make_bucket(moto_server)
    seed = S3GraphStore(bucket, "p", "c1", client(moto_server, "s3"))
    seed.write_if_changed(graph("c1", 2), expected_generation=None)
    # Both writers read generation 1, then meet at a barrier right before creating generation 2,
    # so the two If-None-Match puts really race on the server.
    barrier = threading.Barrier(2, timeout=10)
    outcomes: dict[str, Any] = {}

    def writer(name: str, n: int) -> None:
        s3 = client(moto_server, "s3")
        store = S3GraphStore(bucket, "p", "c1", s3)
        waited = []

        def before_put(params: dict[str, Any], **_: Any) -> None:
            if params["Key"].endswith("000000000002.json") and not waited:
                waited.append(True)
                barrier.wait()

        s3.meta.events.register("before-parameter-build.s3.PutObject", before_put)
        try:
            outcomes[name] = store.write_if_changed(graph("c1", n), expected_generation=1)
        except StaleGenerationError as exc:
            outcomes[name] = exc

    threads = [threading.Thread(target=writer, args=(name, n)) for name, n in (("a", 4), ("b", 6))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    winners = [k for k, v in outcomes.items() if not isinstance(v, Exception)]
    losers = [k for k, v in outcomes.items() if isinstance(v, StaleGenerationError)]
    assert len(winners) == 1 and len(losers) == 1, outcomes
    assert outcomes[winners[0]].generation == 2
    latest = seed.latest()
    assert latest.generation == 2 and len(latest.graph.nodes) == (4 if winners == ["a"] else 6)
    # the loser re-reads and retries on top of the winner
    retried = seed.write_if_changed(graph("c1", 9), expected_generation=2)
    assert retried.generation == 3


def test_writer_that_died_before_moving_the_pointer_does_not_wedge_the_store(moto_server) -> None:
    bucket = make_bucket(moto_server)
    s3 = client(moto_server, "s3")
    store = S3GraphStore(bucket, "p", "c1", s3)
    store.write_if_changed(graph("c1", 2), expected_generation=None)
    orphan = graph("c1", 3)
    # generation 2 was created (the commit point) but its writer crashed before updating latest.json
    s3.put_object(
        Bucket=bucket,
        Key="p/c1/graphs/000000000002.json",
        Body=orphan.model_dump_json(),
        Metadata={"generation": "2", "sha256": orphan.content_hash()},
    )
    assert store.latest().generation == 1
    result = commit(store, lambda current: graph("c1", len(current.graph.nodes) + 10))
    assert result.generation == 3
    assert store.get(2).graph == orphan
    # the retry built on the orphan's content (3 nodes), not on generation 1's (2 nodes)
    assert len(store.latest().graph.nodes) == 13


def test_failing_puts_are_retried_and_nothing_is_lost(moto_server) -> None:
    from botocore.exceptions import EndpointConnectionError

    bucket = make_bucket(moto_server)
    # botocore's own retries off, so only the store's retry layer can save the write
    s3 = client(moto_server, "s3", retries={"total_max_attempts": 1})
    store = S3GraphStore(bucket, "p", "c1", s3, base_delay=0.01)
    store.write_if_changed(graph("c1", 2), expected_generation=None)
    calls = {"n": 0, "fail_first": 2}

    def flaky(**_: Any) -> None:
        calls["n"] += 1
        if calls["n"] <= calls["fail_first"]:
            raise EndpointConnectionError(endpoint_url="injected")

    s3.meta.events.register("before-send.s3.PutObject", flaky)
    result = store.write_if_changed(graph("c1", 5), expected_generation=1)
    assert (result.generation, result.changed) == (2, True)
    assert len(store.latest().graph.nodes) == 5
    assert calls["n"] == 5  # 2 injected failures + generation object + pointer + history index

    # a persistent failure propagates (the caller's SQS batch is retried) and the store is untouched
    calls.update(n=0, fail_first=10**6)
    with pytest.raises(EndpointConnectionError):
        store.write_if_changed(graph("c1", 7), expected_generation=2)
    assert calls["n"] == 4  # bounded: the default 4 attempts
    assert store.latest().generation == 2 and len(store.latest().graph.nodes) == 5


def test_retry_policy_only_retries_transient_errors() -> None:
    from botocore.exceptions import ClientError, EndpointConnectionError

    from topocast.aws.retry import with_retries

    def failing(errors: list[Exception]):
        def call() -> str:
            if errors:
                raise errors.pop(0)
            return "ok"

        return call

    slow = ClientError({"Error": {"Code": "SlowDown"}, "ResponseMetadata": {"HTTPStatusCode": 503}}, "PutObject")
    lost = ClientError({"Error": {"Code": "PreconditionFailed"}, "ResponseMetadata": {"HTTPStatusCode": 412}}, "Put")
    naps: list[float] = []
    assert with_retries(failing([slow, EndpointConnectionError(endpoint_url="x")]), what="t", sleep=naps.append) == "ok"
    assert len(naps) == 2
    with pytest.raises(ClientError, match="PreconditionFailed"):
        with_retries(failing([lost]), what="t", sleep=naps.append)
    assert len(naps) == 2  # a lost race is an answer, not a failure: no retry
