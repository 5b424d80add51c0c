"""One policy for every outbound HTTP call that carries a credential (docs/security.md).

A call made with :func:`call` under a :class:`CallPolicy`:

* **never takes its credential to another origin**: a redirect ends the call with an error
  naming where it pointed, or (``same_origin_redirects``) is followed only to the same scheme,
  host and port. The redirect is handled here, not by urllib's handler, which copies every
  header (``X-SLURM-USER-TOKEN``, ``Authorization``) onto the request for the new host;
* **ends by a wall-clock deadline**: a socket timeout bounds each wait, not the call, so a server
  sending one byte every few seconds would never trip it. :data:`WATCHDOG` (one thread for the
  process) shuts the socket down at the deadline, whatever phase the call is in (TLS handshake,
  headers, body), which ends any blocked read;
* **reads at most ``max_answer_bytes``**: a larger ``Content-Length`` is refused before the body
  is read, an undeclared one one byte past the cap;
* **fails in one line** (:class:`HttpCallError`) naming the call, never a header value: a header
  that cannot be sent (a non-latin-1 character, a line break) is refused before anything leaves.

Clients that keep their own connections (the Kubernetes :class:`~topocast.k8s.client.KeepAliveTransport`)
use the same pieces: :func:`open_connection`, :data:`WATCHDOG` and :func:`read_body`.
"""

from __future__ import annotations

import contextlib
import heapq
import http.client
import itertools
import socket
import ssl
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urljoin, urlsplit

from topocast.errors import TopocastError

__all__ = [
    "QUOTED",
    "REDIRECTS",
    "WATCHDOG",
    "Answer",
    "CallPolicy",
    "HttpCallError",
    "Origin",
    "call",
    "check_headers",
    "credential_values",
    "open_connection",
    "origin",
    "read_body",
    "redact",
]

#: why a call failed: no connection, past its deadline, answer too large, redirected, TLS, a broken answer,
#: or a request that could not be sent (a header value)
ErrorKind = Literal["connect", "deadline", "too-large", "redirect", "tls", "protocol", "request"]
#: (scheme, lower-case host, port)
Origin = tuple[str, str, int]
REDIRECTS = frozenset({301, 302, 303, 307, 308})
#: headers whose values are credentials (lower case)
CREDENTIAL_HEADERS = frozenset({"authorization", "proxy-authorization", "x-slurm-user-token", "x-auth-token", "cookie"})
#: the longest part of what a server sent that an error message quotes
QUOTED = 200


