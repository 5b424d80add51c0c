"""A local NetQ + NMX-M REST server for tests (stdlib ``http.server``, one thread).

It answers the request and response shapes topocast's NetQ client uses (see
``topocast.providers.onprem.netq_http``)::

    server = FakeNetq(topology={1: topology_json}, compute_nodes=nodes_json)
    with server:
        discover(server.url, credentials=NetqCredentials("admin", "admin-pw"))

* login checks username/password and returns a login token plus ``premises``;
* select-premise needs a live login token and returns a premise token;
* fetch-topology needs a live premise token of that premise;
* compute-nodes needs HTTP Basic credentials and pages with ``offset``/``limit``
  (``page_limit`` caps the page size the way a server-side maximum would;
  ``ignore_paging`` returns everything every time, like a server without paging);
* ``expire_sessions()`` invalidates every issued token (an expired session);
  ``always_expire`` makes every token die right after it is issued;
* ``fail(path_prefix, status, retry_after=None, times=1)`` queues error answers.

``requests`` records ``(method, path, authorization scheme)`` of every call;
``tls=(certfile, keyfile)`` serves HTTPS.
"""

from __future__ import annotations

import base64
import itertools
import json
import ssl
import threading
import urllib.parse
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

LOGIN = "/api/netq/auth/v1/login"
SELECT = "/api/netq/auth/v1/select/opid/"
TOPOLOGY = "/api/netq/telemetry/v1/object/topologygraph/fetch-topology"
COMPUTE_NODES = "/nmx/v1/compute-nodes"


@dataclass
class Fault:
    prefix: str
    status: int
    retry_after: str | None
    times: int


