"""Collection agent: upload to S3 (moto server) and GCS (emulator), skip unchanged fabrics, S3 event -> discover."""

from __future__ import annotations

import json
import re
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from memory_stores import MemoryGraphStore

from topocast.agents import collect
from topocast.agents.collect import CollectError, collect_ibnetdiscover, read_uploads
from topocast.providers.onprem import ibnetdiscover
from topocast.renderers import render

BUCKET = "fabric-uploads"


@pytest.fixture
def example(conformance_dir: Path) -> Path:
    return conformance_dir / "inputs" / "ibnetdiscover" / "example.out"


@pytest.fixture
def s3(aws_env: str) -> Any:
    import boto3

    client = boto3.client("s3")
    client.create_bucket(Bucket=BUCKET)
    client.put_bucket_versioning(Bucket=BUCKET, VersioningConfiguration={"Status": "Enabled"})
    return client


def versions(s3: Any, key: str) -> int:
    return len(s3.list_object_versions(Bucket=BUCKET, Prefix=key).get("Versions", []))


def restamped(text: str) -> str:
    """The same fabric seen by a later run: a new date comment and renumbered LIDs."""
    text = re.sub(r"generated on .*", "generated on Sat Sep 13 01:02:03 2025", text)
    return re.sub(r"\blid (\d+)", lambda m: f"lid {int(m.group(1)) + 1000}", text)


def test_upload_then_skip_when_the_fabric_is_unchanged(s3: Any, example: Path, tmp_path: Path) -> None:
    first = collect_ibnetdiscover(example, f"s3://{BUCKET}/onprem/fabric", host="ufm-01")
    key = "onprem/fabric/ufm-01/ibnetdiscover.out"
    assert (first.uri, first.uploaded) == (f"s3://{BUCKET}/{key}", True)
    obj = s3.get_object(Bucket=BUCKET, Key=key)
    assert obj["Body"].read() == example.read_bytes()
    assert obj["Metadata"]["sha256"] == first.sha256 and obj["Metadata"]["host"] == "ufm-01"

    again = collect_ibnetdiscover(example, f"s3://{BUCKET}/onprem/fabric", host="ufm-01")
    later = tmp_path / "later.out"
    later.write_text(restamped(example.read_text()))
    restamp = collect_ibnetdiscover(later, f"s3://{BUCKET}/onprem/fabric", host="ufm-01")
    assert not again.uploaded and not restamp.uploaded and restamp.sha256 == first.sha256
    assert restamp.content_sha256 != first.content_sha256
    assert versions(s3, key) == 1

    changed = tmp_path / "changed.out"
    changed.write_text(example.read_text().replace('"a05-p1-dgx-01-c03 ', '"a05-p1-dgx-01-c99 '))
    assert collect_ibnetdiscover(changed, f"s3://{BUCKET}/onprem/fabric", host="ufm-01").uploaded
    assert versions(s3, key) == 2


def test_runs_the_command_and_refuses_to_upload_bad_output(s3: Any, example: Path, tmp_path: Path) -> None:
    fake = [sys.executable, "-c", f"import sys; sys.stdout.write(open({str(example)!r}).read())"]
    result = collect_ibnetdiscover(None, f"s3://{BUCKET}", command=fake, host="gpu-001")
    assert result.uploaded and result.uri == f"s3://{BUCKET}/gpu-001/ibnetdiscover.out"
    assert result.size == example.stat().st_size

    cut = [sys.executable, "-c", f"import sys; sys.stdout.write(open({str(example)!r}).read()[:5000])"]
    with pytest.raises(CollectError, match=r"not uploading: .*:\d+: "):
        collect_ibnetdiscover(None, f"s3://{BUCKET}", command=cut, host="gpu-002")
    failing = [sys.executable, "-c", "import sys; sys.stderr.write('ibwarn: umad open failed\\n'); sys.exit(3)"]
    with pytest.raises(CollectError, match="exited with status 3: ibwarn: umad open failed"):
        collect_ibnetdiscover(None, f"s3://{BUCKET}", command=failing, host="gpu-002")
    with pytest.raises(CollectError, match="not found"):
        collect_ibnetdiscover(None, f"s3://{BUCKET}", command="/nonexistent/ibnetdiscover", host="gpu-002")
    assert "gpu-002" not in json.dumps(s3.list_objects_v2(Bucket=BUCKET).get("Contents", []), default=str)


