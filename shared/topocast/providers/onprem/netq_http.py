"""NetQ / NMX-M REST client (stdlib ``urllib``): sessions, premises, retries, paging, TLS.

Requests (paths relative to the NetQ URL, e.g. ``https://netq.example.com``):

* ``POST /api/netq/auth/v1/login`` ``{"username", "password"}`` ->
  ``{"access_token", "premises": [{"opid", "name", "namespace", "config_key_viewed"}]}``;
* ``GET /api/netq/auth/v1/select/opid/<opid>`` (Bearer login token) -> ``{"access_token"}``
  for that premise;
* ``POST /api/netq/telemetry/v1/object/topologygraph/fetch-topology?timestamp=0``
  (Bearer premise token) body ``{"filters": [], "subgroupNestingDepth": 2}`` ->
  ``[{"nodes": [...], "links": [...]}]`` (one response, not paged);
* ``GET /nmx/v1/compute-nodes?offset=<n>&limit=<page>`` (HTTP Basic) -> a JSON
  list; we page until an empty page, and stop early if a server that ignores
  ``offset`` sends the same nodes again.

Failures: 408/429/500/502/503/504 and connection errors are retried up to
``max_attempts`` times with exponential back-off (0.5 s, 1 s, 2 s...), or after
``Retry-After`` when the server sends it (capped at ``max_retry_after``). A 401 on
a Bearer call means the session expired: we log in again (and re-select the
premise) **once** and repeat the call. TLS certificates are verified unless
``verify_tls=False`` (Topograph never verifies; we make that an explicit choice).
Every call (attempts, back-offs and the body) must finish within ``deadline``
seconds, so a server trickling a byte at a time cannot hang discovery; a body over
``max_response_bytes`` is refused (by ``Content-Length`` when sent, else while
reading); a redirect is followed only to the same scheme, host and port. These are the
rules of every client that carries a credential (:mod:`topocast.safeio.http`).
Errors are :class:`ProviderError` naming the operation and HTTP status, never a
credential.
"""

from __future__ import annotations

import base64
import email.utils
import json
import ssl
import time
import urllib.parse
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from topocast.errors import ProviderError
from topocast.safeio.http import CallPolicy, HttpCallError, call, credential_values, redact
from topocast.safeio.limits import MAX_NETQ_RESPONSE_BYTES
from topocast.safeio.paging import PageGuard
from topocast.safeio.validation import load_json

LOGIN = "/api/netq/auth/v1/login"
SELECT = "/api/netq/auth/v1/select/opid/"
TOPOLOGY = "/api/netq/telemetry/v1/object/topologygraph/fetch-topology"
COMPUTE_NODES = "/nmx/v1/compute-nodes"
RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})


@dataclass(frozen=True)
class NetqCredentials:
    """NetQ account (and optional separate NMX-M account); the secrets never appear in repr()."""

    username: str
    password: str = field(repr=False)
    nmx_username: str | None = None
    nmx_password: str | None = field(default=None, repr=False)
    #: where they came from and anything worth a warning (e.g. a group-readable file)
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Premise:
    opid: int
    name: str
    namespace: str = ""
    config_key_viewed: bool = False


class _Unauthorized(Exception):
    pass


