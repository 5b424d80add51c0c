"""A machine that is not set up (no region, no credentials) or a wrong input file is one line, exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_runner import invoke

NO_REGION = (
    "topocast: error: no AWS region: pass --region, set AWS_REGION (or AWS_DEFAULT_REGION), or run on EC2 with the "
    "instance metadata service reachable (IMDSv2)\n"
)
NO_GOOGLE = (
    "topocast: error: no Google credentials: run 'gcloud auth application-default login' or set "
    "GOOGLE_APPLICATION_CREDENTIALS to a readable key file\n"
)


@pytest.fixture
def bare_machine(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE", "AWS_CONFIG_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "no-key.json"))
    (tmp_path / "empty").write_bytes(b"")
    (tmp_path / "bin").write_bytes(b"\xd3\x00\xff binary")
    (tmp_path / "d").mkdir()
    return tmp_path


@pytest.mark.parametrize(
    ("args", "stderr"),
    [
        (["discover", "--provider", "aws"], NO_REGION),
        (
            ["pull", "--source", "ssm:///topocast/c1/slurm/topology-tree.conf", "--dest", "{d}/d/topology.conf"],
            NO_REGION,
        ),
        (["diff", "gs://b/x.json", "{d}/empty"], NO_GOOGLE),
        (
            ["discover", "--provider", "k8s-labels", "--kubeconfig", "{d}/empty"],
            "topocast: error: cannot load Kubernetes kubeconfig configuration: the file is not a kubeconfig mapping\n",
        ),
        (
            ["discover", "--provider", "k8s-labels", "--kubeconfig", "{d}/bin"],
            "topocast: error: cannot load Kubernetes kubeconfig configuration: the file is not UTF-8 text\n",
        ),
        (
            ["discover", "--provider", "netq", "--url", "http://127.0.0.1:9", "--credentials", "{d}/bin"],
            "topocast: error: {d}/bin: the credentials file is not UTF-8 text\n",
        ),
    ],
)
def test_one_line_and_exit_2(bare_machine: Path, args: list[str], stderr: str) -> None:
    out = invoke([a.format(d=bare_machine) for a in args])
    assert (out.exit_code, out.stderr) == (2, stderr.format(d=bare_machine))
