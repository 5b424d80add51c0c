"""Run a throwaway ``slurmctld`` in a scratch directory.

Used to check a topology.conf the way the real controller reads it, and by
tests that need a live controller. Each instance gets its own directory, a
free TCP port pair chosen at run time, ``auth/none`` (no munge) and nodes that
all point at 127.0.0.1, so it never talks to a real cluster and several can
run side by side::

    with SlurmController(["n1", "n2"], topology="SwitchName=s Nodes=n[1-2]\\n") as ctl:
        ctl.show_topology()["s"].nodes   # ('n1', 'n2')

slurmctld 22.05 starts in ~0.1 s. It logs ``Running as primary controller``
*before* binding its port, so readiness is ``scontrol ping`` answering UP while
our process is still alive, never the log line alone.

A Slurm installed in a chroot (the Debian sid folder holding 26.05) is one
:class:`SlurmInstall` with ``root`` set: the controller's directory is then
under ``ROOT/srv/``, every path written into slurm.conf is the path *inside* the
chroot, and both daemons run as ``chroot ROOT /usr/sbin/slurmctld ...``.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from topocast.errors import TopocastError
from topocast.model.hostlist import compact
from topocast.slurm.conffile import slurm_conf_nodes
from topocast.slurm.scontrol import (
    BlockInfo,
    Command,
    SlurmControllerError,
    SwitchInfo,
    argv,
    ping,
    reconfigure,
    run_scontrol,
    show_blocks,
    show_topology,
    show_topology_text,
)

__all__ = [
    "SlurmController",
    "SlurmControllerError",
    "SlurmInstall",
    "SwitchInfo",
    "ensure_proc",
    "find_binary",
    "slurm_version",
]

#: Log lines every fresh 22.05 controller prints; they say nothing about the topology.
_NOISE = re.compile(
    r"pmix|MPI: Cannot create context|mpi/pmix|state file|NOTE: Trying backup|"
    r"state save file|No memory enforcing|Address already in use|High latency for \d+ calls to gettimeofday|"
    r"cgroup\.conf|_read_slurm_cgroup_conf",
    re.IGNORECASE,
)
_LOG_PREFIX = re.compile(r"^(?:\[[^\]]*\]\s*)?(?:slurmctld:\s*)?")


def short_hostname() -> str:
    """What ``hostname -s`` prints; slurmctld only runs as primary if SlurmctldHost matches it."""
    return socket.gethostname().split(".", 1)[0]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def find_binary(name: str) -> str | None:
    """``name`` on PATH, or in the sbin directories Debian installs slurmctld to."""
    found = shutil.which(name)
    if found:
        return found
    for d in ("/usr/sbin", "/usr/local/sbin", "/sbin"):
        candidate = Path(d) / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


_VERSION = re.compile(r"(\d+)\.(\d+)")


@dataclass(frozen=True)
class SlurmInstall:
    """Where a Slurm lives: binaries on this host, or inside a chroot ``root`` (paths then inside it)."""

    slurmctld: str = "slurmctld"
    scontrol: str = "scontrol"
    root: Path | None = None

    @classmethod
    def find(
        cls, root: Path | str | None = None, slurmctld: str | None = None, scontrol: str | None = None
    ) -> SlurmInstall:
        """The Slurm on this host (PATH, /usr/sbin), or the one in chroot ``root``; explicit paths win."""
        if root is None:
            return cls(
                slurmctld or find_binary("slurmctld") or "slurmctld", scontrol or find_binary("scontrol") or "scontrol"
            )
        base = Path(root)
        if not base.is_dir():
            raise TopocastError(f"{base}: no such directory (expected a chroot holding slurmctld)")
        if os.geteuid() != 0:
            raise TopocastError(f"{base}: running the Slurm of a chroot needs root (chroot(2))")

        def inside(name: str, given: str | None) -> str:
            if given:
                return given
            for d in ("/usr/sbin", "/usr/bin", "/usr/local/sbin", "/usr/local/bin", "/sbin", "/bin"):
                if (base / d.lstrip("/") / name).is_file():
                    return f"{d}/{name}"
            raise TopocastError(f"{base}: no {name} inside this root (looked in /usr/sbin, /usr/bin, ...)")

        return cls(inside("slurmctld", slurmctld), inside("scontrol", scontrol), base)

    def command(self, tool: str) -> Command:
        """How to run ``tool`` (a path inside ``root`` when there is one)."""
        return ["chroot", str(self.root), tool] if self.root is not None else tool

    @property
    def scontrol_command(self) -> Command:
        return self.command(self.scontrol)

    def inside(self, path: Path) -> str:
        """``path`` as the chrooted daemon sees it."""
        if self.root is None:
            return str(path)
        return "/" + str(Path(path).resolve().relative_to(self.root.resolve()))

    def scratch_parent(self) -> Path | None:
        """Where scratch controller dirs go: ``ROOT/srv`` for a chroot, the system temp dir otherwise."""
        if self.root is None:
            return None
        parent = self.root / "srv"
        parent.mkdir(exist_ok=True)
        return parent

    def describe(self) -> str:
        return f"{self.slurmctld} in chroot {self.root}" if self.root is not None else self.slurmctld

    def version(self) -> tuple[int, int] | None:
        return slurm_version(tuple(argv(self.command(self.slurmctld))))

    def release(self) -> str | None:
        """The full release ``slurmctld -V`` prints (``26.05.5``); None if it does not run."""
        return slurm_release(tuple(argv(self.command(self.slurmctld))))


@functools.cache
def slurm_release(command: tuple[str, ...]) -> str | None:
    """``26.05.5`` of ``slurmctld -V`` (``slurm-wlm 26.05.5``); None if it does not run."""
    try:
        cp = subprocess.run([*command, "-V"], capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r"\d+\.\d+(\.\d+)?", cp.stdout)
    return m.group(0) if cp.returncode == 0 and m else None


def slurm_version(command: tuple[str, ...]) -> tuple[int, int] | None:
    """(major, minor) of ``slurmctld -V`` (``slurm-wlm 26.05.5`` -> (26, 5)); None if it does not run."""
    m = _VERSION.match(slurm_release(command) or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def ensure_proc(root: Path) -> None:
    """Mount ``proc`` at ``ROOT/proc`` unless something is mounted there (slurmctld needs /proc/self).

    Idempotent. The mount is left in place: it is harmless, and other controllers
    in the same root may be using it.
    """
    target = Path(root) / "proc"
    if os.path.ismount(target):
        return
    target.mkdir(exist_ok=True)
    try:
        cp = subprocess.run(["mount", "-t", "proc", "proc", str(target)], capture_output=True, text=True, check=False)
    except OSError as exc:
        raise SlurmControllerError(f"cannot mount proc at {target}: {exc.strerror}") from None
    if cp.returncode != 0 and not os.path.ismount(target):
        raise SlurmControllerError(f"cannot mount proc at {target}: {cp.stderr.strip() or cp.returncode}")


def render_slurm_conf(
    workdir: Path | str,
    nodes: Sequence[str],
    port: int,
    slurmd_port: int,
    *,
    cluster: str = "topocast",
    topology_plugin: str | None = "topology/tree",
    message_timeout: int = 2,
    node_topology: Mapping[str, str] | None = None,
) -> str:
    """A minimal slurm.conf for a scratch controller (auth/none, everything in ``workdir``).

    ``workdir`` is the directory as slurmctld sees it (inside its chroot).
    ``topology_plugin=None`` writes no TopologyPlugin (topology.yaml selects its own).
    ``node_topology`` gives nodes a ``Topology=`` on their NodeName line (cloud / power-saving nodes).
    """
    workdir = Path(workdir)
    lines = [
        f"ClusterName={cluster}",
        f"SlurmctldHost={short_hostname()}(127.0.0.1)",
        f"SlurmctldPort={port}",
        f"SlurmdPort={slurmd_port}",
        "SlurmUser=root" if os.geteuid() == 0 else f"SlurmUser={_user_name()}",
        "AuthType=auth/none",
        "CredType=cred/none",
        f"StateSaveLocation={workdir / 'state'}",
        f"SlurmctldPidFile={workdir / 'slurmctld.pid'}",
        f"SlurmctldLogFile={workdir / 'slurmctld.log'}",
        "SlurmctldDebug=info",
        # scontrol waits ~3x this when the controller is gone; keep failures fast
        f"MessageTimeout={message_timeout}",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "MpiDefault=none",
        "MailProg=/bin/true",
        "SelectType=select/cons_tres",
        "SchedulerType=sched/backfill",
        "AccountingStorageType=accounting_storage/none",
        "JobCompType=jobcomp/none",
        "ReturnToService=2",
    ]
    if topology_plugin:
        lines.append(f"TopologyPlugin={topology_plugin}")
    # 127.0.0.1 + our own SlurmdPort: the scratch controller can never reach a real slurmd
    placed = dict(node_topology or {})
    plain = [n for n in nodes if n not in placed]
    lines += [f"NodeName={group} NodeAddr=127.0.0.1 CPUs=1 RealMemory=1000 State=UNKNOWN" for group in compact(plain)]
    lines += [
        f"NodeName={n} NodeAddr=127.0.0.1 CPUs=1 RealMemory=1000 State=UNKNOWN Topology={spec}"
        for n, spec in placed.items()
    ]
    lines.append("PartitionName=main Nodes=ALL Default=YES MaxTime=INFINITE State=UP")
    return "\n".join(lines) + "\n"


def _die_with_parent() -> None:
    """In the child before exec: get SIGTERM when the parent dies, so a killed test run leaves no daemon.

    Linux ties this to the *thread* that started the child: start a long-lived
    controller from a thread that outlives it (the main thread in tests).
    """
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG (Linux)
    except (OSError, AttributeError):
        pass


def _user_name() -> str:
    import pwd

    return pwd.getpwuid(os.geteuid()).pw_name


def clean_log_line(line: str) -> str:
    """Strip the timestamp / ``slurmctld:`` prefix from one log line."""
    return _LOG_PREFIX.sub("", line.rstrip())


class SlurmController:
    """A scratch slurmctld. Use as a context manager, or call :meth:`start` / :meth:`stop`.

    ``nodes`` names the nodes to define; without it they come from an operator's
    ``slurm_conf`` (its NodeName lines only: nothing else of that file is used).
    ``topology`` is written as ``topology_file`` (``topology.conf`` or
    ``topology.yaml``) next to the generated slurm.conf. ``install`` picks the
    Slurm to run (default: the one on this host).
    """

    def __init__(
        self,
        nodes: Iterable[str] | None = None,
        *,
        topology: str | bytes | None = None,
        slurm_conf: Path | None = None,
        workdir: Path | None = None,
        topology_plugin: str = "topology/tree",
        start_timeout: float = 10.0,
        message_timeout: int = 2,
        cluster: str = "topocast",
        slurmctld: str | None = None,
        scontrol: str | None = None,
        install: SlurmInstall | None = None,
        topology_file: str = "topology.conf",
        node_topology: Mapping[str, str] | None = None,
    ) -> None:
        if nodes is None:
            if slurm_conf is None:
                raise TopocastError("SlurmController needs a node list or a slurm.conf to take one from")
            nodes = slurm_conf_nodes(slurm_conf)
        self.nodes = list(dict.fromkeys(nodes))
        if not self.nodes:
            # slurmctld refuses to start without nodes ("no nodes configured")
            where = f" in {slurm_conf}" if slurm_conf else ""
            raise TopocastError(f"no nodes to define{where}: a scratch slurmctld needs at least one NodeName")
        self._topology = topology
        if install is None:
            install = SlurmInstall.find(None, slurmctld, scontrol)
        self.install = install
        if install.root is not None:
            ensure_proc(install.root)
        self._own_dir = workdir is None
        if workdir is None:
            self.dir = Path(tempfile.mkdtemp(prefix="topocast-slurmctld-", dir=install.scratch_parent()))
        else:
            self.dir = Path(workdir)
        self.topology_file = topology_file
        # topology.yaml names its plugins itself; slurm.conf's TopologyPlugin would be ignored anyway
        self.topology_plugin: str | None = None if topology_file.endswith(".yaml") else topology_plugin
        self.node_topology = dict(node_topology or {})
        self.start_timeout = start_timeout
        self.message_timeout = message_timeout
        self.cluster = cluster
        self.slurmctld = install.slurmctld
        self.scontrol_path: Command = install.scontrol_command
        self.port = 0
        self._proc: subprocess.Popen[bytes] | None = None
        self._stderr: Path = self.dir / "slurmctld.stderr"

    # ----- paths and environment -----------------------------------------------------
    @property
    def conf_path(self) -> Path:
        return self.dir / "slurm.conf"

    @property
    def topology_path(self) -> Path:
        """Where slurmctld reads topology.conf (or topology.yaml): beside slurm.conf."""
        return self.dir / self.topology_file

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def env(self) -> dict[str, str]:
        """Environment for scontrol calls against this controller."""
        return {**os.environ, "SLURM_CONF": self.install.inside(self.conf_path)}

    # ----- lifecycle -----------------------------------------------------------------
    def __enter__(self) -> SlurmController:
        try:
            self.start()
        except BaseException:
            self.stop()  # the exception carries the log; do not leak the scratch dir
            raise
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def start(self, attempts: int = 3) -> None:
        """Start slurmctld and wait until ``scontrol ping`` says UP.

        Raises :class:`SlurmControllerError` (with the log) if it exits or does not
        come up within ``start_timeout``. A lost race for the port is retried.
        """
        if self._proc is not None:
            raise TopocastError(f"slurmctld in {self.dir} is already running (pid {self._proc.pid})")
        self.dir.mkdir(parents=True, exist_ok=True)
        if self._topology is not None:
            self.write_topology(self._topology)
        elif not self.topology_path.exists():
            self.write_topology("")
        for attempt in range(attempts):
            self._launch()
            try:
                self._wait_up()
                return
            except SlurmControllerError:
                lost_port = any("Address already in use" in line for line in self.raw_log())
                self._reap(timeout=2.0)
                if not lost_port or attempt == attempts - 1:
                    raise

    def _launch(self) -> None:
        state = self.dir / "state"
        shutil.rmtree(state, ignore_errors=True)  # fresh state: nothing from an earlier run leaks in
        state.mkdir(parents=True)
        self.port = free_port()
        slurmd_port = free_port()
        self.conf_path.write_text(
            render_slurm_conf(
                self.install.inside(self.dir),
                self.nodes,
                self.port,
                slurmd_port,
                cluster=self.cluster,
                topology_plugin=self.topology_plugin,
                message_timeout=self.message_timeout,
                node_topology=self.node_topology,
            )
        )
        with self._stderr.open("wb") as err:
            try:
                self._proc = subprocess.Popen(
                    argv(self.install.command(self.slurmctld), "-D", "-i", "-f", self.install.inside(self.conf_path)),
                    stdin=subprocess.DEVNULL,
                    stdout=err,
                    stderr=subprocess.STDOUT,
                    env=self.env(),
                    cwd=self.dir,
                    start_new_session=True,  # a Ctrl-C in the terminal must not hit it half-way
                    preexec_fn=_die_with_parent,
                )
            except OSError as exc:
                raise SlurmControllerError(f"cannot run {self.slurmctld}: {exc.strerror}") from None

    def _wait_up(self) -> None:
        assert self._proc is not None
        deadline = time.monotonic() + self.start_timeout
        delay = 0.01
        while True:
            if self._proc.poll() is not None:
                raise SlurmControllerError(
                    f"slurmctld exited with status {self._proc.returncode} during start-up in {self.dir}",
                    self.log_lines(),
                )
            if any("Running as primary controller" in line for line in self.raw_log()) and self.ping():
                # Another process may own our port and have answered: make sure ours is still alive.
                time.sleep(0.02)
                if self._proc.poll() is None and not any("Address already in use" in x for x in self.raw_log()):
                    return
            if time.monotonic() > deadline:
                raise SlurmControllerError(
                    f"slurmctld in {self.dir} did not answer scontrol ping within {self.start_timeout:g} s",
                    self.log_lines(),
                )
            time.sleep(delay)
            delay = min(delay * 1.5, 0.1)

    def stop(self, timeout: float = 5.0) -> int | None:
        """Stop the controller (SIGTERM, SIGKILL after ``timeout``), reap it and remove a temp dir."""
        code = self._reap(timeout)
        if self._own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)
        return code

    def _reap(self, timeout: float) -> int | None:
        proc, self._proc = self._proc, None
        if proc is None:
            return None
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                proc.wait()
        return proc.returncode

    def is_running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    # ----- files and logs ------------------------------------------------------------
    def write_topology(self, content: str | bytes) -> None:
        """Replace topology.conf atomically (a half-written file can kill slurmctld on reconfigure)."""
        data = content.encode() if isinstance(content, str) else content
        tmp = self.topology_path.with_name(f".{self.topology_file}.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, self.topology_path)

    def raw_log(self) -> list[str]:
        """Everything slurmctld printed (in -D mode it logs to stderr, including pre-log-file errors)."""
        try:
            return self._stderr.read_text(errors="replace").split("\n")
        except FileNotFoundError:
            return []

    def log_lines(self) -> list[str]:
        """``fatal:``, ``error:`` and warning lines, minus the noise every scratch controller prints."""
        out = []
        for raw in self.raw_log():
            line = clean_log_line(raw)
            low = line.lower()
            if ("fatal:" in low or "error:" in low or "warning" in low) and not _NOISE.search(line):
                out.append(line)
        return out

    # ----- scontrol ------------------------------------------------------------------
    def scontrol(self, *args: str, timeout: float = 15.0) -> tuple[int, str, str]:
        """Run any scontrol command against this controller: (exit status, stdout, stderr)."""
        return run_scontrol(self.scontrol_path, args, self.env(), timeout)

    def ping(self) -> bool:
        return ping(self.scontrol_path, self.env())

    def show_topology(self, name: str | None = None) -> dict[str, SwitchInfo]:
        return show_topology(self.scontrol_path, self.env(), name=name)

    def show_blocks(self, name: str | None = None) -> dict[str, BlockInfo]:
        return show_blocks(self.scontrol_path, self.env(), name=name)

    def show_topology_text(self, name: str | None = None) -> str:
        return show_topology_text(self.scontrol_path, self.env(), name=name)

    def reconfigure(self) -> None:
        reconfigure(self.scontrol_path, self.env())
