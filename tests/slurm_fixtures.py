"""Pytest fixtures that give a test a real, running scratch slurmctld.

Loaded for every test module by ``pytest_plugins`` in tests/conftest.py. Tests that
use these fixtures skip (with the reason) when slurmctld/scontrol are missing::

    def test_x(slurm_controller_factory):
        ctl = slurm_controller_factory(["n1", "n2"], "SwitchName=s Nodes=n[1-2]\\n")
        assert ctl.ping()

Each controller runs in its own directory under pytest's tmp dir (kept after
the run, so ``slurmctld.log`` / ``slurmctld.stderr`` can be read when a test
fails) and is stopped at teardown, even if the test failed.

The current-Slurm tier (``slurm_current`` marker): ``sid_slurm`` is the 26.05
Slurm in the Debian sid chroot that ``.ci/run`` builds at
``/var/cache/topocast/slurm-sid`` (``TOPOCAST_SLURM_SID`` overrides), and
``sid_controller_factory`` starts throwaway 26.05 controllers in it. Without the
folder (or when its build failed: ``slurm-sid.failed`` holds why) those tests skip
with the reason.
"""

from __future__ import annotations

import functools
import os
import random
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import pytest

from topocast.errors import TopocastError
from topocast.slurm.controller import SlurmController, SlurmInstall, argv, ensure_proc, find_binary

#: Nodes and 2-leaf tree of the ready-made ``slurm_controller``.
DEFAULT_NODES = [f"n{i}" for i in range(1, 9)]
DEFAULT_TOPOLOGY = "SwitchName=leaf1 Nodes=n[1-4]\nSwitchName=leaf2 Nodes=n[5-8]\nSwitchName=spine Switches=leaf[1-2]\n"

ControllerFactory = Callable[..., SlurmController]


def slurm_missing_reason() -> str | None:
    """Why real-Slurm tests cannot run here, or None if they can."""
    missing = [b for b in ("slurmctld", "scontrol") if find_binary(b) is None]
    if missing:
        return f"{' and '.join(missing)} not installed (apt-get install slurmctld slurm-client)"
    return None


requires_slurm = pytest.mark.skipif(slurm_missing_reason() is not None, reason=slurm_missing_reason() or "")


@pytest.fixture
def slurm_controller_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControllerFactory]:
    """``factory(nodes, topology=None, **SlurmController kwargs) -> started SlurmController``."""
    reason = slurm_missing_reason()
    if reason:
        pytest.skip(reason)
    started: list[SlurmController] = []

    def start(nodes: Iterable[str], topology: str | bytes | None = None, **kwargs: object) -> SlurmController:
        kwargs.setdefault("start_timeout", 10.0)
        ctl = SlurmController(
            nodes,
            topology=topology,
            workdir=tmp_path_factory.mktemp("slurmctld"),
            **kwargs,  # type: ignore[arg-type]
        )
        started.append(ctl)  # registered before start: a failed start is still cleaned up
        ctl.start()
        return ctl

    yield start
    for ctl in started:
        ctl.stop()


@pytest.fixture
def slurm_controller(slurm_controller_factory: ControllerFactory) -> SlurmController:
    """A running controller with nodes n[1-8] under leaf1/leaf2/spine."""
    return slurm_controller_factory(DEFAULT_NODES, DEFAULT_TOPOLOGY)


# ----- the current-Slurm tier (26.05 in a Debian sid chroot) ----------------------------------------

#: where .ci/run builds (and caches) the Debian sid folder holding slurmctld 26.05
SID_ROOT = Path(os.environ.get("TOPOCAST_SLURM_SID", "/var/cache/topocast/slurm-sid"))
#: why the build failed, written by .ci/run next to the cache (its text becomes the skip reason)
SID_FAILED = SID_ROOT.with_name(SID_ROOT.name + ".failed")


