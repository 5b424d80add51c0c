"""Every client that carries a credential obeys one policy (topocast.safeio.http, docs/security.md).

Each rule runs over every client in CLIENTS against a hostile server on 127.0.0.1:

* a redirect to another origin: that origin is never asked, the credential stays home;
* a server that trickles one byte at a time: the call ends by its deadline, not per byte;
* an answer declared larger than the call's cap: refused before it is read;
* every failure is one line and never shows the credential.

``test_no_module_opens_a_connection_outside_the_policy`` makes sure a new client cannot skip these:
it reads every module of shared/topocast and fails on a call that opens a connection anywhere but
in the policy's module, unless it is listed (with the reason) in ALLOWED.
"""

from __future__ import annotations

import ast
import base64
import threading
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
from http_fixtures import serve

from topocast.k8s.client import ClientSettings, K8sConnection, build_client
from topocast.providers.oci.sdk import imds_get
from topocast.providers.onprem.netq_http import NetqClient, NetqCredentials
from topocast.slurm.rest import SlurmRest, SlurmRestError, connect
from topocast.slurm.rest_token import SlurmToken

SHARED = Path(__file__).resolve().parents[1] / "shared" / "topocast"
DEADLINE = 1.5
#: the trickle test's deadline, with a byte every TRICKLE_EVERY seconds (well inside it: no read times out)
TRICKLE_DEADLINE, TRICKLE_EVERY = 0.6, 0.15
SLURM_JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdW4iOiJzbHVybSJ9.c2VjcmV0LXNpZ25hdHVyZQ"
K8S_TOKEN = "k8s-bearer-s3cret"
NETQ_PASSWORD = "netq-s3cret-pw"


@dataclass(frozen=True)
class Client:
    name: str
    #: one call that carries the credential to the server at the URL (within a deadline, DEADLINE unless
    #: given), ending in the error under test
    run: Callable[..., object]
    #: what must never be shown nor reach another origin
    secrets: tuple[str, ...]


def _slurmrestd(url: str, deadline: float = DEADLINE) -> object:
    return connect(url, SlurmToken(SLURM_JWT, "slurm"), version="v0.0.45", timeout=deadline)


def _netq(url: str, deadline: float = DEADLINE) -> object:
    return NetqClient(url, NetqCredentials("admin", NETQ_PASSWORD), max_attempts=1, deadline=deadline).login()


def _kubernetes(url: str, deadline: float = DEADLINE) -> object:
    conn = K8sConnection(auth="token", endpoint=url, token=K8S_TOKEN)
    client = build_client(conn, ClientSettings(timeout=deadline, max_attempts=1, qps=0), sleep=lambda _: None)
    try:
        return client.request_json("GET", "/api/v1/nodes")
    finally:
        client.close()


def _oci_imds(url: str, deadline: float = DEADLINE) -> object:
    return imds_get(url + "/opc/v2/instance/id", timeout=deadline)


CLIENTS = [
    Client("slurmrestd", _slurmrestd, (SLURM_JWT,)),
    Client("netq", _netq, (NETQ_PASSWORD,)),
    Client("kubernetes", _kubernetes, (K8S_TOKEN,)),
    Client("oci-imds", _oci_imds, ("Bearer Oracle",)),
]


def failure(client: Client, url: str, deadline: float = DEADLINE) -> str:
    """The one line the client's call fails with (it must fail)."""
    with pytest.raises(Exception) as info:  # each client has its own error type
        client.run(url, deadline)
    message = str(info.value)
    assert message and "\n" not in message, message
    for secret in client.secrets:
        assert secret not in message and base64.b64encode(secret.encode()).decode() not in message
    return message


