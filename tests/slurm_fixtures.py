"""Pytest fixtures that give a test a real, running scratch slurmctld.

Loaded for every test module by ``pytest_plugins`` in tests/conftest.py. Tests that
use these fixtures skip (with the reason) when slurmctld/scontrol are missing::

    def test_x(slurm_controller_factory):
        ctl = slurm_controller_factory(["n1", "n2"], "SwitchName=s Nodes=n[1-2]\\n")
        assert ctl.ping()

Each controller runs in its own directory under pytest's tmp dir (kept after
the run, so ``slurmctld.log`` / ``slurmctld.stderr`` can be read when a test
fails) and is stopped at teardown, even if the test failed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

import pytest

from topocast.slurm.controller import SlurmController, find_binary

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
