"""``topocast collect nvlink``: per-host NVLink records uploaded to S3 (moto server) like ibnetdiscover's,
unchanged records upload nothing, and a bad record is quarantined when discovery reads the bucket."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("azure.mgmt.compute", reason="the 'azure' extra is not installed")

from cli_runner import invoke
from test_azure_provider import IBSTAT, UUID, arm, smi  # noqa: F401 (arm: the fake ARM fixture)

from topocast.agents.collect import CollectError
from topocast.agents.collect_nvlink import collect_nvlink

BUCKET = "fabric-uploads"
PREFIX = f"s3://{BUCKET}/topocast/hpc/uploads"


@pytest.fixture
def s3(aws_env: str) -> Any:
    import boto3

    client = boto3.client("s3")
    client.create_bucket(Bucket=BUCKET)
    client.put_bucket_versioning(Bucket=BUCKET, VersioningConfiguration={"Status": "Enabled"})
    return client


def versions(s3: Any, key: str) -> int:
    return len(s3.list_object_versions(Bucket=BUCKET, Prefix=key).get("Versions", []))


def files(tmp_path: Path, n: int, *cliques: int) -> tuple[Path, Path]:
    smi_file, ib_file = tmp_path / f"smi-{n}.txt", tmp_path / f"ibstat-{n}.txt"
    smi_file.write_text(smi(*cliques))
    ib_file.write_text(IBSTAT.format(n=n))
    return smi_file, ib_file


def test_upload_then_skip_when_unchanged(s3: Any, tmp_path: Path) -> None:
    smi_file, ib_file = files(tmp_path, 1, 1, 1)
    first = collect_nvlink(smi_file, PREFIX, ibstat_file=ib_file, host="gpu-001")
    key = "topocast/hpc/uploads/gpu-001/nvlink.json"
    assert (first.uri, first.uploaded) == (f"s3://{BUCKET}/{key}", True)
    body = json.loads(s3.get_object(Bucket=BUCKET, Key=key)["Body"].read())
    assert body["host"] == "gpu-001" and body["port_guids"] == ["0x155dfffd340001"]
    assert {(g["cluster_uuid"], g["clique_id"]) for g in body["gpus"]} == {(UUID, "1")}
    assert not collect_nvlink(smi_file, PREFIX, ibstat_file=ib_file, host="gpu-001").uploaded
    smi_file.write_text(smi(2, 2))
    assert collect_nvlink(smi_file, PREFIX, ibstat_file=ib_file, host="gpu-001").uploaded
    assert versions(s3, key) == 2


def test_output_that_is_not_nvidia_smi_is_not_uploaded(s3: Any, tmp_path: Path) -> None:
    bad = tmp_path / "smi.txt"
    bad.write_text("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n")
    with pytest.raises(CollectError, match=r"^not uploading: .*no 'GPU <bus id>' section"):
        collect_nvlink(bad, PREFIX, ibstat_command=None, host="gpu-001")
    res = invoke(["collect", "nvlink", "--upload", PREFIX, "--input", bad, "--host", "gpu-001"])
    assert res.exit_code == 1 and "Traceback" not in res.output


def test_cli_collect_then_discover_quarantines_a_bad_record(s3: Any, tmp_path: Path, arm: Any) -> None:  # noqa: F811 (the imported fixture)
    for i in range(8):
        smi_file, ib_file = files(tmp_path, i, 1 if i < 4 else 2, 1 if i < 4 else 2)
        res = invoke(
            [
                "collect",
                "nvlink",
                "--upload",
                PREFIX,
                "--input",
                smi_file,
                "--ibstat",
                ib_file,
                "--host",
                f"gpu-{i:03d}",
            ]
        )
        assert res.exit_code == 0 and res.stdout.startswith(f"{PREFIX}/gpu-{i:03d}/nvlink.json: uploaded"), res.output
    s3.put_object(Bucket=BUCKET, Key="topocast/hpc/uploads/cpu-000/nvlink.json", Body=b"garbage")
    res = invoke(
        [
            "discover",
            "--provider",
            "azure",
            "--cluster",
            "hpc",
            "--option",
            "subscription_id=sub-1",
            "--option",
            "resource_group=rg-hpc",
            "--option",
            f"endpoint={arm.url}",
            "--option",
            f"uploads={PREFIX}",
        ],
        {"AZURE_ACCESS_TOKEN": "fake-token"},
    )
    assert res.exit_code == 0, res.output
    assert f"{PREFIX}/cpu-000/nvlink.json: quarantined" in res.stderr
    graph = {n["name"]: n for n in json.loads(res.stdout)["nodes"]}
    assert graph["gpu-000"]["accelerator"] == f"{UUID}.1" and graph["gpu-005"]["accelerator"] == f"{UUID}.2"
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET, Prefix="topocast/hpc/")["Contents"]]
    assert any(k.startswith("topocast/hpc/quarantine/cpu-000/") and k.endswith("-nvlink.json") for k in keys)
    assert "topocast/hpc/last-good/gpu-000/nvlink.json" in keys
    assert "topocast/hpc/uploads/cpu-000/nvlink.json" not in keys
