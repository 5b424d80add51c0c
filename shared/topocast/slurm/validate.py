"""Check a topology.conf before it ships: structure first, then a real (throwaway) slurmctld.

``topocast validate-slurm --topology FILE [--slurm-conf FILE]`` calls
:func:`validate_topology_file`; the install step calls :func:`validate_topology_text`.

Two independent opinions are combined. Our own parser (:mod:`topofile`)
catches what slurmctld refuses *and* what it accepts but should never ship;
a scratch slurmctld started with the candidate file (free port, scratch state
dir, nodes at 127.0.0.1) gives the ground truth for this Slurm version. Its
``fatal:``/``error:`` lines are kept as evidence next to our messages.
A controller failure that has nothing to do with the file (cannot start at
all) raises :class:`SlurmControllerError` rather than calling the file bad.
"""

from __future__ import annotations

import functools
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from topocast.errors import TopocastError
from topocast.slurm.conffile import slurm_conf_nodes
from topocast.slurm.controller import SlurmController, SlurmControllerError, find_binary
from topocast.slurm.topofile import TopologyFile, check_structure, parse_topology

_TOPOLOGY_WORDS = re.compile(r"topology|switch", re.IGNORECASE)
_PLACEHOLDER = "topocast-placeholder-node"


@dataclass
class ValidationResult:
    ok: bool
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    summary: str = ""
    #: "tree", "block" or "empty"
    kind: str = "empty"
    #: a scratch slurmctld read the file (False: structural checks only)
    controller_checked: bool = False
    #: slurmctld's fatal/error/warning lines for this file
    log: list[str] = field(default_factory=list)
    #: switch (tree) or block names the file defines, in file order
    names: list[str] = field(default_factory=list)


@functools.cache
def slurmctld_version(binary: str) -> tuple[int, int] | None:
    """(major, minor) of ``slurmctld -V`` (``slurm-wlm 22.05.8`` -> (22, 5)), None if unknown."""
    try:
        out = subprocess.run([binary, "-V"], capture_output=True, text=True, timeout=10, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r"(\d+)\.(\d+)", out)
    return (int(m.group(1)), int(m.group(2))) if m else None


def validate_topology_file(
    path: Path, slurm_conf: Path | None = None, *, controller: bool | None = None, timeout: float = 10.0
) -> ValidationResult:
    """Validate a topology.conf on disk. See :func:`validate_topology_text`."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise TopocastError(f"{path}: cannot read topology file ({exc.strerror})") from None
    return validate_topology_text(data, slurm_conf, source=str(path), controller=controller, timeout=timeout)


def validate_topology_text(
    content: str | bytes,
    slurm_conf: Path | None = None,
    *,
    source: str = "topology.conf",
    controller: bool | None = None,
    timeout: float = 10.0,
) -> ValidationResult:
    """Validate topology.conf content.

    ``slurm_conf``: the operator's slurm.conf; its NodeName lines are the nodes
    the file must cover. Without it the nodes named in the file are used.
    ``controller``: True = require a slurmctld run, False = structure only,
    None = run one if slurmctld is installed (warn otherwise).
    """
    if isinstance(content, bytes):
        try:
            text = content.decode("utf-8")
        except UnicodeDecodeError as exc:
            return ValidationResult(ok=False, errors=[f"{source}: not UTF-8 text ({exc})"], summary="unreadable")
    else:
        text = content
    defined = None
    if slurm_conf is not None:
        defined = slurm_conf_nodes(slurm_conf)
        if not defined:
            raise TopocastError(f"{slurm_conf}: no NodeName= lines found (Include files are not followed)")
    topo = parse_topology(text, source)
    check_structure(topo, defined)
    result = ValidationResult(
        ok=False,
        errors=list(topo.errors),
        warnings=list(topo.warnings),
        summary=topo.summary(),
        kind=topo.kind,
        names=list(topo.switches if topo.kind == "tree" else topo.blocks),
    )
    nodes = defined if defined is not None else topo.node_names()
    _controller_check(result, topo, text, nodes, controller, timeout)
    result.ok = not result.errors
    return result


def _controller_check(
    result: ValidationResult,
    topo: TopologyFile,
    text: str,
    nodes: list[str],
    want: bool | None,
    timeout: float,
) -> None:
    if want is False:
        return
    binary = find_binary("slurmctld")
    if binary is None:
        if want:
            raise TopocastError("slurmctld is not installed (apt-get install slurmctld); cannot run the check")
        result.warnings.append("slurmctld not found: checked the file's structure only")
        return
    if topo.kind == "block":
        version = slurmctld_version(binary)
        here = f"{version[0]}.{version[1]:02d}" if version else "unknown version"
        result.warnings.append(
            f"slurmctld here is {here}; topology/block needs Slurm >= 23.02, so only the structure of "
            f"{topo.source} was checked"
        )
        return
    if topo.kind == "empty":
        return  # slurmctld would start and log "No switches configured"; the structural error says more
    # slurmctld needs one node to start; a file that names none still deserves slurmctld's opinion
    ctl_nodes = nodes or [_PLACEHOLDER]
    ctl = SlurmController(ctl_nodes, topology=text, start_timeout=timeout, cluster="topocast-check")
    # slurmctld names its scratch copy of the file; point the reader at the real one instead
    scratch = str(ctl.topology_path)
    try:
        with ctl:
            log = [line.replace(scratch, topo.source) for line in ctl.log_lines() if _PLACEHOLDER not in line]
            shown = ctl.show_topology()
    except SlurmControllerError as exc:
        exc.log = [line.replace(scratch, topo.source) for line in exc.log]
        _controller_refused(result, topo, exc)
        return
    finally:
        ctl.stop()
    result.controller_checked = True
    result.log = log
    # Lines slurmctld logs for an accepted file are evidence: with the errors when we reject it,
    # else as warnings (it may know about problems we do not check).
    target = result.errors if result.errors else result.warnings
    target.extend(f"slurmctld log: {line}" for line in log)
    result.summary += f"; slurmctld started with it and shows {len(shown)} switches"


def _controller_refused(result: ValidationResult, topo: TopologyFile, exc: SlurmControllerError) -> None:
    fatal = [line for line in exc.log if "fatal:" in line]
    about_file = any(_TOPOLOGY_WORDS.search(line) for line in fatal)
    if not about_file and not result.errors:
        # Not the file's fault as far as anyone can tell: do not call it invalid.
        last = fatal[-1] if fatal else (exc.log[-1] if exc.log else "no log output")
        raise SlurmControllerError(f"could not run a scratch slurmctld to check {topo.source}: {exc} ({last})", exc.log)
    result.controller_checked = True
    result.log = list(exc.log)
    reason = fatal[-1] if fatal else str(exc)
    result.errors.append(f"{topo.source}: slurmctld refuses to start with this file: {reason}")
    result.errors.extend(f"slurmctld log: {line}" for line in exc.log if line != reason)
