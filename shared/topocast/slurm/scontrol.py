"""``scontrol`` calls the topology tooling needs: ping, show topology, reconfigure.

They run against whatever controller ``SLURM_CONF`` (in ``env``) points at:
the live one for the install step, a scratch one for validation and tests.
scontrol's exit status is not enough on its own (``show topology`` exits 0
when it cannot reach the controller), so the output is checked too.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass

from topocast.errors import TopocastError
from topocast.hostlist import expand


class SlurmControllerError(TopocastError):
    """slurmctld or scontrol failed; ``log`` holds the controller's relevant log lines."""

    def __init__(self, message: str, log: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.log = list(log)


@dataclass(frozen=True)
class SwitchInfo:
    """One switch as ``scontrol show topology`` reports it (hostlists expanded)."""

    level: int
    #: every node below the switch (Slurm lists descendants, not only direct children)
    nodes: tuple[str, ...]
    switches: tuple[str, ...]
    link_speed: int | None = None


def parse_show_topology(text: str) -> dict[str, SwitchInfo]:
    """Parse ``scontrol show topology`` output into ``{switch: SwitchInfo}``."""
    out: dict[str, SwitchInfo] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line.startswith("SwitchName="):
            continue
        fields: dict[str, str] = {}
        # values never contain spaces except a quoted SwitchName; split on the known keys instead
        for m in re.finditer(r"(SwitchName|Level|LinkSpeed|Nodes|Switches)=(.*?)(?=\s+\w+=|$)", line):
            fields[m.group(1)] = m.group(2)
        name = fields["SwitchName"]
        speed = fields.get("LinkSpeed")
        out[name] = SwitchInfo(
            level=int(fields.get("Level", "0")),
            nodes=tuple(expand(fields["Nodes"])) if fields.get("Nodes") else (),
            switches=tuple(expand(fields["Switches"])) if fields.get("Switches") else (),
            link_speed=int(speed) if speed and speed.isdigit() else None,
        )
    return out


def run_scontrol(
    scontrol: str, args: Sequence[str], env: dict[str, str] | None, timeout: float
) -> tuple[int, str, str]:
    try:
        cp = subprocess.run([scontrol, *args], capture_output=True, text=True, env=env, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise SlurmControllerError(f"scontrol {' '.join(args)} timed out after {timeout:g} s") from None
    except OSError as exc:
        raise SlurmControllerError(f"cannot run {scontrol}: {exc.strerror}") from None
    return cp.returncode, cp.stdout, cp.stderr


def ping(scontrol: str = "scontrol", env: dict[str, str] | None = None, timeout: float = 15.0) -> bool:
    """True if ``scontrol ping`` reports the primary controller UP."""
    try:
        code, out, _ = run_scontrol(scontrol, ["ping"], env, timeout)
    except SlurmControllerError:
        return False
    return code == 0 and re.search(r"\bis UP\b", out) is not None


def show_topology(
    scontrol: str = "scontrol", env: dict[str, str] | None = None, timeout: float = 15.0
) -> dict[str, SwitchInfo]:
    """``scontrol show topology`` parsed; ``{}`` when the controller has no topology.

    scontrol exits 0 even when it cannot reach the controller, so stderr decides.
    """
    code, out, err = run_scontrol(scontrol, ["show", "topology"], env, timeout)
    if "No topology information available" in err:
        return {}
    if code != 0 or "error" in err.lower():
        raise SlurmControllerError(f"scontrol show topology failed: {err.strip() or f'exit status {code}'}")
    return parse_show_topology(out)


def reconfigure(scontrol: str = "scontrol", env: dict[str, str] | None = None, timeout: float = 30.0) -> None:
    """``scontrol reconfigure``; raises with scontrol's message if it fails."""
    code, out, err = run_scontrol(scontrol, ["reconfigure"], env, timeout)
    if code != 0:
        message = (err or out).strip() or f"exit status {code}"
        raise SlurmControllerError(f"scontrol reconfigure failed: {message}")
