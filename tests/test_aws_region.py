"""The AWS region on a head node: --region, AWS_REGION, AWS_DEFAULT_REGION, the profile, then IMDSv2.

The instance metadata service is a fake on 127.0.0.1 speaking IMDSv2 (a PUT for a session token with a
TTL header, then GETs carrying the token; a GET without one is 401), reached through botocore's own IMDS
client by ``AWS_EC2_METADATA_SERVICE_ENDPOINT``."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import boto3
import pytest
from cli_runner import invoke

from topocast.aws.clients import resolve_region

TOKEN = "imds-session-token"


@pytest.fixture
def imds() -> Iterator[tuple[str, list[str]]]:
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def _answer(self, code: int, body: str) -> None:
            data = body.encode()
            self.send_response(code)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_PUT(self) -> None:
            seen.append(f"PUT {self.path}")
            if self.path == "/latest/api/token" and self.headers.get("X-aws-ec2-metadata-token-ttl-seconds"):
                self._answer(200, TOKEN)
            else:
                self._answer(400, "")

        def do_GET(self) -> None:
            seen.append(f"GET {self.path}")
            if self.headers.get("X-aws-ec2-metadata-token") != TOKEN:
                self._answer(401, "")
            elif self.path.rstrip("/") == "/latest/meta-data/placement/availability-zone":
                self._answer(200, "eu-west-3a")  # botocore's region fetcher reads the zone, less its letter
            else:
                self._answer(404, "")

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()  # shutdown() within 0.05 s
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/", seen
    finally:
        server.shutdown()


def no_region(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for var in ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))  # ProtectHome hides ~/.aws


def test_aws_region_alone_is_honoured(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    no_region(monkeypatch, tmp_path)
    monkeypatch.setenv("AWS_REGION", "ap-south-2")
    assert resolve_region() == "ap-south-2"
    assert resolve_region("us-west-2") == "us-west-2"  # --region wins


def test_an_ec2_head_node_takes_its_region_from_imdsv2(
    imds: tuple[str, list[str]], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    url, seen = imds
    no_region(monkeypatch, tmp_path)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "false")
    monkeypatch.setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", url)
    assert resolve_region() == "eu-west-3"
    assert seen[0] == "PUT /latest/api/token" and seen[1].startswith("GET /latest/meta-data/placement/")


def test_pull_reads_the_region_from_the_metadata_when_nothing_is_set(
    aws_env: str, imds: tuple[str, list[str]], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    url, _ = imds
    boto3.client("ssm", region_name="eu-west-3").put_parameter(
        Name="/topocast/c1/slurm/topology-tree.conf", Value="not an envelope", Type="String"
    )
    no_region(monkeypatch, tmp_path)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "false")
    monkeypatch.setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", url)
    result = invoke(["pull", "--source", "ssm:///topocast/c1/slurm/topology-tree.conf", "--dest",
                     tmp_path / "topology.conf", "--no-validate"])  # fmt: skip
    # it reached the parameter in eu-west-3 (another region has none) and refused what it holds
    assert "no AWS region" not in result.stderr and "ParameterNotFound" not in result.stderr, result.stderr
    assert result.exit_code != 0 and not (tmp_path / "topology.conf").exists()


def test_without_any_region_the_error_says_every_way_to_give_one(
    aws_env: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    no_region(monkeypatch, tmp_path)
    result = invoke(["discover", "--provider", "aws", "--filter", "tag:topocast:cluster=c1"])
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [
        "topocast: error: no AWS region: pass --region, set AWS_REGION (or AWS_DEFAULT_REGION), or run on EC2 "
        "with the instance metadata service reachable (IMDSv2)"
    ]
    assert invoke(["pull", "--region", "us-east-1", "--help"]).exit_code == 0


def test_the_region_error_of_pull_json_is_one_object(
    aws_env: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import json

    no_region(monkeypatch, tmp_path)
    result = invoke(["pull", "--source", "ssm:///topocast/c1/slurm/topology-tree.conf", "--dest",
                     tmp_path / "topology.conf", "--json"])  # fmt: skip
    (obj,) = [json.loads(line) for line in result.stdout.splitlines()]
    assert result.exit_code == 2 and obj["exit_code"] == 2 and "no AWS region" in obj["detail"]
