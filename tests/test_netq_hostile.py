"""The NetQ client against hostile servers: redirects elsewhere, trickles, floods, bad JSON."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from topocast.errors import ProviderError
from topocast.providers.onprem.netq import parse_compute_nodes, parse_topology
from topocast.providers.onprem.netq_http import NetqClient, NetqCredentials

CREDS = NetqCredentials("admin", "s3cret-pw", "nmx", "nmx-pw")


@contextmanager
def serve(answer: Callable[[BaseHTTPRequestHandler], None]) -> Iterator[tuple[str, list[dict[str, str]]]]:
    """A local HTTP server calling ``answer(handler)`` for every request; yields (url, seen headers)."""
    seen: list[dict[str, str]] = []

    class Handler(BaseHTTPRequestHandler):
        def _any(self) -> None:
            seen.append({"path": self.path, **{k.lower(): v for k, v in self.headers.items()}})
            length = int(self.headers.get("Content-Length") or 0)
            self.rfile.read(length)
            with suppress(BrokenPipeError, ConnectionResetError):
                answer(self)

        do_GET = do_POST = _any

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()


def json_answer(body: object, status: int = 200) -> Callable[[BaseHTTPRequestHandler], None]:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()

    def answer(h: BaseHTTPRequestHandler) -> None:
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(raw)))
        h.end_headers()
        h.wfile.write(raw)

    return answer


def client(url: str, **kw: object) -> NetqClient:
    return NetqClient(url, CREDS, max_attempts=1, **kw)  # type: ignore[arg-type]


def test_redirect_to_another_host_carries_no_credential() -> None:
    with serve(json_answer({"access_token": "stolen"})) as (other, other_seen):

        def redirect(h: BaseHTTPRequestHandler) -> None:
            h.send_response(302)
            h.send_header("Location", other + h.path)
            h.send_header("Content-Length", "0")
            h.end_headers()

        with serve(redirect) as (netq, netq_seen):
            with pytest.raises(ProviderError, match="redirected to another host") as exc:
                client(netq).login()
            assert "s3cret" not in str(exc.value)
            with pytest.raises(ProviderError, match="redirected to another host"):
                client(netq).compute_nodes()  # HTTP Basic with the NMX password
    assert [r["path"] for r in netq_seen] == ["/api/netq/auth/v1/login", "/nmx/v1/compute-nodes?offset=0&limit=500"]
    assert "basic" in netq_seen[1]["authorization"].lower()
    assert other_seen == [], "the other host must not even be asked"


def test_redirect_on_the_same_host_is_followed() -> None:
    def answer(h: BaseHTTPRequestHandler) -> None:
        if h.path.startswith("/moved"):
            json_answer({"access_token": "tok", "premises": []})(h)
            return
        h.send_response(302)
        h.send_header("Location", "/moved" + h.path)
        h.send_header("Content-Length", "0")
        h.end_headers()

    with serve(answer) as (netq, seen):
        assert client(netq).login() == []
    assert [r["path"] for r in seen] == ["/api/netq/auth/v1/login", "/moved/api/netq/auth/v1/login"]


def test_a_trickling_server_fails_by_the_deadline() -> None:
    def trickle(h: BaseHTTPRequestHandler) -> None:
        h.send_response(200)
        h.send_header("Content-Length", "1000000")
        h.end_headers()
        for _ in range(100):  # one byte well inside the socket timeout each time: only a deadline stops it
            h.wfile.write(b" ")
            h.wfile.flush()
            time.sleep(0.2)
        trickled_to_the_end.set()

    trickled_to_the_end = threading.Event()
    with serve(trickle) as (netq, _):
        with pytest.raises(ProviderError, match=r"no complete answer within the 0\.6 s deadline"):
            client(netq, timeout=5.0, deadline=0.6).login()
        # the client gave up while the server was still trickling (the whole answer would take 20 s)
        assert not trickled_to_the_end.is_set()


def test_oversized_answers_are_refused() -> None:
    def declared(h: BaseHTTPRequestHandler) -> None:
        h.send_response(200)
        h.send_header("Content-Length", str(2 * 1024**3))
        h.end_headers()
        h.wfile.write(b"[" * 4096)

    with (
        serve(declared) as (netq, _),
        pytest.raises(ProviderError, match="answers 2147483648 bytes, over the 1000 byte limit"),
    ):
        client(netq, max_response_bytes=1000).login()

    def undeclared(h: BaseHTTPRequestHandler) -> None:
        h.send_response(200)
        h.end_headers()  # no length: HTTP/1.0 style, until close
        h.wfile.write(b" " * 5000)

    with serve(undeclared) as (netq, _), pytest.raises(ProviderError, match="answers more than the 1000 byte limit"):
        client(netq, max_response_bytes=1000).login()


def test_deeply_nested_json_is_a_provider_error() -> None:
    nested = json_answer(b"[" * 100_000 + b"]" * 100_000)
    with serve(nested) as (netq, _), pytest.raises(ProviderError, match="nested deeper than 64 levels"):
        client(netq).login()


@pytest.mark.parametrize(
    "data",
    [
        [{"nodes": 5, "links": []}],
        [{"nodes": [{"compounded_nodes": [{"id": "h", "name": "n1", "tier": -1}]}], "links": [7]}],
        [
            {
                "nodes": [
                    {"compounded_nodes": [{"id": "a", "name": "n1", "tier": -1}, {"id": "b", "name": "s", "tier": 0}]}
                ],
                "links": [{"src": "a", "target": "b", "compounded_links": 3}],
            }
        ],
    ],
    ids=["nodes-number", "link-number", "compounded-links-number"],
)
def test_mistyped_topology_is_a_provider_error(data: object) -> None:
    with pytest.raises(ProviderError, match=r"^NetQ topology: "):
        parse_topology(data)


def test_mistyped_compute_nodes_are_a_provider_error() -> None:
    with pytest.raises(ProviderError, match=r"^NMX-M compute-nodes: "):
        parse_compute_nodes([{"Name": "n1", "DomainUUID": ["not", "a", "string"]}, 5])


def test_a_server_trickling_its_headers_fails_by_the_deadline() -> None:
    def trickle_headers(h: BaseHTTPRequestHandler) -> None:
        h.wfile.write(b"HTTP/1.1 200 OK\r\n")
        for _ in range(100):  # an endless header line, a byte at a time: no socket timeout ever trips
            h.wfile.write(b"X")
            h.wfile.flush()
            time.sleep(0.2)
        trickled_to_the_end.set()

    trickled_to_the_end = threading.Event()
    with serve(trickle_headers) as (netq, _):
        with pytest.raises(ProviderError, match=r"within the 0\.6 s deadline"):
            client(netq, timeout=5.0, deadline=0.6).login()
        # the client gave up while the server was still trickling (the header line would take 20 s)
        assert not trickled_to_the_end.is_set()


def test_compute_nodes_invented_forever_stop_at_the_listing_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    import topocast.safeio.paging

    monkeypatch.setattr(topocast.safeio.paging, "MAX_LISTED_ITEMS", 30)
    pages = [0]

    def invent(h: BaseHTTPRequestHandler) -> None:  # a full page of new IDs at every offset, forever
        pages[0] += 1
        json_answer([{"ID": f"n{pages[0]}-{k}", "Name": f"n{pages[0]}-{k}"} for k in range(10)])(h)

    with serve(invent) as (netq, seen), pytest.raises(
        ProviderError, match=r"^NMX-M compute-nodes: more than 30 items listed"
    ):  # fmt: skip
        client(netq, page_size=10).compute_nodes()
    assert len(seen) == 4  # 3 pages of 10 fit the bound, the 4th does not