@dataclass
class FakeNetq:
    topology: dict[int, Any]
    compute_nodes: list[dict[str, Any]] = field(default_factory=list)
    username: str = "admin"
    password: str = "admin-pw"
    nmx_username: str | None = None
    nmx_password: str | None = None
    premises: list[dict[str, Any]] | None = None
    page_limit: int | None = None
    ignore_paging: bool = False
    always_expire: bool = False
    tls: tuple[str, str] | None = None
    requests: list[tuple[str, str, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.premises is None:
            self.premises = [
                {"opid": opid, "name": f"premise-{opid}", "namespace": "ns", "config_key_viewed": True}
                for opid in self.topology
            ]
        self._tokens: dict[str, int | None] = {}  # live token -> premise opid (None = login token)
        self._counter = itertools.count(1)
        self._faults: deque[Fault] = deque()
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    # ----- control ----------------------------------------------------------------------
    def fail(self, prefix: str, status: int, retry_after: str | None = None, times: int = 1) -> None:
        self._faults.append(Fault(prefix, status, retry_after, times))

    def expire_sessions(self) -> None:
        with self._lock:
            self._tokens.clear()

    def count(self, prefix: str) -> int:
        return sum(1 for _, path, _ in self.requests if path.startswith(prefix))

    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"{'https' if self.tls else 'http'}://{host}:{port}"

    def __enter__(self) -> FakeNetq:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        if self.tls:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(*self.tls)
            self._server.socket = ctx.wrap_socket(self._server.socket, server_side=True)
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        assert self._server is not None
        self._server.shutdown()
        self._server.server_close()

    # ----- behaviour --------------------------------------------------------------------
    def _issue(self, opid: int | None) -> str:
        token = f"tok-{next(self._counter)}"
        with self._lock:
            if not self.always_expire:
                self._tokens[token] = opid
        return token

    def _fault(self, path: str) -> Fault | None:
        with self._lock:
            for f in self._faults:
                if path.startswith(f.prefix):
                    f.times -= 1
                    if f.times <= 0:
                        self._faults.remove(f)
                    return f
        return None

    def answer(self, method: str, path: str, headers: Any, body: bytes) -> tuple[int, dict[str, str], Any]:
        url = urllib.parse.urlsplit(path)
        auth = headers.get("Authorization", "")
        self.requests.append((method, url.path, auth.split(" ", 1)[0]))
        fault = self._fault(url.path)
        if fault:
            extra = {"Retry-After": fault.retry_after} if fault.retry_after is not None else {}
            return fault.status, extra, {"error": "injected"}
        bearer = auth.removeprefix("Bearer ") if auth.startswith("Bearer ") else None
        if method == "POST" and url.path == LOGIN:
            creds = json.loads(body or b"{}")
            if (creds.get("username"), creds.get("password")) != (self.username, self.password):
                return 401, {}, {"error": "invalid credentials"}
            return 200, {}, {"access_token": self._issue(None), "premises": self.premises, "expires_at": 0}
        if method == "GET" and url.path.startswith(SELECT):
            if bearer is None or bearer not in self._tokens or self._tokens[bearer] is not None:
                return 401, {}, {"error": "session expired"}
            opid = int(url.path.removeprefix(SELECT))
            return 200, {}, {"access_token": self._issue(opid)}
        if method == "POST" and url.path == TOPOLOGY:
            query = urllib.parse.parse_qs(url.query)
            if query.get("timestamp") != ["0"] or json.loads(body or b"{}").get("subgroupNestingDepth") != 2:
                return 400, {}, {"error": "bad request"}
            opid = self._tokens.get(bearer) if bearer else None
            if opid is None:
                return 401, {}, {"error": "session expired"}
            return 200, {}, self.topology[opid]
        if method == "GET" and url.path == COMPUTE_NODES:
            user = self.nmx_username or self.username
            password = self.nmx_password or self.password
            expected = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
            if auth != expected:
                return 401, {}, {"error": "unauthorized"}
            if self.ignore_paging:
                return 200, {}, self.compute_nodes
            query = urllib.parse.parse_qs(url.query)
            offset = int(query.get("offset", ["0"])[0])
            limit = int(query.get("limit", [str(len(self.compute_nodes))])[0])
            if self.page_limit:
                limit = min(limit, self.page_limit)
            return 200, {}, self.compute_nodes[offset : offset + limit]
        return 404, {}, {"error": f"no route {method} {url.path}"}


def _handler(fake: FakeNetq) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            status, headers, payload = fake.answer(self.command, self.path, self.headers, body)
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for k, v in headers.items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)

        do_GET = _serve
        do_POST = _serve

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

    return Handler


def topology_from_fabric(fab: Any) -> list[dict[str, Any]]:
    """A NetQ ``fetch-topology`` answer for an ``ib_fabric_gen.IbFabric`` (e.g. its ``dual_fabric``).

    Shapes as in Topograph's ``tests/output/netq/topologyGraph.json``: one host node per host name
    (tier -1), leaves tier 1, spines 2, cores 3; one link per device pair with one
    ``compounded_links`` entry per cable, each naming both ends' ``interface`` (host side: the HCA's
    device, ``mlx5_3``; switch side: ``swpN``).
    """
    spines = {sw for sw in fab.spines} | {sw for sw in fab.storage if "SPINE" in fab.nodes[sw].desc}
    tier_of: dict[str, int] = {}
    name_of: dict[str, str] = {}
    device: dict[str, str] = {}
    for node in fab.nodes.values():
        if node.kind == "Switch":
            tier_of[node.id] = 3 if node.id in fab.cores else 2 if node.id in spines else 1
            name_of[node.id] = node.desc.split(";", 1)[1].split(":", 1)[0]
        elif " " in node.desc and not node.desc.endswith("Node"):
            host, dev = node.desc.split(" ", 1)
            tier_of[host] = -1
            name_of[host] = host
            device[node.id] = dev
    links: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for node in fab.nodes.values():
        for port, (remote, rport) in node.ports.items():
            a = node.id if node.kind == "Switch" else node.desc.split(" ", 1)[0]
            other = fab.nodes[remote]
            b = remote if other.kind == "Switch" else other.desc.split(" ", 1)[0]
            if a not in tier_of or b not in tier_of or node.kind != "Switch" or (other.kind == "Switch" and a > b):
                continue  # every cable once: from its switch end (switch pairs: from the smaller ID)
            ia = f"swp{port}"
            ib = device.get(remote, f"swp{rport}")
            ends = [{"interface": ia, "node": a}, {"interface": ib, "node": b}]
            links.setdefault((a, b), []).append({"id": f"{a}:{ia}-*-{b}:{ib}", "interfaces": ends})
    nodes = [{"id": k, "name": name_of[k], "tier": t} for k, t in sorted(tier_of.items())]
    body_links = [
        {"id": f"{a}-*-{b}", "src": a, "target": b, "size": len(c), "compounded_links": c}
        for (a, b), c in links.items()
    ]
    return [{"nodes": [{"compounded_nodes": nodes}], "links": body_links}]
