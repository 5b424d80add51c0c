"""What every local HTTP service of the simulators shares: a quiet handler and a server on a thread.

The fake Compute API, the fake Cloud Tasks API and the Cloud Storage
precondition proxy each subclass :class:`QuietHandler` for their requests and
:class:`LocalServer` for their life cycle (``start`` on a free port, ``url``,
``stop``, ``with``).
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

#: how often a server's loop looks for ``shutdown()``: ``stop`` returns within it (``serve_forever``'s
#: default, 0.5 s, made every stop wait a quarter of a second on average, and a pipeline stops five servers)
POLL_SECONDS = 0.05


class QuietHandler(BaseHTTPRequestHandler):
    """HTTP/1.1 keep-alive, no access log, and a JSON reply helper."""

    protocol_version = "HTTP/1.1"
    # headers and body go out in separate writes: without this, Nagle + delayed ACK add ~40 ms
    disable_nagle_algorithm = True

    def send_json(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=UTF-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        return


class _Server(ThreadingHTTPServer):
    # socketserver's listen backlog is 5: parallel clients on a loaded machine overflow it and see resets
    request_queue_size = 1024


class LocalServer:
    """A ``ThreadingHTTPServer`` serving on a daemon thread; subclasses call :meth:`_serve` from ``start``."""

    _httpd: ThreadingHTTPServer | None = None

    def _serve(self, handler: type[BaseHTTPRequestHandler], host: str, port: int, name: str) -> None:
        self._httpd = _Server((host, port), handler)
        self._httpd.daemon_threads = True
        threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": POLL_SECONDS}, name=name, daemon=True
        ).start()

    @property
    def url(self) -> str:
        if self._httpd is None:
            raise RuntimeError(f"{type(self).__name__} is not started")
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self, host: str = "127.0.0.1", port: int = 0) -> Self:
        raise NotImplementedError

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> Self:
        return self if self._httpd is not None else self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