def test_bad_upload_location() -> None:
    with pytest.raises(CollectError, match="must be s3://BUCKET"):
        collect.split_uri("/tmp/somewhere")
    for uri in ("s3://b/topocast/c1/uploads/../../c2/uploads", "gs://b/topocast/./c1//uploads"):
        with pytest.raises(CollectError, match=r"a prefix part is empty, '\.' or '\.\.'$"):
            collect.split_uri(uri)
    assert collect.split_uri("s3://b/topocast/c1/uploads/") == ("s3", "b", "topocast/c1/uploads")


def test_s3_event_to_discover_to_render_and_no_new_generation(s3: Any, example: Path, tmp_path: Path) -> None:
    """Upload -> S3 ObjectCreated on SQS -> read the uploads -> discover -> render -> store; then a no-change run."""
    import boto3

    sqs = boto3.client("sqs")
    queue = sqs.create_queue(QueueName="discover")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    s3.put_bucket_notification_configuration(
        Bucket=BUCKET,
        NotificationConfiguration={
            "QueueConfigurations": [
                {
                    "QueueArn": arn,
                    "Events": ["s3:ObjectCreated:*"],
                    "Filter": {"Key": {"FilterRules": [{"Name": "suffix", "Value": "/ibnetdiscover.out"}]}},
                }
            ]
        },
    )

    def events() -> list[dict[str, Any]]:
        msgs = sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=10, WaitTimeSeconds=0).get("Messages", [])
        for m in msgs:
            sqs.delete_message(QueueUrl=queue, ReceiptHandle=m["ReceiptHandle"])
        bodies = [json.loads(m["Body"]) for m in msgs]
        return [r for b in bodies for r in b.get("Records", [])]

    events()  # moto announces the notification configuration with a test event
    store = MemoryGraphStore()
    collect_ibnetdiscover(example, f"s3://{BUCKET}/fabric", host="ufm-01")
    (record,) = events()
    prefix = collect.upload_prefix(record["s3"]["object"]["key"])  # event keys are URL-encoded
    assert record["eventName"].startswith("ObjectCreated") and prefix == "fabric"
    assert collect.upload_prefix("fabric/graph.json") is None

    uploads = read_uploads(f"s3://{record['s3']['bucket']['name']}/{prefix}")
    result = ibnetdiscover.discover(texts=uploads, cluster="dgx")
    first = store.write_if_changed(result.graph, expected_generation=None)
    conf = render(result.graph, "slurm-tree").content
    assert first.changed and first.generation == 1
    for node in result.graph.nodes:  # every host is in the leaf line of its own switch
        assert re.search(rf"^SwitchName={node.fabric[0]} Nodes=", conf, re.M)

    later = tmp_path / "later.out"
    later.write_text(restamped(example.read_text()))
    assert not collect_ibnetdiscover(later, f"s3://{BUCKET}/fabric", host="ufm-01").uploaded
    assert events() == []  # nothing uploaded, nothing triggered
    # a second collector on the same fabric uploads (new object) but discover yields the same graph
    assert collect_ibnetdiscover(later, f"s3://{BUCKET}/fabric", host="ufm-02").uploaded
    assert len(events()) == 1
    again = ibnetdiscover.discover(texts=read_uploads(f"s3://{BUCKET}/fabric"), cluster="dgx")
    second = store.write_if_changed(again.graph, expected_generation=1)
    assert not second.changed and second.generation == 1


