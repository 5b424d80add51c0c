"""Shared test fixtures and the location of the Topograph conformance data."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

#: real-slurmctld fixtures (slurm_controller, slurm_controller_factory) for any test module
pytest_plugins = ["slurm_fixtures"]
pytest_plugins += ["aws_fixtures"]  # moto_server / aws_env: moto server with the EC2 topology simulator
pytest_plugins += ["gcp_fixtures"]  # local_gcs / gcs_objects / fake_tasks / fake_compute: local GCP services

REPO = Path(__file__).resolve().parent.parent
#: Topograph's test data stays outside the repo (../shared/conformance/topograph); tests read it in place.
CONFORMANCE = Path(os.environ.get("TOPOCAST_CONFORMANCE_DIR", REPO.parent / "shared" / "conformance" / "topograph"))


@pytest.fixture(scope="session")
def conformance_dir() -> Path:
    if not (CONFORMANCE / "INDEX.md").is_file():
        pytest.skip(f"Topograph conformance data not found at {CONFORMANCE} (set TOPOCAST_CONFORMANCE_DIR)")
    return CONFORMANCE