class NetqClient:
    """One NetQ server. Not thread-safe; create one per discovery."""

    def __init__(
        self,
        url: str,
        credentials: NetqCredentials,
        *,
        verify_tls: bool = True,
        ca_file: str | None = None,
        timeout: float = 30.0,
        max_attempts: int = 5,
        backoff: float = 0.5,
        max_retry_after: float = 60.0,
        page_size: int = 500,
        sleep: Callable[[float], None] = time.sleep,
        deadline: float = 120.0,
        max_response_bytes: int = MAX_NETQ_RESPONSE_BYTES,
    ) -> None:
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ProviderError(f"NetQ URL {url!r} must look like https://host[:port]")
        self.url = url.rstrip("/")
        self.creds = credentials
        self.timeout = timeout
        self.max_attempts = max(1, max_attempts)
        self.backoff = backoff
        self.max_retry_after = max_retry_after
        self.page_size = max(1, page_size)
        self.sleep = sleep
        #: one call (all its attempts, back-offs and body) must finish within this many seconds
        self.deadline = deadline
        self.max_response_bytes = max_response_bytes
        self.calls: Counter[str] = Counter()
        self.ssl_context = ssl.create_default_context(cafile=ca_file)
        if not verify_tls:
            self.ssl_context.check_hostname = False
            self.ssl_context.verify_mode = ssl.CERT_NONE
        self._login_token: str | None = None
        self._premises: list[Premise] = []
        self._premise_tokens: dict[int, str] = {}

    # ----- transport --------------------------------------------------------------------
    def _retry_delay(self, attempt: int, retry_after: str | None) -> float:
        if retry_after:
            try:
                delay = float(retry_after)
            except ValueError:
                try:
                    when = email.utils.parsedate_to_datetime(retry_after)
                    delay = (when - datetime.now(UTC)).total_seconds()
                except (TypeError, ValueError):
                    delay = self.backoff * 2**attempt
            return min(max(delay, 0.0), self.max_retry_after)
        return self.backoff * 2**attempt

    def _send(self, op: str, method: str, path: str, headers: dict[str, str], body: bytes | None) -> Any:
        """One call with retries, all within ``deadline`` seconds; returns parsed JSON. Raises _Unauthorized on 401.

        Each attempt is :func:`topocast.safeio.http.call` with what is left of the deadline: redirects
        only to the same scheme, host and port, the answer capped at ``max_response_bytes``."""
        url = self.url + path
        started = time.monotonic()
        data = b""
        for attempt in range(self.max_attempts):
            self.calls[op] += 1
            remaining = self.deadline - (time.monotonic() - started)
            if remaining <= 0:
                raise self._late(op, method, path, attempt)
            policy = CallPolicy(
                deadline=remaining,
                max_answer_bytes=self.max_response_bytes,
                same_origin_redirects=True,
                idle_timeout=self.timeout,
            )
            try:
                answer = call(method, url, what=f"NetQ {op}: {path}", policy=policy, headers=headers, body=body,
                              ssl_context=self.ssl_context)  # fmt: skip
            except HttpCallError as exc:
                if exc.kind == "redirect" and exc.target is not None:
                    raise ProviderError(
                        f"NetQ {op}: {method} {path} was redirected to another host ({exc.target}); "
                        "not following it, so no credential leaves for a host we were not configured with"
                    ) from None
                if exc.kind == "tls":
                    raise ProviderError(
                        f"NetQ {op}: TLS certificate of {self.url} not trusted ({exc.detail}); "
                        "pass the CA with --ca-file, or --insecure to skip verification"
                    ) from None
                if exc.kind in ("too-large", "request", "redirect"):
                    raise ProviderError(str(exc)) from None
                if exc.kind == "deadline" or time.monotonic() - started >= self.deadline:
                    raise self._late(op, method, path, attempt + 1) from None
                if attempt + 1 < self.max_attempts:
                    self._pause(self._retry_delay(attempt, None), started)
                    continue
                said = redact(exc.detail or exc.kind, self._secrets(headers))
                raise ProviderError(
                    f"NetQ {op}: cannot reach {self.url} after {attempt + 1} attempts ({said})"
                ) from None
            if answer.status == 401:
                raise _Unauthorized()
            if answer.status >= 300:
                if answer.status in RETRY_STATUS and attempt + 1 < self.max_attempts:
                    self._pause(self._retry_delay(attempt, answer.headers.get("Retry-After")), started)
                    continue
                detail = redact(" ".join(answer.body[:200].decode("utf-8", "replace").split()), self._secrets(headers))
                tries = f" after {attempt + 1} attempts" if attempt else ""
                raise ProviderError(
                    f"NetQ {op}: {method} {path} answered HTTP {answer.status}{tries}"
                    + (f": {detail}" if detail else "")
                )
            data = answer.body
            break
        return load_json(data, f"NetQ {op}: {path}", ProviderError)

    def _secrets(self, headers: dict[str, str]) -> list[str]:
        """What a server must not get quoted back in an error: the passwords and the tokens sent."""
        return [self.creds.password, self.creds.nmx_password or "", *credential_values(headers.items())]

    def _late(self, op: str, method: str, path: str, attempts: int) -> ProviderError:
        return ProviderError(
            f"NetQ {op}: {method} {path} gave no complete answer within the {self.deadline:g} s deadline"
            + (f" ({attempts} attempts)" if attempts > 1 else "")
        )

    def _pause(self, delay: float, started: float) -> None:
        """Back off, but never past the deadline (the next attempt then fails at once, naming it)."""
        self.sleep(max(0.0, min(delay, self.deadline - (time.monotonic() - started))))

    # ----- NetQ session -----------------------------------------------------------------
    def login(self) -> list[Premise]:
        body = json.dumps({"username": self.creds.username, "password": self.creds.password}).encode()
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        try:
            data = self._send("login", "POST", LOGIN, headers, body)
        except _Unauthorized:
            raise ProviderError(
                f"NetQ login as {self.creds.username!r} refused (HTTP 401): check the credentials"
            ) from None
        token = data.get("access_token") if isinstance(data, dict) else None
        if not isinstance(token, str) or not token:
            raise ProviderError("NetQ login: the answer has no access_token")
        self._login_token = token
        self._premise_tokens.clear()
        self._premises = []
        for i, p in enumerate(data.get("premises") or []):
            if not isinstance(p, dict) or not isinstance(p.get("opid"), int):
                raise ProviderError(f"NetQ login: premises[{i}] has no integer opid")
            name, namespace = str(p.get("name", "")), str(p.get("namespace", ""))
            self._premises.append(Premise(p["opid"], name, namespace, bool(p.get("config_key_viewed"))))
        return list(self._premises)

    def _bearer(self, token: str, json_body: bool = False) -> dict[str, str]:
        headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
        if json_body:
            headers["Content-Type"] = "application/json"
        return headers

    def _select(self, opid: int) -> str:
        if opid not in self._premise_tokens:
            if self._login_token is None:
                self.login()
            assert self._login_token is not None
            data = self._send("select-premise", "GET", f"{SELECT}{opid}", self._bearer(self._login_token), None)
            token = data.get("access_token") if isinstance(data, dict) else None
            if not isinstance(token, str) or not token:
                raise ProviderError(f"NetQ select premise {opid}: the answer has no access_token")
            self._premise_tokens[opid] = token
        return self._premise_tokens[opid]

    def topology(self, opid: int) -> Any:
        """The topology graph of one premise (re-login once if the session expired)."""
        body = json.dumps({"filters": [], "subgroupNestingDepth": 2}).encode()
        path = f"{TOPOLOGY}?timestamp=0"
        for fresh in (False, True):
            try:
                token = self._select(opid)
                return self._send("topology", "POST", path, self._bearer(token, json_body=True), body)
            except _Unauthorized:
                if fresh:
                    raise ProviderError(
                        f"NetQ topology of premise {opid}: HTTP 401 even after a fresh login; "
                        "check the account's access to this premise"
                    ) from None
                self.login()
        raise AssertionError("unreachable")

    # ----- NMX-M ------------------------------------------------------------------------
    def compute_nodes(self) -> list[dict[str, Any]]:
        """All NMX-M compute nodes, paged with offset/limit."""
        user = self.creds.nmx_username or self.creds.username
        password = self.creds.nmx_password if self.creds.nmx_username else self.creds.password
        basic = base64.b64encode(f"{user}:{password}".encode()).decode()
        headers = {"Authorization": f"Basic {basic}", "Accept": "application/json"}
        nodes: list[dict[str, Any]] = []
        seen: set[str] = set()
        guard = PageGuard("NMX-M compute-nodes", self.page_size)
        offset = 0
        while True:
            query = urllib.parse.urlencode({"offset": offset, "limit": self.page_size})
            try:
                page = self._send("nmx-compute-nodes", "GET", f"{COMPUTE_NODES}?{query}", headers, None)
            except _Unauthorized:
                raise ProviderError(f"NMX-M compute-nodes: user {user!r} refused (HTTP 401)") from None
            if not isinstance(page, list):
                raise ProviderError(f"NMX-M compute-nodes: expected a JSON list, got {type(page).__name__}")
            fresh = [n for n in page if not (isinstance(n, dict) and str(n.get("ID")) in seen)]
            for n in fresh:
                if isinstance(n, dict):
                    seen.add(str(n.get("ID")))
            nodes.extend(fresh)
            # Stop on an empty page, not a short one: a server-side maximum below our
            # page size makes every page short. No new node = a server ignoring offset.
            if not page or not fresh:
                return nodes
            # new nodes on every page, forever (a server making IDs up): bounded by the guard's caps; the
            # duplicates it would refuse were dropped above (a server ignoring offset ends the listing)
            if not guard.more((None for _ in fresh), offset + len(page)):
                return nodes
            offset += len(page)