# ----- GCS ----------------------------------------------------------------------------------
@pytest.fixture
def gcs(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    emulator = pytest.importorskip("gcp_storage_emulator.server")
    storage = pytest.importorskip("google.cloud.storage")
    from google.auth.credentials import AnonymousCredentials

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = emulator.create_server("127.0.0.1", port, in_memory=True)
    server.start()
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://127.0.0.1:{port}")
    try:
        client = storage.Client(project="test", credentials=AnonymousCredentials())
        client.create_bucket(BUCKET)
        yield client
    finally:
        server.stop()


def test_gcs_upload_and_skip(gcs: Any, example: Path, tmp_path: Path) -> None:
    first = collect_ibnetdiscover(example, f"gs://{BUCKET}/fabric", host="ufm-01", gcs_client=gcs)
    assert first.uploaded and first.uri == f"gs://{BUCKET}/fabric/ufm-01/ibnetdiscover.out"
    blob = gcs.bucket(BUCKET).get_blob("fabric/ufm-01/ibnetdiscover.out")
    assert blob.metadata["sha256"] == first.sha256
    later = tmp_path / "later.out"
    later.write_text(restamped(example.read_text()))
    assert not collect_ibnetdiscover(later, f"gs://{BUCKET}/fabric", host="ufm-01", gcs_client=gcs).uploaded
    uploads = read_uploads(f"gs://{BUCKET}/fabric", gcs_client=gcs)
    assert list(uploads) == [first.uri] and uploads[first.uri] == example.read_bytes()


def test_a_bad_upload_is_quarantined_and_the_hosts_last_good_upload_stands_in(s3: Any, example: Path) -> None:
    from topocast.agents.collect import read_good_uploads

    uploads = f"s3://{BUCKET}/topocast/c1/uploads"
    good = example.read_bytes()
    collect_ibnetdiscover(example, uploads, host="ufm-01", s3_client=s3)
    collect_ibnetdiscover(example, uploads, host="ufm-02", s3_client=s3)
    first = read_good_uploads(uploads, ibnetdiscover.parse, s3_client=s3)
    assert first.quarantined == [] and sorted(first.texts) == [
        f"{uploads}/ufm-01/ibnetdiscover.out",
        f"{uploads}/ufm-02/ibnetdiscover.out",
    ]
    # any writer to uploads/ leaves garbage for ufm-01
    s3.put_object(Bucket=BUCKET, Key="topocast/c1/uploads/ufm-01/ibnetdiscover.out", Body=b"\x00garbage\n")
    second = read_good_uploads(uploads, ibnetdiscover.parse, s3_client=s3)
    assert [uri for uri, _ in second.quarantined] == [f"{uploads}/ufm-01/ibnetdiscover.out"]
    assert second.fallbacks == ["ufm-01"]
    assert second.texts == {
        f"{uploads}/ufm-02/ibnetdiscover.out": good,
        f"s3://{BUCKET}/topocast/c1/last-good/ufm-01/ibnetdiscover.out": good,
    }
    listed = [o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET, Prefix="topocast/c1/quarantine/")["Contents"]]
    assert len(listed) == 1 and re.fullmatch(
        r"topocast/c1/quarantine/ufm-01/\d{8}T\d{6}Z-ibnetdiscover\.out", listed[0]
    )
    head = s3.head_object(Bucket=BUCKET, Key=listed[0])
    assert "line 1" in head["Metadata"]["reason"] or ":1:" in head["Metadata"]["reason"], head["Metadata"]
    assert s3.get_object(Bucket=BUCKET, Key=listed[0])["Body"].read() == b"\x00garbage\n"
    # moved, not copied: the next discovery sees no bad upload, only the last good input
    third = read_good_uploads(uploads, ibnetdiscover.parse, s3_client=s3)
    assert third.quarantined == [] and len(third.texts) == 1
    assert ibnetdiscover.discover(texts=second.texts).graph.nodes, "discovery goes on with the good inputs"


def test_an_oversized_upload_is_quarantined_by_its_listed_size_before_reading(s3: Any, example: Path) -> None:
    from topocast.agents.collect import read_good_uploads

    uploads = f"s3://{BUCKET}/topocast/c1/uploads"
    s3.put_object(Bucket=BUCKET, Key="topocast/c1/uploads/ufm-09/ibnetdiscover.out", Body=b"x" * 5000)
    got = read_good_uploads(uploads, ibnetdiscover.parse, s3_client=s3, limit=1000)
    assert got.texts == {} and got.fallbacks == []
    assert got.quarantined == [
        (
            f"{uploads}/ufm-09/ibnetdiscover.out",
            f"{uploads}/ufm-09/ibnetdiscover.out: 5000 bytes exceeds the 1000 byte limit",
        )
    ]


