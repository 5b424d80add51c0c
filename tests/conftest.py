"""Shared test fixtures and the location of the Topograph conformance data."""

from __future__ import annotations

import logging
import os
import random
from collections.abc import Iterator
from pathlib import Path

import pytest

#: real-slurmctld fixtures (slurm_controller, slurm_controller_factory) for any test module
pytest_plugins = ["slurm_fixtures"]
pytest_plugins += ["aws_fixtures"]  # moto_server / aws_env: moto server with the EC2 topology simulator
pytest_plugins += ["gcp_fixtures"]  # local_gcs / gcs_objects / fake_tasks / fake_compute: local GCP services
pytest_plugins += ["slurmrest_fixtures"]  # rest_cluster_factory: 26.05 slurmctld + slurmrestd with JWT auth

REPO = Path(__file__).resolve().parent.parent
# No test may ask the real instance metadata service (169.254.169.254 is no address of this machine): the
# CLI looks there for an AWS region when none is set; tests that want it run a fake IMDS and turn this off.
os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")
#: Topograph's test data stays outside the repo (../shared/conformance/topograph); tests read it in place.
CONFORMANCE = Path(os.environ.get("TOPOCAST_CONFORMANCE_DIR", REPO.parent / "shared" / "conformance" / "topograph"))


@pytest.fixture(scope="session")
def conformance_dir() -> Path:
    if not (CONFORMANCE / "INDEX.md").is_file():
        pytest.skip(f"Topograph conformance data not found at {CONFORMANCE} (set TOPOCAST_CONFORMANCE_DIR)")
    return CONFORMANCE


#: ``TOPOCAST_TEST_ORDER=random`` (or a seed) runs the files in a shuffled order and each file's tests in a
#: shuffled order, so a test that passes only after another one fails (CI's isolation pass, ``.ci/run``)
ORDER_VARIABLE = "TOPOCAST_TEST_ORDER"


def _order_seed() -> int | None:
    value = os.environ.get(ORDER_VARIABLE, "").strip()
    if not value:
        return None
    if value == "random":
        return random.SystemRandom().randrange(2**32)
    try:
        return int(value)
    except ValueError:
        raise pytest.UsageError(f"{ORDER_VARIABLE}={value!r}: expected 'random' or an integer seed") from None


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_SEED] = _order_seed()


_SEED = pytest.StashKey[int | None]()


def pytest_report_header(config: pytest.Config) -> str | None:
    seed = config.stash.get(_SEED, None)
    return None if seed is None else f"shuffled test order: {ORDER_VARIABLE}={seed} repeats it"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Shuffle by file, then within each file (a file's module fixtures are still set up once)."""
    seed = config.stash.get(_SEED, None)
    if seed is None:
        return
    rng = random.Random(seed)
    by_file: dict[str, list[pytest.Item]] = {}
    for item in items:
        by_file.setdefault(item.nodeid.split("::", 1)[0], []).append(item)
    files = list(by_file.values())
    rng.shuffle(files)
    for group in files:
        rng.shuffle(group)
    items[:] = [item for group in files for item in group]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> object:
    """Count passed tests of the real-Slurm tiers; remember a failed call for fixture teardown."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if report.when == "call":
        item.rep_call_failed = report.failed  # type: ignore[attr-defined]
        if report.passed:
            from slurm_fixtures import TIER_COUNTS

            for tier in TIER_COUNTS:
                if item.get_closest_marker(tier) is not None:
                    TIER_COUNTS[tier] += 1
    return None


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    from slurm_fixtures import TIER_COUNTS, current_slurm

    seed = terminalreporter.config.stash.get(_SEED, None)
    if seed is not None:
        terminalreporter.write_line(f"shuffled test order: {ORDER_VARIABLE}={seed} repeats it")

    from topocast.slurm.validate import format_version

    if not any(TIER_COUNTS.values()):
        return
    install, why = current_slurm()
    current = f"slurmctld {format_version(install.version())}" if install else f"skipped: {why}"
    terminalreporter.write_line(
        f"real Slurm: {TIER_COUNTS['slurm_current']} case(s) checked by the current controller ({current}), "
        f"{TIER_COUNTS['slurm']} by Debian 12's slurmctld 22.05"
    )


@pytest.fixture(autouse=True)
def _no_gcp_json_log_handlers_left_behind() -> Iterator[None]:
    """The GCP functions add stdout JSON handlers to topocast's loggers (one cloud per process in
    production); a test that ran them must not leave them behind for the next test's log capture."""
    yield
    import logging

    from topocast.gcp.jsonlog import LOGGERS

    for name in LOGGERS:
        logger = logging.getLogger(name)
        for handler in [h for h in logger.handlers if getattr(h, "_topocast_json", False)]:
            logger.removeHandler(handler)


@pytest.fixture(autouse=True)
def _no_log_handler_on_a_closed_stream() -> None:
    """A handler a test's code created on that test's captured stdout (Powertools' Logger binds
    ``sys.stdout`` when it is built) would print "--- Logging error ---" with a traceback into every later
    test that logs: before each test such a handler writes to the current ``sys.stdout`` instead."""
    import sys

    manager = logging.Logger.manager
    loggers = [logging.getLogger(), *(v for v in manager.loggerDict.values() if isinstance(v, logging.Logger))]
    for logger in loggers:
        for handler in logger.handlers:
            if isinstance(handler, logging.StreamHandler) and getattr(handler.stream, "closed", False):
                handler.stream = sys.stdout  # not setStream: it flushes the closed stream first
