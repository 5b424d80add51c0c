"""``rest_cluster_factory``: a real 26.05 slurmctld + slurmrestd (and slurmd) with JWT auth in the
Debian sid chroot (:class:`topocast_sim.slurmrest.RestCluster`). Skips with the reason when
slurmrestd, slurmd or the JWT plugin is not in the chroot (``$SID.rest-failed`` from .ci/run).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import pytest
from slurm_fixtures import SID_ROOT

from topocast.slurm.controller import SlurmInstall
from topocast_sim.slurmrest import RestCluster

__all__ = ["NODES", "TREE", "TREE_MOVED", "RestCluster", "RestFactory", "rest_cluster_factory", "rest_missing_reason"]

#: the 12-node tree the REST tests start from, and the same with n1 -> leaf3 and n9 -> leaf1 (two destinations,
#: two bulk POSTs, leaf1's first)
NODES = [f"n{i}" for i in range(1, 13)]
TREE = (
    "SwitchName=root Switches=spine[1-2]\n"
    "SwitchName=spine1 Switches=leaf[1-2]\n"
    "SwitchName=spine2 Switches=leaf3\n"
    "SwitchName=leaf1 Nodes=n[1-4]\n"
    "SwitchName=leaf2 Nodes=n[5-8]\n"
    "SwitchName=leaf3 Nodes=n[9-12]\n"
)
TREE_MOVED = TREE.replace("leaf1 Nodes=n[1-4]", "leaf1 Nodes=n[2-4,9]").replace(
    "leaf3 Nodes=n[9-12]", "leaf3 Nodes=n[1,10-12]"
)

RestFactory = Callable[..., "RestCluster"]
JWT_PLUGIN = "usr/lib/x86_64-linux-gnu/slurm-wlm/auth_jwt.so"


def rest_missing_reason(root: Path = SID_ROOT) -> str | None:
    """Why slurmrestd tests cannot run in ``root`` (None: they can)."""
    # lexists: slurmd is an alternatives link (/etc/alternatives/slurmd) that only resolves inside the chroot
    missing = [p for p in ("usr/sbin/slurmrestd", "usr/sbin/slurmd", JWT_PLUGIN) if not os.path.lexists(root / p)]
    failed = root.with_name(root.name + ".rest-failed")  # written by .ci/run when the install failed
    if missing and failed.is_file():
        return f"{root} lacks {', '.join(missing)}: {failed.read_text().strip()}"
    if missing:
        return (
            f"{root} lacks {', '.join(missing)} "
            "(chroot it: apt-get install -y slurmrestd slurmd slurm-wlm-jwt-plugin; .ci/run does)"
        )
    if shutil.which("unshare") is None:
        return "unshare (util-linux) is not installed: controllers with auth/slurm need a mount namespace each"
    return None


@pytest.fixture
def rest_cluster_factory(sid_slurm: SlurmInstall, request: pytest.FixtureRequest) -> Iterator[RestFactory]:
    """``factory(nodes, topology, **kw) -> RestCluster`` started, with slurmrestd up (``.url``)."""
    reason = rest_missing_reason()
    if reason:
        pytest.skip(reason)
    started: list[RestCluster] = []
    parent = SID_ROOT / "srv" / "topocast-tests"
    parent.mkdir(parents=True, exist_ok=True)

    def start(nodes: Iterable[str], topology: str, *, rest: bool = True, **kwargs: object) -> RestCluster:
        kwargs.setdefault("start_timeout", 30.0)
        workdir = Path(tempfile.mkdtemp(prefix=f"rest-{request.node.name[:36]}-", dir=parent))
        cluster = RestCluster(nodes, install=sid_slurm, workdir=workdir, topology=topology, **kwargs)
        started.append(cluster)
        cluster.start()
        if rest:
            cluster.url = cluster.start_rest()
        return cluster

    yield start
    failed = getattr(request.node, "rep_call_failed", False)
    for cluster in started:
        cluster.stop()
        if not failed:
            shutil.rmtree(cluster.dir, ignore_errors=True)