def test_gcs_bad_upload_is_quarantined_with_its_reason_and_the_last_good_stands_in(gcs: Any, example: Path) -> None:
    """The same quarantine on Cloud Storage (the GCP discover function's ObjectStore adapter)."""
    from topocast.agents.collect import read_good_uploads

    uploads = f"gs://{BUCKET}/topocast/c1/uploads"
    good = example.read_bytes()
    collect_ibnetdiscover(example, uploads, host="ufm-01", gcs_client=gcs)
    assert read_good_uploads(uploads, ibnetdiscover.parse, gcs_client=gcs).quarantined == []
    gcs.bucket(BUCKET).blob("topocast/c1/uploads/ufm-01/ibnetdiscover.out").upload_from_string(b"\x00garbage\n")
    got = read_good_uploads(uploads, ibnetdiscover.parse, gcs_client=gcs)
    assert [uri for uri, _ in got.quarantined] == [f"{uploads}/ufm-01/ibnetdiscover.out"]
    assert got.texts == {f"gs://{BUCKET}/topocast/c1/last-good/ufm-01/ibnetdiscover.out": good}
    (moved,) = list(gcs.list_blobs(BUCKET, prefix="topocast/c1/quarantine/"))
    assert re.fullmatch(r"topocast/c1/quarantine/ufm-01/\d{8}T\d{6}Z-ibnetdiscover\.out", moved.name)
    assert moved.download_as_bytes() == b"\x00garbage\n"
    assert set(moved.metadata) == {"reason"} and moved.metadata["reason"] == got.quarantined[0][1]
    assert gcs.bucket(BUCKET).get_blob("topocast/c1/uploads/ufm-01/ibnetdiscover.out") is None


def test_a_few_bad_records_are_reported_before_upload_and_accepted_by_the_quarantine(
    s3: Any, example: Path, tmp_path: Path
) -> None:
    from topocast.agents.collect import read_good_uploads

    text = example.read_text().replace('"b05-p1-dgx-05-c14 HCA-5"', '"b05-p1-dgx-05-c14=x HCA-5"')
    line = next(i for i, ln in enumerate(text.splitlines(), 1) if ln.startswith("Ca") and "c14=x" in ln)
    damaged = tmp_path / "damaged.out"
    damaged.write_text(text)
    said: list[str] = []
    uploads = f"s3://{BUCKET}/topocast/c1/uploads"
    result = collect_ibnetdiscover(damaged, uploads, host="ufm-01", s3_client=s3, warn=said.append)
    assert result.uploaded
    assert said[0] == "1 record(s) will be set aside by discovery (the rest is used):"
    assert said[1].startswith(
        f"  record 'b05-p1-dgx-05-c14=x HCA-5': {damaged}:{line}: node name 'b05-p1-dgx-05-c14=x'"
    )
    got = read_good_uploads(uploads, ibnetdiscover.check_upload, s3_client=s3)
    assert got.quarantined == [] and list(got.texts) == [f"{uploads}/ufm-01/ibnetdiscover.out"]
    # an upload none of whose records is usable is still quarantined, with the reason
    s3.put_object(Bucket=BUCKET, Key="topocast/c1/uploads/ufm-02/ibnetdiscover.out", Body=b"hello\nworld\n")
    got = read_good_uploads(uploads, ibnetdiscover.check_upload, s3_client=s3)
    assert got.quarantined == [
        (
            f"{uploads}/ufm-02/ibnetdiscover.out",
            f"{uploads}/ufm-02/ibnetdiscover.out:1: unrecognized line 'hello' (not ibnetdiscover output, or a "
            "damaged copy)",
        )
    ]


def test_discover_prints_what_it_set_aside(example: Path, tmp_path: Path) -> None:
    from cli_runner import invoke

    damaged = tmp_path / "damaged.out"
    damaged.write_text(example.read_text().replace('"b05-p1-dgx-05-c14 HCA-5"', '"b05-p1-dgx-05-c14=x HCA-5"'))
    out = invoke(["discover", "--provider", "ibnetdiscover", "--input", str(damaged), "--cluster", "dgx"])
    assert out.exit_code == 0
    assert "topocast: warning: 1 set aside of 122 node(s): kept without (part of) their topology or left out\n" in (
        out.stderr
    )
    assert "\n  record 'b05-p1-dgx-05-c14=x HCA-5': " in out.stderr
    assert '"b05-p1-dgx-05-c14"' in out.stdout  # the host keeps its place through its other HCAs


