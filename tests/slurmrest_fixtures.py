"""``rest_cluster_factory``: a real 26.05 slurmctld + slurmrestd (and slurmd) with JWT auth in the
Debian sid chroot (:class:`topocast_sim.slurmrest.RestCluster`). Skips with the reason when
slurmrestd, slurmd or the JWT plugin is not in the chroot (``$SID.rest-failed`` from .ci/run).
"""

from __future__ import annotations

import http.server
import os
import shutil
import tempfile
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
from slurm_fixtures import SID_ROOT

from topocast.slurm.controller import SlurmInstall
from topocast_sim.slurmrest import RestCluster

__all__ = ["NODES", "TREE", "TREE_MOVED", "RestCluster", "RestFactory", "rest_cluster_factory", "rest_missing_reason"]

#: the 12-node tree the REST tests start from, and the same with n1 -> leaf3 and n9 -> leaf1 (two destinations,
#: two bulk POSTs, leaf1's first)
NODES = [f"n{i}" for i in range(1, 13)]
TREE = (
    "SwitchName=root Switches=spine[1-2]\n"
    "SwitchName=spine1 Switches=leaf[1-2]\n"
    "SwitchName=spine2 Switches=leaf3\n"
    "SwitchName=leaf1 Nodes=n[1-4]\n"
    "SwitchName=leaf2 Nodes=n[5-8]\n"
    "SwitchName=leaf3 Nodes=n[9-12]\n"
)
TREE_MOVED = TREE.replace("leaf1 Nodes=n[1-4]", "leaf1 Nodes=n[2-4,9]").replace(
    "leaf3 Nodes=n[9-12]", "leaf3 Nodes=n[1,10-12]"
)

RestFactory = Callable[..., "RestCluster"]
JWT_PLUGIN = "usr/lib/x86_64-linux-gnu/slurm-wlm/auth_jwt.so"


def rest_missing_reason(root: Path = SID_ROOT) -> str | None:
    """Why slurmrestd tests cannot run in ``root`` (None: they can)."""
    # lexists: slurmd is an alternatives link (/etc/alternatives/slurmd) that only resolves inside the chroot
    missing = [p for p in ("usr/sbin/slurmrestd", "usr/sbin/slurmd", JWT_PLUGIN) if not os.path.lexists(root / p)]
    failed = root.with_name(root.name + ".rest-failed")  # written by .ci/run when the install failed
    if missing and failed.is_file():
        return f"{root} lacks {', '.join(missing)}: {failed.read_text().strip()}"
    if missing:
        return (
            f"{root} lacks {', '.join(missing)} "
            "(chroot it: apt-get install -y slurmrestd slurmd slurm-wlm-jwt-plugin; .ci/run does)"
        )
    if shutil.which("unshare") is None:
        return "unshare (util-linux) is not installed: controllers with auth/slurm need a mount namespace each"
    return None


@pytest.fixture
def rest_cluster_factory(sid_slurm: SlurmInstall, request: pytest.FixtureRequest) -> Iterator[RestFactory]:
    """``factory(nodes, topology, **kw) -> RestCluster`` started, with slurmrestd up (``.url``)."""
    reason = rest_missing_reason()
    if reason:
        pytest.skip(reason)
    started: list[RestCluster] = []
    parent = SID_ROOT / "srv" / "topocast-tests"
    parent.mkdir(parents=True, exist_ok=True)

    def start(nodes: Iterable[str], topology: str, *, rest: bool = True, **kwargs: object) -> RestCluster:
        kwargs.setdefault("start_timeout", 30.0)
        workdir = Path(tempfile.mkdtemp(prefix=f"rest-{request.node.name[:36]}-", dir=parent))
        cluster = RestCluster(nodes, install=sid_slurm, workdir=workdir, topology=topology, **kwargs)
        started.append(cluster)
        cluster.start()
        if rest:
            cluster.url = cluster.start_rest()
        return cluster

    yield start
    failed = getattr(request.node, "rep_call_failed", False)
    for cluster in started:
        cluster.stop()
        if not failed:
            shutil.rmtree(cluster.dir, ignore_errors=True)


#: ``rewrite(direction, method, path, body) -> body`` (direction: "request" or "answer")
Rewrite = Callable[[str, str, str, "bytes | None"], "bytes | None"]


class RestProxy(http.server.ThreadingHTTPServer):
    """A forwarding proxy in front of slurmrestd. ``rewrite`` may change a request or an answer; with
    ``die_after_post`` it forwards the first POST, then drops every connection without an answer (what a
    proxy that killed slurmrestd leaves: 'Remote end closed connection'). ``posts`` counts forwarded POSTs."""

    def __init__(self, upstream: str, rewrite: Rewrite | None = None, *, die_after_post: bool = False) -> None:
        self.upstream, self.rewrite, self.die_after_post = upstream, rewrite, die_after_post
        self.dead, self.posts = False, 0
        super().__init__(("127.0.0.1", 0), _RestProxyHandler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _RestProxyHandler(http.server.BaseHTTPRequestHandler):
    server: RestProxy

    def log_message(self, *args: object) -> None:
        pass

    def _forward(self) -> None:
        proxy = self.server
        if proxy.dead:
            self.close_connection = True  # no status line: the client sees the connection drop
            return
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        if proxy.rewrite is not None:
            body = proxy.rewrite("request", self.command, self.path, body)
        headers = {k: v for k, v in self.headers.items() if k.lower().startswith(("x-slurm", "content-type", "accept"))}
        req = urllib.request.Request(proxy.upstream + self.path, data=body, method=self.command, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                status, answer = resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            status, answer = exc.code, exc.read()
        if proxy.rewrite is not None:
            answer = proxy.rewrite("answer", self.command, self.path, answer) or b""
        if self.command == "POST":
            proxy.posts += 1
            proxy.dead = proxy.die_after_post
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    do_GET = do_POST = _forward


@pytest.fixture
def rest_proxy() -> Iterator[Callable[..., RestProxy]]:
    """``start(upstream, rewrite=None, *, die_after_post=False) -> RestProxy``, serving until the test ends."""
    servers: list[RestProxy] = []

    def start(upstream: str, rewrite: Rewrite | None = None, **kwargs: Any) -> RestProxy:
        server = RestProxy(upstream, rewrite, **kwargs)
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()
