"""A real Slurm controller with JWT auth, its slurmrestd and slurmd, in a chroot (tests and benches).

The set-up of ../shared/reference/offline-tooling.md ("slurmrestd and slurmd 26.05"):
slurmctld with ``AuthType=auth/slurm`` (a key file) and ``AuthAltTypes=auth/jwt``; slurmrestd
started with ``SLURM_JWT=daemon`` as uid/gid 65534 (it refuses root); a token from
``scontrol token``. auth/slurm re-creates ``/run/slurmctld/sack.socket``, so every controller
runs in a private mount namespace with that folder bound to one of its own, and local clients
get ``SLURM_SACK_SOCKET`` pointing there (:meth:`RestCluster.env`). slurmd runs with
``CgroupPlugin=disabled`` (a chroot has no /sys/fs/cgroup). Needs root (chroot, unshare, mount).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterable, Mapping
from pathlib import Path

from topocast.model.hostlist import expand
from topocast.slurm.controller import (
    SlurmController,
    SlurmControllerError,
    SlurmInstall,
    _die_with_parent,
    free_port,
    render_slurm_conf,
)

__all__ = ["RestCluster"]


def _override(conf: str, settings: Mapping[str, str]) -> str:
    """``conf`` with each ``Key=`` line of ``settings`` replaced (or added before the node lines)."""
    lines = conf.splitlines()
    keys = {k.lower(): k for k in settings}
    out = [ln for ln in lines if ln.split("=", 1)[0].lower() not in keys]
    first_node = next(i for i, ln in enumerate(out) if ln.startswith(("NodeName=", "PartitionName=")))
    return "\n".join([*out[:first_node], *(f"{k}={v}" for k, v in settings.items()), *out[first_node:]]) + "\n"


class RestCluster(SlurmController):
    """A scratch 26.05 controller with auth/slurm + auth/jwt, its slurmrestd, and a token for root."""

    def __init__(
        self,
        nodes: Iterable[str],
        *,
        install: SlurmInstall,
        workdir: Path,
        cloud: Iterable[str] = (),
        **kwargs: object,
    ) -> None:
        super().__init__(nodes, install=install, workdir=workdir, **kwargs)  # type: ignore[arg-type]
        #: nodes defined with State=CLOUD (power saving: they start powered down)
        self.cloud = set(cloud)
        self.run_dir = self.dir / "run"
        self.rest_port = 0
        self._rest: subprocess.Popen[bytes] | None = None
        self._daemons: list[subprocess.Popen[bytes]] = []
        self.token = ""
        #: slurmrestd's http://127.0.0.1:PORT once started
        self.url = ""
        self.slurmd_port = 0

    # slurm.conf: the scratch controller's, with real authentication
    def _conf_text(self, port: int, slurmd_port: int) -> str:
        inside = self.install.inside(self.dir)
        conf = render_slurm_conf(
            inside,
            self.nodes,
            port,
            slurmd_port,
            cluster=self.cluster,
            topology_plugin=self.topology_plugin,
            message_timeout=self.message_timeout,
            node_topology=self.node_topology,
        )
        lines = conf.splitlines()
        for i, line in enumerate(lines):
            # a NodeName= group is a hostlist (c[1-2]): cloud when every node of it is
            if line.startswith("NodeName=") and set(expand(line.split()[0].removeprefix("NodeName="))) <= self.cloud:
                lines[i] = line.replace("State=UNKNOWN", "State=CLOUD")
        conf = "\n".join(lines) + "\n"
        return _override(
            conf,
            {
                "AuthType": "auth/slurm",
                "CredType": "cred/slurm",
                "AuthInfo": f"keyfile={inside}/slurm.key",
                "AuthAltTypes": "auth/jwt",
                "AuthAltParameters": f"jwt_key={inside}/jwt.key",
                "SlurmdSpoolDir": f"{inside}/spool",
                "SlurmdPidFile": f"{inside}/slurmd.pid",
                "SlurmdLogFile": f"{inside}/slurmd.log",
                "SuspendProgram": "/bin/true",
                "ResumeProgram": "/bin/true",
                "SuspendTime": "INFINITE",
                "ResumeTimeout": "60",
                # POWERING_DOWN lasts this long before POWERED_DOWN (default 30 s), where 26.05 moves a
                # cloud node back to its configured place
                "SuspendTimeout": "5",
                "MaxNodeCount": str(len(self.nodes) + 16),  # room for dynamic (slurmd -Z) nodes
            },
        )

    def env(self) -> dict[str, str]:
        return {**super().env(), "SLURM_SACK_SOCKET": self.install.inside(self.run_dir / "sack.socket")}

    def namespaced(self, bind: str, *command: str) -> list[str]:
        """``command`` in the chroot, in a private mount namespace with ROOT/``bind`` on our run dir."""
        root = str(self.install.root)
        target = f"{root}{bind}"
        script = 'mkdir -p "$1" && mount --bind "$2" "$1" && shift 2 && exec "$@"'
        return [
            "unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh",
            target, str(self.run_dir), "chroot", root, *command,
        ]  # fmt: skip

    def _launch(self) -> None:
        state = self.dir / "state"
        shutil.rmtree(state, ignore_errors=True)  # slurmctld keeps topology_str in its saved node state
        state.mkdir(parents=True)
        self.dir.chmod(0o755)  # slurmrestd (uid 65534) reads slurm.conf; the keys stay 0600
        self.run_dir.mkdir(exist_ok=True)
        (self.dir / "spool").mkdir(exist_ok=True)
        # slurmd's cgroup plugin needs /sys/fs/cgroup in the chroot: not there, and not needed here
        (self.dir / "cgroup.conf").write_text("CgroupPlugin=disabled\n")
        for key, size in (("slurm.key", 1024), ("jwt.key", 64)):
            path = self.dir / key
            if not path.exists():
                path.write_bytes(os.urandom(size))
                path.chmod(0o600)
        self.port = free_port()
        self.slurmd_port = free_port()
        self.conf_path.write_text(self._conf_text(self.port, self.slurmd_port))
        with self._stderr.open("wb") as err:
            self._proc = subprocess.Popen(
                self.namespaced(
                    "/run/slurmctld",
                    "env",
                    f"SLURM_CONF={self.install.inside(self.conf_path)}",
                    self.install.slurmctld,
                    "-D",
                    "-i",
                    "-f",
                    self.install.inside(self.conf_path),
                ),
                stdin=subprocess.DEVNULL,
                stdout=err,
                stderr=subprocess.STDOUT,
                cwd=self.dir,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )

    # ----- slurmrestd -------------------------------------------------------------------------
    def start_rest(self, timeout: float = 20.0) -> str:
        """Start slurmrestd on a free port (as 65534, rest_auth/jwt) and mint a root token; returns the URL."""
        code, out, err = self.scontrol("token", "username=root", "lifespan=7200")
        if code != 0:
            raise SlurmControllerError(f"scontrol token failed: {err.strip() or out.strip()}")
        self.token = out.strip().removeprefix("SLURM_JWT=")
        self.rest_port = free_port()
        log = (self.dir / "slurmrestd.log").open("wb")
        self._rest = subprocess.Popen(
            [
                "chroot",
                str(self.install.root),
                "env",
                "SLURM_JWT=daemon",
                f"SLURM_CONF={self.install.inside(self.conf_path)}",
                "slurmrestd",
                "-a",
                "rest_auth/jwt",
                "-u",
                "65534",
                "-g",
                "65534",
                f"127.0.0.1:{self.rest_port}",
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
        log.close()
        url = f"http://127.0.0.1:{self.rest_port}"
        deadline = time.monotonic() + timeout
        while True:
            if self._rest.poll() is not None:
                raise SlurmControllerError(
                    f"slurmrestd exited with {self._rest.returncode}: "
                    f"{(self.dir / 'slurmrestd.log').read_text()[-400:]}"
                )
            try:
                urllib.request.urlopen(f"{url}/slurm/v0.0.44/ping/", timeout=2).close()
                return url
            except OSError as exc:
                if getattr(exc, "code", None) is not None:  # an HTTP answer (401 without a token): it is up
                    return url
            if time.monotonic() > deadline:
                raise SlurmControllerError(f"slurmrestd did not answer on {url} within {timeout:g} s")
            time.sleep(0.1)

    def write_token(self, path: Path) -> Path:
        path.write_text(f"SLURM_JWT={self.token}\n")
        path.chmod(0o600)
        return path

    # ----- slurmd (a dynamic node) ------------------------------------------------------------
    def start_slurmd(self, name: str, conf: str | None = None, wait_for: float = 30.0) -> subprocess.Popen[bytes]:
        """``slurmd -Z -N name --conf "conf"`` (a dynamic node; without ``conf`` a defined node:
        ``slurmd -N name``) in the chroot with its own run dir, until the controller knows the node."""
        run = self.dir / f"run-{name}"
        run.mkdir(exist_ok=True)
        log = (self.dir / f"slurmd-{name}.out").open("wb")
        root = str(self.install.root)
        script = 'mkdir -p "$1" && mount --bind "$2" "$1" && shift 2 && exec "$@"'
        proc = subprocess.Popen(
            [
                "unshare",
                "--mount",
                "--propagation",
                "private",
                "sh",
                "-c",
                script,
                "sh",
                f"{root}/run/slurmd",
                str(run),
                "chroot",
                root,
                "env",
                f"SLURM_CONF={self.install.inside(self.conf_path)}",
                "slurmd",
                "-D",
                *(["-Z", "--conf", conf] if conf else []),
                "-N",
                name,
                "-f",
                self.install.inside(self.conf_path),
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
        log.close()
        self._daemons.append(proc)
        deadline = time.monotonic() + wait_for
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                break
            code, out, _ = self.scontrol("show", "node", name)
            if code == 0 and f"NodeName={name}" in out:
                return proc
            time.sleep(0.2)
        tail = (self.dir / f"slurmd-{name}.out").read_text(errors="replace")[-1500:]
        raise SlurmControllerError(f"slurmd -Z {name} did not register (exit {proc.poll()}): {tail}")

    def stop_slurmd(self, proc: subprocess.Popen[bytes], timeout: float = 10.0) -> None:
        """Stop one slurmd this cluster started (SIGTERM to its process group)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout)
        self._daemons.remove(proc)

    def stop(self, timeout: float = 5.0) -> int | None:
        for proc in [*self._daemons, *([self._rest] if self._rest else [])]:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
        self._daemons, self._rest = [], None
        return super().stop(timeout)