@functools.cache
def current_slurm() -> tuple[SlurmInstall | None, str]:
    """The 26.05 Slurm of the sid folder, or (None, why the current tier is skipped)."""
    if not SID_ROOT.is_dir():
        why = SID_FAILED.read_text().strip() if SID_FAILED.is_file() else "not built (run .ci/run)"
        return None, f"current Slurm (Debian sid chroot) missing at {SID_ROOT}: {why}"
    if os.geteuid() != 0:
        return None, "current Slurm runs in a chroot: the tests need root"
    try:
        install = SlurmInstall.find(SID_ROOT)
        ensure_proc(SID_ROOT)
    except TopocastError as exc:
        return None, f"current Slurm at {SID_ROOT} unusable: {exc}"
    version = install.version()
    if version is None or version < (25, 5):
        return None, f"slurmctld in {SID_ROOT} is {version}, not a current (>= 25.05) Slurm"
    return install, ""


@pytest.fixture(scope="session")
def sid_slurm() -> SlurmInstall:
    """The 26.05 SlurmInstall (chroot); skips the test with the reason when there is none."""
    install, why = current_slurm()
    if install is None:
        pytest.skip(why)
    return install


@pytest.fixture
def sid_controller_factory(sid_slurm: SlurmInstall, request: pytest.FixtureRequest) -> Iterator[ControllerFactory]:
    """Like ``slurm_controller_factory``, on 26.05: each controller in its own dir under ``ROOT/srv/``."""
    started: list[SlurmController] = []
    parent = SID_ROOT / "srv" / "topocast-tests"
    parent.mkdir(parents=True, exist_ok=True)

    def start(nodes: Iterable[str], topology: str | bytes | None = None, **kwargs: object) -> SlurmController:
        kwargs.setdefault("start_timeout", 20.0)
        workdir = Path(tempfile.mkdtemp(prefix=f"{request.node.name[:40]}-", dir=parent))
        ctl = SlurmController(nodes, topology=topology, workdir=workdir, install=sid_slurm, **kwargs)  # type: ignore[arg-type]
        started.append(ctl)
        ctl.start()
        return ctl

    yield start
    failed = getattr(request.node, "rep_call_failed", False)
    for ctl in started:
        ctl.stop()
        if not failed:
            shutil.rmtree(ctl.dir, ignore_errors=True)  # keep the logs of a failed test only


#: passed test counts per tier, printed by pytest_terminal_summary in tests/conftest.py
TIER_COUNTS: dict[str, int] = {"slurm_current": 0, "slurm": 0}


# ----- Slurm's own hostlist reader ------------------------------------------------------------------

#: what ``scontrol show hostnames`` needs: a slurm.conf to read, no running controller
_HOSTNAMES_CONF = "ClusterName=hostlists\nSlurmctldHost=localhost\nNodeName=n1 CPUs=1\nPartitionName=p Nodes=n1\n"


def slurm_hostnames(install: SlurmInstall, hostlist: str, workdir: Path) -> list[str]:
    """The names Slurm's own reader makes of ``hostlist`` (``scontrol show hostnames``), in its order.

    ``workdir`` holds the scratch slurm.conf: inside the chroot for an install in one.
    """
    conf = workdir / "slurm.conf"
    conf.write_text(_HOSTNAMES_CONF)
    cp = subprocess.run(
        [*argv(install.scontrol_command), "show", "hostnames", hostlist],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "SLURM_CONF": install.inside(conf)},
    )
    assert cp.returncode == 0, f"scontrol show hostnames {hostlist!r} failed: {cp.stderr.strip()}"
    return cp.stdout.split()


def mixed_padding_names(seed: int, count: int = 300) -> list[str]:
    """``count`` distinct names as clusters have them, padding mixed within one prefix on purpose.

    Numbers cluster around the width changes (9/10, 99/100, 999/1000) where padded and unpadded
    numbers of one value range meet; prefixes hold digits (``a1b``), some names carry a suffix
    after the number (``gpu07-ib``) and some have no number at all.
    """
    rng = random.Random(seed)
    names: set[str] = {"login", "head-a"}
    while len(names) < count:
        prefix = rng.choice(["n", "gpu", "gpu-", "a1b", "rack1-n", "r07n"])
        value = rng.choice([rng.randint(0, 15), rng.randint(90, 110), rng.randint(990, 1010), rng.randint(0, 99999)])
        suffix = rng.choice(["", "", "", "", "-ib"])
        names.add(f"{prefix}{str(value).zfill(rng.randint(1, 5))}{suffix}")
    return sorted(names)