class HttpCallError(TopocastError):
    """A call failed before an HTTP answer could be used; the message names the call, never a credential."""

    def __init__(self, message: str, kind: ErrorKind, target: str | None = None, detail: str | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        #: the origin a refused redirect pointed at
        self.target = target
        #: the cause without the call's name (e.g. the TLS verification message, the OS error)
        self.detail = detail


@dataclass(frozen=True)
class CallPolicy:
    """What one call may cost and where it may go."""

    #: seconds from the first connect to the last byte of the answer, redirects included
    deadline: float
    #: the largest answer body read
    max_answer_bytes: int
    #: False: any redirect ends the call; True: followed only to the same scheme, host and port
    same_origin_redirects: bool = False
    max_redirects: int = 5
    #: the longest wait for any one read or write (None: up to the deadline), so a server that went
    #: silent fails early enough for a caller's retry to fit inside its own budget
    idle_timeout: float | None = None


@dataclass(frozen=True)
class Answer:
    status: int
    headers: http.client.HTTPMessage
    body: bytes


def origin(url: str) -> Origin:
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = None
    return parts.scheme.lower(), (parts.hostname or "").lower(), port or {"http": 80, "https": 443}.get(parts.scheme, 0)


def _shown(o: Origin) -> str:
    return f"{o[0]}://{o[1]}:{o[2]}"


class _Watch:
    __slots__ = ("at", "fired", "sock")

    def __init__(self, sock: socket.socket, at: float) -> None:
        self.sock, self.at, self.fired = sock, at, False


class Watchdog:
    """One daemon thread that shuts sockets down at their deadline (``time.monotonic``).

    Cheaper than a timer thread per request (the Kubernetes publisher sends thousands): a
    request registers its socket and deadline, and removes it when done.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, _Watch]] = []
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None

    @contextlib.contextmanager
    def guard(self, sock: socket.socket, at: float) -> Iterator[_Watch]:
        """Shut ``sock`` down at ``at`` unless the block ended before; ``.fired`` says whether it was cut."""
        watch = _Watch(sock, at)
        with self._cond:
            heapq.heappush(self._heap, (at, next(self._seq), watch))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="topocast-http-deadline", daemon=True)
                self._thread.start()
            if self._heap[0][2] is watch:  # sooner than the thread waits for: wake it (rare with one timeout)
                self._cond.notify()
        try:
            yield watch
        finally:
            with self._cond:
                watch.sock = None  # type: ignore[assignment]  # done: the thread skips it

    def _run(self) -> None:
        with self._cond:
            while True:
                while self._heap and self._heap[0][2].sock is None:
                    heapq.heappop(self._heap)
                if not self._heap:
                    self._cond.wait()
                    continue
                wait = self._heap[0][0] - time.monotonic()
                if wait > 0:
                    self._cond.wait(wait)
                    continue
                _, _, watch = heapq.heappop(self._heap)
                watch.fired = True
                with contextlib.suppress(OSError):
                    watch.sock.shutdown(socket.SHUT_RDWR)


#: the process's one watchdog
WATCHDOG = Watchdog()


def credential_values(headers: Iterable[tuple[str, str]]) -> list[str]:
    """The credentials among ``headers`` (name, value): each value and, for ``Scheme value``, the value alone."""
    out: list[str] = []
    for name, value in headers:
        if name.lower() in CREDENTIAL_HEADERS and value:
            out.append(value)
            _, _, rest = value.partition(" ")
            if rest.strip():
                out.append(rest.strip())
    return out


def redact(text: str, secrets: Iterable[str]) -> str:
    """``text`` (what a server answered, quoted in an error) with every secret in it replaced by ``<redacted>``:
    a hostile server may echo the credential it was sent into its error body or status line."""
    for secret in sorted({s for s in secrets if s and len(s) >= 4}, key=len, reverse=True):
        text = text.replace(secret, "<redacted>")
    return text


def check_headers(headers: Mapping[str, str], what: str) -> None:
    """Every header name and value can be sent as it is (latin-1, no line break); the error never shows a value."""
    for name, value in headers.items():
        try:
            value.encode("latin-1")
            bad = any(c in value for c in "\r\n\0")
        except UnicodeEncodeError:
            bad = True
        if bad or not name.isascii():
            raise HttpCallError(
                f"{what}: the {name} header holds a character HTTP cannot carry (non-latin-1 or a line break); "
                "nothing was sent",
                "request",
            )


def open_connection(
    scheme: str,
    host: str,
    port: int,
    *,
    at: float,
    ssl_context: ssl.SSLContext | None = None,
    idle_timeout: float | None = None,
) -> http.client.HTTPConnection:
    """A connected ``http.client`` connection to ``scheme://host:port``, TLS handshake done, by ``at``.

    Each later read or write waits at most ``idle_timeout`` (None: until ``at``); only
    :data:`WATCHDOG` ends a call at ``at`` as a whole. Raises ``TimeoutError`` when ``at``
    passes, ``ssl.SSLError`` / ``OSError`` as the socket does.
    """
    remaining = at - time.monotonic()
    if remaining <= 0:
        raise TimeoutError("deadline")
    if idle_timeout is not None:
        remaining = min(remaining, idle_timeout)
    sock = socket.create_connection((host, port), timeout=remaining)
    conn: http.client.HTTPConnection
    try:
        if scheme == "https":
            context = ssl_context or ssl.create_default_context()
            with WATCHDOG.guard(sock, at) as watch:  # a handshake dripped byte by byte ends by the deadline too
                try:
                    sock = context.wrap_socket(sock, server_hostname=host)
                except OSError:
                    if watch.fired:
                        raise TimeoutError("deadline") from None
                    raise
            conn = http.client.HTTPSConnection(host, port, timeout=remaining, context=context)
        else:
            conn = http.client.HTTPConnection(host, port, timeout=remaining)
    except BaseException:
        sock.close()
        raise
    conn.sock = sock
    return conn


def read_body(answer: http.client.HTTPResponse, limit: int, what: str) -> bytes:
    """The answer's body, at most ``limit`` bytes (a larger declared or actual size is :class:`HttpCallError`,
    ``"<what> answers more than the <limit> byte limit"``)."""
    declared = answer.getheader("Content-Length")
    if declared and declared.strip().isdigit() and int(declared) > limit:
        raise HttpCallError(f"{what} answers {int(declared)} bytes, over the {limit} byte limit", "too-large")
    data = answer.read(limit + 1)
    if len(data) > limit:
        raise HttpCallError(f"{what} answers more than the {limit} byte limit", "too-large")
    return data


def call(
    method: str,
    url: str,
    *,
    what: str,
    policy: CallPolicy,
    headers: Mapping[str, str] | None = None,
    body: bytes | None = None,
    ssl_context: ssl.SSLContext | None = None,
) -> Answer:
    """``method url`` under ``policy``: the answer (any status), or :class:`HttpCallError` in one line.

    ``what`` starts every message (e.g. ``slurmrestd http://h:6820: GET diag``).
    """
    headers = dict(headers or {})
    check_headers(headers, what)
    at = time.monotonic() + policy.deadline
    start = origin(url)
    for _ in range(policy.max_redirects + 1):
        answer = _one(method, url, headers, body, at, policy, ssl_context, what)
        location = answer.headers.get("Location") if answer.status in REDIRECTS else None
        if location is None:
            return answer
        target = urljoin(url, location.strip())
        where = origin(target)
        if where != start or not policy.same_origin_redirects:
            raise HttpCallError(
                f"{what}: redirected to {_shown(where)} (HTTP {answer.status}); not followed, "
                f"so no credential leaves {_shown(start)}",
                "redirect",
                _shown(where),
            )
        if answer.status == 303 or (answer.status in (301, 302) and method == "POST"):
            method, body = "GET", None  # what browsers and urllib do
            headers.pop("Content-Type", None)
        url = target
    raise HttpCallError(f"{what}: more than {policy.max_redirects} redirects", "redirect")


def _one(
    method: str,
    url: str,
    headers: dict[str, str],
    body: bytes | None,
    at: float,
    policy: CallPolicy,
    ssl_context: ssl.SSLContext | None,
    what: str,
) -> Answer:
    scheme, host, port = origin(url)
    parts = urlsplit(url)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    late = HttpCallError(f"{what}: no complete answer within the {policy.deadline:g} s deadline", "deadline")
    try:
        conn = open_connection(scheme, host, port, at=at, ssl_context=ssl_context, idle_timeout=policy.idle_timeout)
    except TimeoutError:
        raise late from None
    except ssl.SSLCertVerificationError as exc:
        raise HttpCallError(
            f"{what}: the TLS certificate of {_shown((scheme, host, port))} is not trusted ({exc.verify_message})",
            "tls",
            detail=exc.verify_message,
        ) from None
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise HttpCallError(f"{what}: cannot connect ({reason})", "connect", detail=reason) from None
    try:
        with WATCHDOG.guard(conn.sock, at) as watch:
            try:
                conn.request(method, target, body=body, headers=headers)
                response = conn.getresponse()
                data = read_body(response, policy.max_answer_bytes, what)
            except (OSError, http.client.HTTPException) as exc:
                if watch.fired or isinstance(exc, TimeoutError):
                    raise late from None
                said = redact(" ".join(str(exc).split())[:QUOTED], credential_values(headers.items()))
                detail = f"{type(exc).__name__}: {said}" if said else type(exc).__name__
                raise HttpCallError(f"{what}: the connection broke ({detail})", "protocol", detail=detail) from None
            except ValueError:  # a path http.client will not send (checked headers never get here)
                raise HttpCallError(f"{what}: the request target cannot be sent as it is", "request") from None
            if watch.fired:  # cut while the last read returned what it had
                raise late
        return Answer(response.status, response.headers, data)
    finally:
        conn.close()