@pytest.mark.parametrize("client", CLIENTS, ids=lambda c: c.name)
def test_a_redirect_elsewhere_is_not_followed(client: Client) -> None:
    with serve(lambda h: h.send_response(200)) as (other, other_seen):

        def redirect(h: BaseHTTPRequestHandler) -> None:
            h.send_response(307)  # 307 keeps the method, the body and (with urllib) every header
            h.send_header("Location", other + h.path)
            h.send_header("Content-Length", "0")
            h.end_headers()

        with serve(redirect) as (url, seen):
            message = failure(client, url)
    port = other.rsplit(":", 1)[1]
    assert "redirect" in message and port in message, message  # names where it pointed
    assert len(seen) == 1 and other_seen == [], "the other origin must not even be asked"
    assert any(s.encode() in seen[0] or base64.b64encode(s.encode()) in seen[0] for s in client.secrets), (
        "the call under test carried the credential to its own server"
    )


@pytest.mark.parametrize("client", CLIENTS, ids=lambda c: c.name)
@pytest.mark.parametrize("where", ["body", "status line"])
def test_a_server_quoting_the_credential_back_does_not_get_it_printed(client: Client, where: str) -> None:
    def echo(h: BaseHTTPRequestHandler) -> None:
        said = " ".join(f"{k}: {v}" for k, v in h.headers.items()) + " " + " ".join(client.secrets)
        if where == "status line":  # not HTTP at all: http.client quotes the line it could not parse
            h.wfile.write(f"HTTP/1.1 {said}\r\n\r\n".encode())
            return
        raw = f"you sent {said}".encode()
        h.send_response(400)
        h.send_header("Content-Type", "text/plain")
        h.send_header("Content-Length", str(len(raw)))
        h.end_headers()
        h.wfile.write(raw)

    with serve(echo) as (url, _):
        failure(client, url)  # one line, no secret in it


def test_a_same_origin_redirect_is_followed_where_the_client_allows_it() -> None:
    """NetQ behind a path prefix moves its login (same scheme, host and port): followed, as before."""

    def answer(h: BaseHTTPRequestHandler) -> None:
        if h.path.startswith("/moved"):
            raw = b'{"access_token": "t", "premises": []}'
            h.send_response(200)
            h.send_header("Content-Length", str(len(raw)))
            h.end_headers()
            h.wfile.write(raw)
            return
        h.send_response(308)
        h.send_header("Location", "/moved" + h.path)
        h.send_header("Content-Length", "0")
        h.end_headers()

    with serve(answer) as (url, seen):
        assert _netq(url) == []
    assert [s.split(b" ")[1] for s in seen] == [b"/api/netq/auth/v1/login", b"/moved/api/netq/auth/v1/login"]


@pytest.mark.parametrize("client", CLIENTS, ids=lambda c: c.name)
def test_a_trickling_server_is_cut_off_by_the_deadline(client: Client) -> None:
    stop = threading.Event()

    def trickle(h: BaseHTTPRequestHandler) -> None:
        h.wfile.write(b"HTTP/1.1 200 OK\r\n")
        h.wfile.flush()
        while not stop.is_set():  # a header byte at a time: every socket read succeeds, the call never ends
            h.wfile.write(b"X")
            h.wfile.flush()
            stop.wait(TRICKLE_EVERY)

    with serve(trickle) as (url, _):
        try:
            message = failure(client, url, TRICKLE_DEADLINE)
        finally:
            stop.set()
    assert "deadline" in message, message
    assert f"{TRICKLE_DEADLINE:g} s deadline" in message or client.name == "oci-imds", message


@pytest.mark.parametrize("client", CLIENTS, ids=lambda c: c.name)
def test_an_answer_over_the_cap_is_refused_unread(client: Client) -> None:
    def huge(h: BaseHTTPRequestHandler) -> None:
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(200 * 1024**3))  # 200 GiB
        h.end_headers()
        h.wfile.write(b"[" * 65536)

    with serve(huge) as (url, _):
        message = failure(client, url)
    assert "byte limit" in message, message


