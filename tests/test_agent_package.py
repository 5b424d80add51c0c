"""``topocast package --agent``: the head-node agent as one file, built without a package index, that runs on a
Python without topocast or its dependencies installed, and the systemd units that run it."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from cli_runner import invoke

from topocast.cli.agent_package import agent_distributions

REPO = Path(__file__).resolve().parent.parent


def test_the_agent_carries_the_sdk_of_its_sources_and_nothing_the_functions_need() -> None:
    aws = agent_distributions("aws")
    assert {"boto3", "botocore", "pydantic", "pydantic-core", "msgspec", "pyyaml"} <= set(aws)
    # no module of topocast imports rich; powertools and the GCP SDKs are the functions' and the other cloud's
    assert not {"rich", "aws-lambda-powertools", "google-cloud-storage"} & set(aws)
    assert "google-cloud-storage" in agent_distributions("gcp") and "boto3" not in agent_distributions("gcp")


def test_an_unknown_cloud_is_one_line(tmp_path: Path) -> None:
    result = invoke(["package", "--agent", "--cloud", "azure", "--out", tmp_path])
    assert result.exit_code == 1 and result.stderr == "topocast: error: --cloud 'azure': expected aws, gcp or all\n"


@pytest.fixture(scope="module")
def agent(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    result = invoke(["package", "--agent", "--cloud", "aws", "--out", out])
    assert result.exit_code == 0, result.output
    return out / "topocast-agent.pyz"


def run_agent(agent: Path, cache: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # -S: no site-packages at all (not this venv's): only what the archive carries
    env = {"PATH": "/usr/bin:/bin", "TOPOCAST_AGENT_CACHE": str(cache), "HOME": str(cache)}
    return subprocess.run(
        [sys.executable, "-I", "-S", str(agent), *args], capture_output=True, text=True, env=env, check=False
    )


@pytest.mark.slow
def test_the_agent_pulls_without_any_installed_package(agent: Path, tmp_path: Path) -> None:
    source = tmp_path / "published.conf"
    source.write_text("SwitchName=s1 Nodes=n[1-2]\n")
    args = ["pull", "--source", f"file://{source}", "--dest", str(tmp_path / "topology.conf"), "--no-validate"]
    first, again = run_agent(agent, tmp_path / "cache", *args), run_agent(agent, tmp_path / "cache", *args)
    assert first.returncode == 0 and ": installed (sha256 " in first.stdout, first.stderr
    assert again.returncode == 0, again.stderr
    assert (tmp_path / "topology.conf").read_text() == "SwitchName=s1 Nodes=n[1-2]\n"
    # unpacked once, under the archive's build id
    build = json.loads(zipfile.ZipFile(agent).read("agent.json"))["build"]
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [build]


@pytest.mark.slow
def test_the_agent_is_one_file_the_same_each_build(agent: Path, tmp_path: Path) -> None:
    assert agent.read_bytes().startswith(f"#!/usr/bin/env python{sys.version_info[0]}.{sys.version_info[1]}\n".encode())
    again = invoke(["package", "--agent", "--cloud", "aws", "--out", tmp_path])
    assert again.exit_code == 0
    same = hashlib.sha256((tmp_path / "topocast-agent.pyz").read_bytes()).hexdigest()
    assert same == hashlib.sha256(agent.read_bytes()).hexdigest()
    names = zipfile.ZipFile(agent).namelist()
    assert "lib/botocore/data/ssm/2014-11-06/service-2.json.gz" in names
    assert not [n for n in names if n.startswith("lib/botocore/data/sagemaker/")]  # 440 unused API models left out


@pytest.mark.slow
def test_an_agent_for_another_python_says_which_in_one_line(agent: Path, tmp_path: Path) -> None:
    other = tmp_path / "other.pyz"
    with zipfile.ZipFile(agent) as src, zipfile.ZipFile(other, "w") as dst:
        for item in src.infolist():
            data = src.read(item)
            if item.filename == "agent.json":
                data = json.dumps({**json.loads(data), "python": "3.99"}).encode()
            dst.writestr(item, data)
    result = run_agent(other, tmp_path / "cache", "--version")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.startswith("topocast: error: ") and result.stderr.count("\n") == 1
    assert "built for Python 3.99" in result.stderr


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
@pytest.mark.parametrize("unit", ["slurm/topocast-pull.service", "slurm/topocast-pull-watch.service",
                                  "onprem/topocast-collect.service"])  # fmt: skip
def test_the_units_verify_with_the_agent_as_their_binary(agent: Path, tmp_path: Path, unit: str) -> None:
    path = REPO / "infra" / unit
    unit = path.name
    text = path.read_text().replace("/opt/topocast/bin/topocast", str(agent))
    assert "CacheDirectory=topocast-agent" in text  # ProtectSystem=strict: the agent's only place to unpack
    (tmp_path / unit).write_text(text)
    timer = path.with_suffix(".timer")
    if timer.exists():
        shutil.copy(timer, tmp_path / timer.name)
    result = subprocess.run(
        ["systemd-analyze", "verify", str(tmp_path / unit)], capture_output=True, text=True, check=False
    )
    problems = [line for line in result.stderr.splitlines() if unit in line or "topocast" in line]
    assert result.returncode == 0 and problems == [], result.stderr