def test_ca_and_port_choose_the_hca_ibnetdiscover_runs_through(s3: Any, example: Path, tmp_path: Path) -> None:
    # on a host with a compute and a storage HCA the default (first) HCA may see the storage fabric only
    argv_file = tmp_path / "argv.json"
    script = f"import json, sys; json.dump(sys.argv[1:], open({str(argv_file)!r}, 'w')); "
    script += f"sys.stdout.write(open({str(example)!r}).read())"
    fake = [sys.executable, "-c", script]
    collect_ibnetdiscover(None, f"s3://{BUCKET}", command=fake, host="gpu-003", ca="mlx5_0", ca_port=1)
    assert json.loads(argv_file.read_text()) == ["-C", "mlx5_0", "-P", "1"]


@pytest.mark.parametrize("host", ["../../c2/uploads/gpu-01", "..", ".", "a/b"])
@pytest.mark.parametrize("kind", ["ibnetdiscover", "nvlink"])
def test_an_upload_host_that_is_not_one_path_segment_is_refused_before_any_upload(
    s3: Any, example: Path, host: str, kind: str
) -> None:
    from cli_runner import invoke

    res = invoke(["collect", kind, "--upload", f"s3://{BUCKET}/topocast/c1/uploads", "--input", example,
                  "--host", host])  # fmt: skip
    assert res.exit_code == 2
    assert res.output.strip() == f"topocast: error: --host {host!r} is not one path segment (no '/', not '.' or '..')"
    assert "Contents" not in s3.list_objects_v2(Bucket=BUCKET)
    if {".", ".."} & set(host.split("/")):  # the same climb in --upload's prefix
        res = invoke(["collect", kind, "--upload", f"s3://{BUCKET}/topocast/c1/uploads/{host}", "--input", example,
                      "--host", "gpu-01"])  # fmt: skip
        assert res.exit_code == 2 and "a prefix part is empty, '.' or '..'" in res.output
        assert "Contents" not in s3.list_objects_v2(Bucket=BUCKET)


@pytest.mark.parametrize("host", ["..", "."])
def test_an_upload_under_a_dot_host_is_set_aside_not_followed(s3: Any, example: Path, host: str) -> None:
    from topocast.agents.collect import read_good_uploads

    uploads = f"s3://{BUCKET}/topocast/c1/uploads"
    collect_ibnetdiscover(example, uploads, host="ufm-01", s3_client=s3)
    # any writer to uploads/ (not topocast collect, which refuses the name) leaves an upload under '..'
    bad_key = f"topocast/c1/uploads/{host}/ibnetdiscover.out"
    s3.put_object(Bucket=BUCKET, Key=bad_key, Body=example.read_bytes())
    got = read_good_uploads(uploads, ibnetdiscover.parse, s3_client=s3)
    assert list(got.texts) == [f"{uploads}/ufm-01/ibnetdiscover.out"] and got.fallbacks == []
    assert [uri for uri, _ in got.quarantined] == [f"s3://{BUCKET}/{bad_key}"]
    assert "is not one path segment" in got.quarantined[0][1]
    keys = sorted(o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET)["Contents"])
    # moved aside under a name of its own; nothing written to a path built from the bad name
    assert bad_key not in keys
    assert [k for k in keys if k.startswith("topocast/c1/quarantine/")] == [
        next(k for k in keys if re.fullmatch(
            r"topocast/c1/quarantine/_bad-host-name/\d{8}T\d{6}Z-[0-9a-f]{16}-ibnetdiscover\.out", k))
    ]  # fmt: skip
    assert keys == sorted([
        "topocast/c1/uploads/ufm-01/ibnetdiscover.out", "topocast/c1/last-good/ufm-01/ibnetdiscover.out",
        *(k for k in keys if k.startswith("topocast/c1/quarantine/")),
    ])  # fmt: skip
