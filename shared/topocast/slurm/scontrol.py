"""``scontrol`` calls the topology tooling needs: ping, show topology, update, reconfigure.

They run against whatever controller ``SLURM_CONF`` (in ``env``) points at:
the live one for the install step, a scratch one for validation and tests.
scontrol's exit status is not enough on its own (``show topology`` exits 0
when it cannot reach the controller), so the output is checked too.

``scontrol`` is a path, or a command prefix such as ``["chroot", "/srv/sid",
"/usr/bin/scontrol"]`` for a Slurm installed in a chroot (the 26.05 tier).
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass

from topocast.errors import TopocastError
from topocast.model.hostlist import expand

#: a scontrol path, or a command prefix (``chroot ROOT /usr/bin/scontrol``)
Command = str | Sequence[str]


def argv(command: Command, *args: str) -> list[str]:
    """``command`` (a path or a prefix) followed by ``args``."""
    return [command, *args] if isinstance(command, str) else [*command, *args]


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


@dataclass(frozen=True)
class BlockInfo:
    """One base block as ``scontrol show topology`` shows it (``BlockName=b1 BlockIndex=0 Nodes=.. BlockSize=4``)."""

    index: int
    nodes: tuple[str, ...]
    size: int | None = None


def _fields(line: str, keys: str) -> dict[str, str]:
    return {m.group(1): m.group(2) for m in re.finditer(rf"({keys})=(.*?)(?=\s+\w+=|$)", line)}


def parse_show_blocks(text: str) -> dict[str, BlockInfo]:
    """Parse the ``BlockName=`` lines of ``scontrol show topology`` (aggregated blocks are skipped)."""
    out: dict[str, BlockInfo] = {}
    for raw in text.split("\n"):
        line = raw.strip()
        if not line.startswith("BlockName="):
            continue
        f = _fields(line, "BlockName|BlockIndex|Nodes|BlockSize")
        size = f.get("BlockSize", "")
        out[f["BlockName"]] = BlockInfo(
            index=int(f.get("BlockIndex", "0") or 0),
            nodes=tuple(expand(f["Nodes"])) if f.get("Nodes") else (),
            size=int(size) if size.isdigit() else None,
        )
    return out


def parse_show_topology(text: str) -> dict[str, SwitchInfo]:
    """Parse ``scontrol show topology`` output into ``{switch: SwitchInfo}``."""
    out: dict[str, SwitchInfo] = {}
    for raw in text.split("\n"):
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
    scontrol: Command, args: Sequence[str], env: dict[str, str] | None, timeout: float
) -> tuple[int, str, str]:
    try:
        cp = subprocess.run(
            argv(scontrol, *args), capture_output=True, text=True, env=env, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired:
        raise SlurmControllerError(f"scontrol {' '.join(args)} timed out after {timeout:g} s") from None
    except OSError as exc:
        raise SlurmControllerError(f"cannot run {scontrol}: {exc.strerror}") from None
    return cp.returncode, cp.stdout, cp.stderr


def ping(scontrol: Command = "scontrol", env: dict[str, str] | None = None, timeout: float = 15.0) -> bool:
    """True if ``scontrol ping`` reports the primary controller UP."""
    try:
        code, out, _ = run_scontrol(scontrol, ["ping"], env, timeout)
    except SlurmControllerError:
        return False
    return code == 0 and re.search(r"\bis UP\b", out) is not None


def show_topology_text(
    scontrol: Command = "scontrol", env: dict[str, str] | None = None, timeout: float = 15.0, name: str | None = None
) -> str:
    """Raw ``scontrol show topology [NAME]``; ``""`` when the controller has no topology.

    scontrol exits 0 even when it cannot reach the controller, so stderr decides.
    """
    args = ["show", "topology", *([name] if name else [])]
    code, out, err = run_scontrol(scontrol, args, env, timeout)
    if "No topology information available" in err:
        return ""
    if code != 0 or "error" in err.lower():
        what = f"scontrol show topology{' ' + name if name else ''}"
        raise SlurmControllerError(f"{what} failed: {err.strip() or f'exit status {code}'}")
    return out


def show_topology(
    scontrol: Command = "scontrol", env: dict[str, str] | None = None, timeout: float = 15.0, name: str | None = None
) -> dict[str, SwitchInfo]:
    """``scontrol show topology [NAME]`` switches parsed; ``{}`` when the controller has no (tree) topology."""
    return parse_show_topology(show_topology_text(scontrol, env, timeout, name))


def show_blocks(
    scontrol: Command = "scontrol", env: dict[str, str] | None = None, timeout: float = 15.0, name: str | None = None
) -> dict[str, BlockInfo]:
    """``scontrol show topology [NAME]`` base blocks parsed (topology/block)."""
    return parse_show_blocks(show_topology_text(scontrol, env, timeout, name))


def update_node_topology(
    nodes: str, topology: str, scontrol: Command = "scontrol", env: dict[str, str] | None = None, timeout: float = 30.0
) -> None:
    """``scontrol update NodeName=<hostlist> Topology=<spec>`` (Slurm >= 25.05); raises with scontrol's message."""
    code, out, err = run_scontrol(scontrol, ["update", f"NodeName={nodes}", f"Topology={topology}"], env, timeout)
    if code != 0:
        message = (err or out).strip() or f"exit status {code}"
        raise SlurmControllerError(f"scontrol update NodeName={nodes} Topology={topology} failed: {message}")


#: node state flags of a power-saving node, whose live ``Topology=`` does not survive its power-down (26.05.5)
POWER_SAVING_FLAGS = frozenset({"CLOUD", "POWERED_DOWN", "POWERING_DOWN", "POWER_DOWN"})


def power_saving_nodes(
    nodes: str, scontrol: Command = "scontrol", env: dict[str, str] | None = None, timeout: float = 30.0
) -> list[str]:
    """The nodes of hostlist ``nodes`` whose ``State=`` carries a power-saving flag (``IDLE+CLOUD+POWERED_DOWN``)."""
    code, out, err = run_scontrol(scontrol, ["-o", "show", "node", nodes], env, timeout)
    if code != 0:
        message = (err or out).strip() or f"exit status {code}"
        raise SlurmControllerError(f"scontrol show node {nodes} failed: {message}")
    found = []
    for line in out.splitlines():
        fields = _fields(line, r"\bNodeName|\bState")
        flags = set(re.split(r"[+*~#%$@^!-]", fields.get("State", "")))  # IDLE+CLOUD, IDLE~ (powered down)
        if fields.get("NodeName") and (flags & POWER_SAVING_FLAGS or "~" in fields.get("State", "")):
            found.append(fields["NodeName"])
    return found


def reconfigure(scontrol: Command = "scontrol", env: dict[str, str] | None = None, timeout: float = 30.0) -> None:
    """``scontrol reconfigure``; raises with scontrol's message if it fails."""
    code, out, err = run_scontrol(scontrol, ["reconfigure"], env, timeout)
    if code != 0:
        message = (err or out).strip() or f"exit status {code}"
        raise SlurmControllerError(f"scontrol reconfigure failed: {message}")
