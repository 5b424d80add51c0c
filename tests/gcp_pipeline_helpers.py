"""Helpers for the GCP pipeline tests (test_gcp_pipeline.py, test_gcp_faults.py)."""

from __future__ import annotations

from typing import Any

import pytest

from topocast.agents.pull import fetch
from topocast.gcp import handlers
from topocast_sim.gce import generate_cluster
from topocast_sim.gcp_pipeline import LocalGcpPipeline

LABEL = ("topocast-cluster", "c1")


def cluster(n: int, **kw: Any) -> Any:
    return generate_cluster(n, label=LABEL, hosts_per_subblock=8, subblocks_per_block=4, **kw)


@pytest.fixture(autouse=True)
def fresh_stats() -> None:
    handlers.STATS.clear()


def published(pl: LocalGcpPipeline) -> Any:
    from topocast.gcp.clients import storage_client

    source = f"gcs://{pl.bucket}/topocast/c1/slurm/topology-tree.conf"
    return fetch(source, gcs=storage_client("t", pl.gcs.url))


def names(pl: LocalGcpPipeline) -> list[str]:
    stored = pl.runtime().graphs.latest()
    return stored.graph.node_names() if stored else []
