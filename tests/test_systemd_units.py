"""The systemd units we ship: they verify, and every flag they pass exists in the CLI."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from cli_runner import invoke

INFRA = Path(__file__).resolve().parent.parent / "infra"
UNITS = [
    (INFRA / "onprem", "topocast-collect", ["collect", "ibnetdiscover"]),
    (INFRA / "slurm", "topocast-pull", ["pull"]),
    (INFRA / "slurm", "topocast-pull-watch", ["pull"]),  # a long-running service, no timer
    (INFRA / "slurm", "topocast-health", ["health", "apply"]),
]


def exec_start(service: str) -> str:
    text = service.replace("\\\n", " ")
    return re.search(r"^ExecStart=(.*)$", text, re.M).group(1)  # type: ignore[union-attr]


@pytest.mark.parametrize(("folder", "unit", "command"), UNITS, ids=[u[1] for u in UNITS])
def test_unit_flags_exist_in_the_cli(folder: Path, unit: str, command: list[str]) -> None:
    line = exec_start((folder / f"{unit}.service").read_text())
    assert line.split()[1 : 1 + len(command)] == command
    help_text = invoke([*command, "--help"], env={"COLUMNS": "200"}).output
    for flag in re.findall(r"(--[a-z][a-z-]+)", line):
        assert flag in help_text, f"{unit}.service passes {flag}, which `topocast {' '.join(command)}` lacks"


@pytest.mark.parametrize(("folder", "unit", "command"), UNITS, ids=[u[1] for u in UNITS])
def test_units_verify(folder: Path, unit: str, command: list[str], tmp_path: Path) -> None:
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze not installed")
    # verify the units as written, with the one thing a test machine lacks (the installed binary) stubbed
    service = (folder / f"{unit}.service").read_text().replace("/opt/topocast/bin/topocast", "/bin/true")
    (tmp_path / f"{unit}.service").write_text(service)
    timer = folder / f"{unit}.timer"
    if timer.exists():
        (tmp_path / timer.name).write_text(timer.read_text())
    proc = subprocess.run(
        ["systemd-analyze", "verify", f"{unit}.service", *([timer.name] if timer.exists() else [])],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr


def unit_settings(text: str) -> dict[str, list[str]]:
    settings: dict[str, list[str]] = {}
    for line in text.replace("\\\n", " ").splitlines():
        if "=" in line and not line.startswith(("#", "[")):
            key, _, value = line.partition("=")
            settings.setdefault(key.strip(), []).append(value.strip())
    return settings


@pytest.mark.parametrize("unit", ["topocast-pull", "topocast-pull-watch"])
def test_pull_unit_confines_the_root_agent(unit: str) -> None:
    s = unit_settings((INFRA / "slurm" / f"{unit}.service").read_text())
    # the only shared path root may write is the Slurm config directory: no /tmp, no /var/lib (StateDirectory)
    assert s["ReadWritePaths"] == ["/etc/slurm"]
    assert s["ProtectSystem"] == ["strict"] and s["PrivateTmp"] == ["true"] and s["StateDirectory"] == ["topocast"]
    assert s["MemoryMax"] == ["512M"], "a runaway input must hit a memory cap, not the head node"
    assert "--state-file /var/lib/topocast/" in exec_start((INFRA / "slurm" / f"{unit}.service").read_text())


def test_pull_unit_logs_by_priority_prefix() -> None:
    """The agent's <N> prefixes become journal priorities only with SyslogLevelPrefix (the default, kept explicit)."""
    s = unit_settings((INFRA / "slurm" / "topocast-pull.service").read_text())
    assert s["SyslogLevelPrefix"] == ["true"] and s["SyslogIdentifier"] == ["topocast-pull"]
    assert "--verbose" not in exec_start((INFRA / "slurm" / "topocast-pull.service").read_text()), (
        "unchanged stays out of the journal"
    )
    assert "--json" not in exec_start((INFRA / "slurm" / "topocast-pull.service").read_text()), "the line, not JSON"
