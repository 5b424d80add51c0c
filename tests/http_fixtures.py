"""A hostile HTTP server on 127.0.0.1 for the tests of the clients that carry credentials."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@contextmanager
def serve(answer: Callable[[BaseHTTPRequestHandler], None]) -> Iterator[tuple[str, list[bytes]]]:
    """A server on 127.0.0.1 calling ``answer(handler)``; yields (url, every request's head and body as received)."""
    seen: list[bytes] = []

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _any(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            seen.append(self.requestline.encode() + b"\n" + bytes(self.headers) + body)
            with suppress(BrokenPipeError, ConnectionResetError):
                answer(self)
            self.close_connection = True

        do_GET = do_POST = do_PATCH = _any

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()
