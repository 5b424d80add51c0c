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
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from types import TracebackType

from topocast.errors import TopocastError
from topocast.hostlist import compact
from topocast.slurm.conffile import slurm_conf_nodes
from topocast.slurm.scontrol import (
    SlurmControllerError,
    SwitchInfo,
    parse_show_topology,
    ping,
    reconfigure,
    run_scontrol,
    show_topology,
)

__all__ = ["SlurmController", "SlurmControllerError", "SwitchInfo", "find_binary", "parse_show_topology"]

#: Log lines every fresh 22.05 controller prints; they say nothing about the topology.
_NOISE = re.compile(
    r"pmix|MPI: Cannot create context|mpi/pmix|state file|NOTE: Trying backup|"
    r"state save file|No memory enforcing|Address already in use",
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


def render_slurm_conf(
    workdir: Path,
    nodes: Sequence[str],
    port: int,
    slurmd_port: int,
    *,
    cluster: str = "topocast",
    topology_plugin: str = "topology/tree",
    message_timeout: int = 2,
) -> str:
    """A minimal slurm.conf for a scratch controller (auth/none, everything in ``workdir``)."""
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
        f"TopologyPlugin={topology_plugin}",
    ]
    # 127.0.0.1 + our own SlurmdPort: the scratch controller can never reach a real slurmd
    lines += [f"NodeName={group} NodeAddr=127.0.0.1 CPUs=1 RealMemory=1000 State=UNKNOWN" for group in compact(nodes)]
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
    ``topology`` is written as ``topology.conf`` next to the generated slurm.conf.
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
        self._own_dir = workdir is None
        self.dir = Path(tempfile.mkdtemp(prefix="topocast-slurmctld-")) if workdir is None else Path(workdir)
        self.topology_plugin = topology_plugin
        self.start_timeout = start_timeout
        self.message_timeout = message_timeout
        self.cluster = cluster
        self.slurmctld = slurmctld or find_binary("slurmctld") or "slurmctld"
        self.scontrol_path = scontrol or find_binary("scontrol") or "scontrol"
        self.port = 0
        self._proc: subprocess.Popen[bytes] | None = None
        self._stderr: Path = self.dir / "slurmctld.stderr"

    # ----- paths and environment -----------------------------------------------------
    @property
    def conf_path(self) -> Path:
        return self.dir / "slurm.conf"

    @property
    def topology_path(self) -> Path:
        """Where slurmctld reads topology.conf: beside slurm.conf."""
        return self.dir / "topology.conf"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def env(self) -> dict[str, str]:
        """Environment for scontrol calls against this controller."""
        return {**os.environ, "SLURM_CONF": str(self.conf_path)}

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
                self.dir,
                self.nodes,
                self.port,
                slurmd_port,
                cluster=self.cluster,
                topology_plugin=self.topology_plugin,
                message_timeout=self.message_timeout,
            )
        )
        with self._stderr.open("wb") as err:
            try:
                self._proc = subprocess.Popen(
                    [self.slurmctld, "-D", "-i", "-f", str(self.conf_path)],
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
        tmp = self.topology_path.with_name(".topology.conf.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, self.topology_path)

    def raw_log(self) -> list[str]:
        """Everything slurmctld printed (in -D mode it logs to stderr, including pre-log-file errors)."""
        try:
            return self._stderr.read_text(errors="replace").splitlines()
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

    def show_topology(self) -> dict[str, SwitchInfo]:
        return show_topology(self.scontrol_path, self.env())

    def reconfigure(self) -> None:
        reconfigure(self.scontrol_path, self.env())
