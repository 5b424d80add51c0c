"""Reusable moto-server fixtures for AWS tests (registered in conftest.py via ``pytest_plugins``).

``moto_server`` (session) starts one ``ThreadedMotoServer`` on 127.0.0.1 with a
free port, with topocast's EC2 simulator installed (DescribeInstanceTopology,
fault injector). ``aws_env`` (per test) resets every moto backend with
``POST /moto-api/reset``, clears injected faults and call counters, and points
the standard AWS environment (``AWS_ENDPOINT_URL``, fake credentials, region)
at the server, so any boto3 client a test or the code under test creates talks
to moto.
"""

from __future__ import annotations

import logging
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

REGION = "us-east-1"


@dataclass(frozen=True)
class MotoServer:
    endpoint_url: str

    def reset(self) -> None:
        req = urllib.request.Request(f"{self.endpoint_url}/moto-api/reset", data=b"", method="POST")
        with urllib.request.urlopen(req, timeout=10) as resp:
            if resp.status != 200:
                raise RuntimeError(f"moto reset answered HTTP {resp.status}")


@pytest.fixture(scope="session")
def moto_server() -> Iterator[MotoServer]:
    pytest.importorskip("moto", reason="moto[server] is needed for AWS tests (pip install -e .[dev])")
    from moto.server import ThreadedMotoServer

    from topocast_sim import ec2 as ec2_sim

    ec2_sim.install()
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one log line per request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield MotoServer(f"http://{host}:{port}")
    finally:
        server.stop()


@pytest.fixture
def aws_env(moto_server: MotoServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A clean moto and an AWS environment pointing at it; yields the endpoint URL."""
    from topocast_sim import ec2 as ec2_sim

    moto_server.reset()
    ec2_sim.clear_faults()
    ec2_sim.reset_counts()
    for var in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN", "AWS_CONFIG_FILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_REGION", REGION)
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_server.endpoint_url)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/topocast-test-credentials")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    yield moto_server.endpoint_url
    ec2_sim.clear_faults()


def set_ec2_state(instance_id: str, name: str, code: int, region: str = "us-east-1") -> None:
    """Script an EC2 state moto never holds for long (``stopping``, ``pending``) in its in-process backend."""
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.ec2.models import ec2_backends

    inst = ec2_backends[DEFAULT_ACCOUNT_ID][region].get_instance(instance_id)
    inst._state.name, inst._state.code = name, code