def test_a_slurmrestd_answer_without_a_length_is_cut_at_the_cap_of_the_call() -> None:
    """The token check reads diag (~3 KB): a close-delimited flood ends one byte past its 1 MiB cap."""

    def flood(h: BaseHTTPRequestHandler) -> None:
        h.send_response(200)
        h.send_header("Connection", "close")
        h.end_headers()
        total = 0
        with suppress(OSError):
            while total < 64 * 1024**2:
                h.wfile.write(b" " * 65536)
                total += 65536

    with serve(flood) as (url, _):
        message = failure(CLIENTS[0], url)
    assert "answers more than the 1048576 byte limit" in message, message


DEEP = b'{"nodes": [{"name": "n1", "x": ' + b"[" * 200_000 + b"]" * 200_000 + b"}]}"


def deep_json(h: BaseHTTPRequestHandler) -> None:
    h.send_response(200)
    h.send_header("Content-Type", "application/json")
    h.send_header("Content-Length", str(len(DEEP)))
    h.end_headers()
    h.wfile.write(DEEP)


@pytest.mark.parametrize("client", [c for c in CLIENTS if c.name != "oci-imds"], ids=lambda c: c.name)
def test_a_json_answer_nested_too_deep_is_one_line(client: Client) -> None:
    """Every JSON client (IMDS answers text): a RecursionError would have been a traceback."""
    with serve(deep_json) as (url, _):
        message = failure(client, url)
    assert "deep" in message, message


def test_a_slurmrestd_listing_nested_too_deep_is_one_line() -> None:
    too_deep = "GET nodes: HTTP 200 but the answer nests too deep"
    with serve(deep_json) as (url, _), pytest.raises(SlurmRestError, match=too_deep):
        SlurmRest(url, SlurmToken(SLURM_JWT, "slurm"), timeout=DEADLINE).nodes()


def test_a_header_http_cannot_carry_is_refused_before_anything_is_sent() -> None:
    """A token with a non-latin-1 character was `internal error: UnicodeEncodeError`, exit 70."""
    with serve(lambda h: h.send_response(200)) as (url, seen), pytest.raises(SlurmRestError) as info:
        connect(url, SlurmToken("s3kr\u20acit", "slurm"), version="v0.0.45", timeout=DEADLINE)
    assert "X-SLURM-USER-TOKEN header holds a character HTTP cannot carry" in str(info.value)
    assert "s3kr" not in str(info.value) and seen == []


# ----- no client skips the policy -------------------------------------------------------------------

#: calls that open a network connection (fully qualified, as imported)
OPENERS = frozenset(
    {
        "urllib.request.urlopen", "urllib.request.build_opener", "urllib.request.OpenerDirector",
        "http.client.HTTPConnection", "http.client.HTTPSConnection",
        "socket.create_connection", "socket.socket", "socket.socketpair",
        "requests.get", "requests.post", "requests.put", "requests.patch", "requests.delete", "requests.head",
        "requests.request", "requests.Session", "requests.session",
        "httpx.Client", "httpx.AsyncClient", "httpx.HTTPTransport", "httpx.get", "httpx.post", "httpx.request",
        "httpx2.Client", "httpx2.AsyncClient", "httpx2.HTTPTransport", "httpx2.get", "httpx2.post", "httpx2.request",
        "urllib3.PoolManager", "urllib3.HTTPConnectionPool", "urllib3.HTTPSConnectionPool", "urllib3.request",
        "aiohttp.ClientSession", "lightkube.Client",
        "google.auth.transport.requests.AuthorizedSession", "google.auth.transport.requests.Request",
    }
)  # fmt: skip

