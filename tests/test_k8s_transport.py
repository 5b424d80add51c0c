"""The client's wire layer: keep-alive connections and the direct request path's auth."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from k8s_fake_apiserver import FakeKubeApiServer

from topocast.k8s.client import ClientSettings, K8sConnection, build_client


@pytest.fixture
def fake() -> Iterator[FakeKubeApiServer]:
    with FakeKubeApiServer() as server:
        server.add_node("n1", {"kubernetes.io/hostname": "n1"})
        yield server


class OneAnswerPerConnection:
    """An HTTP server that answers one request per connection with a keep-alive response, then closes the
    connection without saying so (what a server does to a connection idle past its keep-alive timeout)."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.connections = 0
        threading.Thread(target=self._serve, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            with conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    data += conn.recv(65536)
                body = b'{"kind":"NodeList","items":[]}'
                head = f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
                conn.sendall(head.encode() + body)


def test_a_connection_the_server_closed_while_idle_is_reopened_without_an_error() -> None:
    server = OneAnswerPerConnection()
    kc = build_client(K8sConnection(endpoint=server.url, token="t"), ClientSettings(qps=0, max_attempts=1))
    try:
        answers = [kc.request_json("GET", "/api/v1/nodes") for _ in range(3)]
    finally:
        kc.close()
        server.sock.close()
    assert answers == [{"kind": "NodeList", "items": []}] * 3
    assert server.connections == 3
    assert kc.transport.stats.retries == 0  # not a retry of the request: a new connection for it


def test_a_rotated_token_file_is_read_again_on_a_401(fake: FakeKubeApiServer, tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("first")
    fake.token = "first"
    kc = build_client(K8sConnection(endpoint=fake.url, token_file=str(token_file)))
    try:
        kc.request_json("GET", "/api/v1/nodes")
        token_file.write_text("second")  # the kubelet rotated the service account token
        fake.token = "second"
        nodes = kc.request_json("GET", "/api/v1/nodes")
    finally:
        kc.close()
    assert [n["metadata"]["name"] for n in nodes["items"]] == ["n1"]
    assert [(r.status, r.authorization) for r in fake.requests] == [
        (200, "Bearer first"),
        (401, "Bearer first"),
        (200, "Bearer second"),
    ]