#: (module, opener) -> why it is not :func:`topocast.safeio.http.call`; each is still covered above or says why not
ALLOWED = {
    ("topocast.safeio.http", "socket.create_connection"): "the policy itself",
    ("topocast.safeio.http", "http.client.HTTPConnection"): "the policy itself",
    ("topocast.safeio.http", "http.client.HTTPSConnection"): "the policy itself",
    ("topocast.k8s.client", "lightkube.Client"): (
        "lightkube over ResilientTransport > KeepAliveTransport, which applies the policy's pieces "
        "(open_connection, WATCHDOG, read_body, no redirect): the 'kubernetes' client above"
    ),
    ("topocast.k8s.client", "httpx2.Client"): "the same transport as lightkube's (auth flow only)",
    ("topocast.k8s.auth", "google.auth.transport.requests.Request"): (
        "google-auth refreshes its own token (metadata server / oauth2): the SDK's transport, docs/security.md"
    ),
    ("topocast.k8s.auth", "google.auth.transport.requests.AuthorizedSession"): (
        "GKE's describe call with google-auth's session: allow_redirects=False, timeout 30 s, docs/security.md"
    ),
    ("topocast.slurm.rest_token", "google.auth.transport.requests.AuthorizedSession"): (
        "Secret Manager read with google-auth's session: allow_redirects=False, timeout 30 s, docs/security.md"
    ),
    ("topocast.agents.pull_watch", "requests.Session"): "the Pub/Sub emulator only (no credential)",
    ("topocast.agents.pull_watch", "google.auth.transport.requests.AuthorizedSession"): (
        "Pub/Sub pull with google-auth's session (requests drops Authorization on a redirect to another host); "
        "the watch agent's bounds are issue 29 part B's"
    ),
    ("topocast.cli.publish", "socket.create_connection"): "a reachability probe for --plan: connects, sends nothing",
    ("topocast.slurm.controller", "socket.socket"): "free_port(): binds a local port, connects nowhere",
}


def _qualified(node: ast.expr, names: dict[str, str]) -> str | None:
    """``a.b.c`` of a call's function with its first part resolved through the module's imports."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name) or node.id not in names:
        return None
    return ".".join([names[node.id], *reversed(parts)])


def _openers(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                top = alias.name.split(".")[0]  # `import a.b` binds a; `import a.b as c` binds c to a.b
                names[alias.asname or top] = alias.name if alias.asname else top
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = _qualified(node.func, names)
            if name in OPENERS:
                found.add(name)
    return found


def test_no_module_opens_a_connection_outside_the_policy() -> None:
    seen: set[tuple[str, str]] = set()
    for path in sorted(SHARED.rglob("*.py")):
        module = ".".join(("topocast", *path.relative_to(SHARED).with_suffix("").parts)).removesuffix(".__init__")
        for opener in _openers(path):
            seen.add((module, opener))
    unlisted = sorted(seen - ALLOWED.keys())
    assert not unlisted, (
        f"{unlisted}: open connections through topocast.safeio.http.call (or list them in ALLOWED with the reason "
        "and a client in CLIENTS that proves the rules)"
    )
    assert not ALLOWED.keys() - seen, f"stale ALLOWED entries: {sorted(ALLOWED.keys() - seen)}"


def test_the_scan_finds_every_way_of_spelling_an_opener(tmp_path: Path) -> None:
    sample = tmp_path / "m.py"
    sample.write_text(
        "import urllib.request\nimport http.client as hc\nfrom socket import create_connection as cc\n"
        "import requests\n"
        "urllib.request.urlopen('x')\nhc.HTTPSConnection('h')\ncc(('h', 1))\nrequests.Session()\n"
    )
    assert _openers(sample) == {
        "urllib.request.urlopen", "http.client.HTTPSConnection", "socket.create_connection", "requests.Session"
    }  # fmt: skip


def test_the_azure_client_follows_no_redirect(monkeypatch: pytest.MonkeyPatch) -> None:
    """azure-core follows redirects by default (dropping only Authorization on a change of domain): set off."""
    from azure.core.pipeline.policies import RedirectPolicy

    from topocast.providers.azure import sdk as azure_sdk

    monkeypatch.setenv(azure_sdk.TOKEN_ENV, "azure-s3cret")
    compute = azure_sdk.compute_client("00000000-0000-0000-0000-000000000000", None)
    policies = compute.client._client._pipeline._impl_policies
    redirects = [p for p in policies if isinstance(p, RedirectPolicy)]
    assert redirects and not any(p.allow for p in redirects)
