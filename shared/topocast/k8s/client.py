"""Build a lightkube client that is polite to the API server and survives its bad moments.

Every request of the publisher goes through one :class:`ResilientTransport`, an
httpx transport wrapper under lightkube's real client, which:

* waits for a token from a client-side token bucket (``qps`` / ``burst``, like
  client-go's ``QPS``/``Burst``; ``qps=0`` disables it) whose rate adapts to the server
  (:class:`AdaptiveRate`, ``adaptive``, default on): it starts at ``qps``, doubles while
  responses stay fast and no 429 comes back (then grows linearly past the last rate that
  was throttled), up to ``qps_max``, and halves on a 429 - whether API Priority and Fairness
  rejected the request (the ``X-Kubernetes-PF-*`` headers name its flow schema and
  priority level) or a proxy did; while responses are slow it stops growing;
* sets ``Authorization: Bearer`` from a refreshing token source (EKS/GKE), and on a
  401 refreshes the token once and resends;
* retries 429 after ``Retry-After`` (seconds or an HTTP date, capped), retries
  500/502/503/504 and connection errors with capped exponential backoff + jitter;
  once one request has used up its tries on connection errors, the server counts
  as unreachable and later requests of this client fail at once.
  All publisher requests are idempotent (GET, LIST, PATCH with absolute values,
  server-side apply, DELETE), which is what makes blind resending safe;
* normalises error bodies (:func:`status_response`): lightkube turns an error into
  an ``ApiError`` with its ``Status`` only when ``Content-Type`` is exactly
  ``application/json``, so ``application/json; charset=utf-8`` (kmock, some
  proxies) or a plain-text 404 from a load balancer would lose the code the
  publisher branches on. Every 4xx/5xx leaves this transport as a JSON
  ``Status`` with ``Content-Type: application/json``.

409 Conflict is *not* retried here: it needs a fresh read, which only the caller
can do (see :mod:`topocast.k8s.objects`).

Connection modes (:class:`K8sConnection`): an explicit endpoint + CA + token
(what Terraform passes), EKS or GKE (token minted here; endpoint/CA from
configuration or the describe APIs), the in-cluster service account, or a
kubeconfig file.
"""

from __future__ import annotations

import email.utils
import http.client
import json
import os
import random
import ssl
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlencode, urljoin

import httpx2
import msgspec
from lightkube import Client, KubeConfig
from lightkube.config.client_adapter import user_auth, verify_cluster
from lightkube.config.kubeconfig import SERVICE_ACCOUNT, SingleConfig
from lightkube.config.models import Cluster, User
from lightkube.core.exceptions import ApiError, ConfigError
from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator

from topocast.errors import TopocastError
from topocast.k8s.auth import (
    TokenSource,
    eks_cluster_endpoint,
    gke_cluster_endpoint,
    make_eks_token_source,
    make_gke_token_source,
)
from topocast.safeio.files import UnsafePathError, read_credential
from topocast.safeio.http import (
    QUOTED,
    REDIRECTS,
    WATCHDOG,
    HttpCallError,
    credential_values,
    open_connection,
    origin,
    read_body,
    redact,
)
from topocast.safeio.limits import MAX_YAML_BYTES
from topocast.safeio.yaml_input import load_yaml

RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
#: the largest answer read from the API server: a LIST page of 500 nodes is a few MB (labels.py pages)
MAX_ANSWER_BYTES = 128 * 1024 * 1024


class AnswerTooLarge(httpx2.DecodingError):
    """The API server's answer passed the transport's cap (not a transport error: not retried)."""


class RedirectRefused(httpx2.RequestError):
    """The API server answered a redirect: never followed, so the bearer token stays with it (not retried)."""


class KubernetesConfigError(TopocastError):
    """The Kubernetes connection settings are incomplete or contradictory."""


class K8sConnection(BaseModel):
    """Where the cluster is and how to authenticate (validated once, at the boundary)."""

    model_config = ConfigDict(extra="forbid")

    auth: Literal["auto", "token", "eks", "gke", "in-cluster", "kubeconfig"] = Field(
        "auto",
        description="auto: eks if eks_cluster is set, gke if gke_cluster is set, token if endpoint is set, "
        "in-cluster when KUBERNETES_SERVICE_HOST is set, else kubeconfig.",
    )
    endpoint: str | None = Field(None, description="API server URL, e.g. https://ABC.gr7.us-east-1.eks.amazonaws.com")
    ca_data: str | None = Field(None, description="Base64 PEM CA bundle (kubeconfig certificate-authority-data).")
    ca_file: str | None = None
    insecure_skip_tls_verify: bool = False
    token: SecretStr | None = Field(None, description="Static bearer token (auth=token).")
    token_file: str | None = Field(None, description="Bearer token file, re-read on 401 (auth=token).")
    eks_cluster: str | None = Field(None, description="EKS cluster name (the x-k8s-aws-id header).")
    region: str | None = Field(None, description="AWS region of the EKS cluster (and of STS).")
    gke_cluster: str | None = Field(None, description="projects/<project>/locations/<location>/clusters/<name>")
    kubeconfig: str | None = Field(None, description="kubeconfig path (default: $KUBECONFIG, then ~/.kube/config).")
    context: str | None = None
    service_account_dir: str = SERVICE_ACCOUNT

    @model_validator(mode="after")
    def _consistent(self) -> K8sConnection:
        mode = self.resolved_auth()
        if mode == "eks" and not (self.eks_cluster and self.region):
            raise ValueError("auth=eks needs eks_cluster and region")
        if mode == "gke" and not self.gke_cluster:
            raise ValueError("auth=gke needs gke_cluster (projects/<p>/locations/<l>/clusters/<c>)")
        if mode == "token" and not self.endpoint:
            raise ValueError("auth=token needs endpoint")
        if mode == "token" and not (self.token or self.token_file):
            raise ValueError("auth=token needs token or token_file")
        if self.ca_data and self.ca_file:
            raise ValueError("give ca_data or ca_file, not both")
        return self

    def resolved_auth(self, environ: Mapping[str, str] | None = None) -> str:
        if self.auth != "auto":
            return self.auth
        env = os.environ if environ is None else environ
        if self.eks_cluster:
            return "eks"
        if self.gke_cluster:
            return "gke"
        if self.endpoint:
            return "token"
        if env.get("KUBERNETES_SERVICE_HOST"):
            return "in-cluster"
        return "kubeconfig"

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, prefix: str = "TOPOCAST_K8S_") -> K8sConnection:
        """Read ``TOPOCAST_K8S_<FIELD>`` variables (``_AUTH``, ``_ENDPOINT``, ``_CA_DATA``, ``_EKS_CLUSTER``,
        ``_REGION``, ...), which is how Terraform hands the endpoint and CA to a function."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {
            name: env[prefix + name.upper()] for name in cls.model_fields if prefix + name.upper() in env
        }
        if "insecure_skip_tls_verify" in values:
            values["insecure_skip_tls_verify"] = values["insecure_skip_tls_verify"].lower() in ("1", "true", "yes")
        return cls.model_validate(values)


def connection_from_options(k8s_options: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> K8sConnection:
    """The connection of ``TOPOCAST_K8S_OPTIONS`` (its ``connection``), else the ``TOPOCAST_K8S_*`` variables:
    how every function reaches its cluster (the publisher, the ``k8s-labels`` discovery)."""
    given = k8s_options.get("connection")
    if given is None:
        return K8sConnection.from_env(environ)
    return given if isinstance(given, K8sConnection) else K8sConnection.model_validate(given)


def client_settings_from_options(k8s_options: Mapping[str, Any]) -> ClientSettings:
    """``TOPOCAST_K8S_OPTIONS``' ``client`` (rate limit, retries), else the defaults."""
    given = k8s_options.get("client") or {}
    return given if isinstance(given, ClientSettings) else ClientSettings.model_validate(given)


class ClientSettings(BaseModel):
    """Client-side politeness and fault handling."""

    model_config = ConfigDict(extra="forbid")

    # Not client-go's 5/10: see docs/kubernetes.md "Rate limit". 50 QPS is what a topology publisher
    # needs for a 10,000-node first publish inside a function's time limit (200 s) and stays far below
    # the default API Priority and Fairness share a single client gets; raise it for a faster first publish.
    qps: float = Field(50.0, ge=0, description="Requests per second (0 = unlimited); where the adaptive rate starts.")
    burst: int = Field(100, ge=1, description="Requests allowed back to back before qps applies.")
    adaptive: bool = Field(True, description="Raise the rate while the server keeps up; halve it on a 429.")
    qps_max: float = Field(2000.0, gt=0, description="Highest rate the adaptive limiter goes to.")
    max_attempts: int = Field(6, ge=1, description="Tries per request, counting the first.")
    backoff_initial: float = Field(0.25, ge=0, description="First 5xx backoff (s); doubles per attempt.")
    backoff_max: float = Field(8.0, ge=0)
    retry_after_max: float = Field(60.0, ge=0, description="Cap on a server's Retry-After (s).")
    timeout: float = Field(
        60.0, gt=0, description="Per-request wall-clock deadline (s), from connect to the answer's last byte."
    )
    field_manager: str = "topocast"
    unreachable_seconds: float | None = Field(
        None, gt=0, description="How long a server that used up a request's tries counts as unreachable "
        "(None: for the client's life, right for one publish; the in-cluster controller sets a few seconds).",
    )  # fmt: skip


class TokenBucket:
    """Thread-safe token bucket; a caller that finds it empty reserves a token and sleeps for it."""

    def __init__(
        self,
        qps: float,
        burst: int,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.qps, self.burst = qps, burst
        self._clock, self._sleep = clock, sleep
        self._tokens = float(burst)
        self._last = clock()
        self._lock = threading.Lock()

    def acquire(self) -> float:
        """Take one token, sleeping if needed; returns the seconds waited."""
        if self.qps <= 0:
            return 0.0
        with self._lock:
            now = self._clock()
            self._tokens = min(float(self.burst), self._tokens + (now - self._last) * self.qps)
            self._last = now
            self._tokens -= 1.0
            wait = -self._tokens / self.qps if self._tokens < 0 else 0.0
        if wait > 0:
            self._sleep(wait)
        return wait


#: APF's response headers: the server classified the request (present on its 429s too)
APF_HEADERS = ("X-Kubernetes-PF-PriorityLevel-UID", "X-Kubernetes-PF-FlowSchema-UID")


class AdaptiveRate(TokenBucket):
    """A token bucket whose rate follows the server, like TCP's congestion window.

    Every ``interval`` seconds in which the requests used most of the rate, the answers stayed
    fast (the smoothed response time at most four times the fastest seen plus 250 ms) and none
    was a 429, the rate doubles (slow start) up to the last rate that was cut, then grows past it
    by 5 % of it per interval divided by the number of cuts so far, down to 1 % (probing: a limit
    that stays put is probed ever more rarely), at most ``qps_max``.

    A 429 (at most one cut per ``interval``: the requests in flight come back together) sets the
    rate to 90 % of what the server accepted in the last second (the first cut, which ends slow
    start: half the rate, if that is less) and marks it, spends the saved-up burst and holds new
    requests for the Retry-After (at most 5 s). Slow answers hold the rate. It never goes below
    ``floor`` (a tenth of the start, at least 1 QPS). The burst is at most one interval's worth of
    the current rate.
    """

    def __init__(
        self,
        qps: float,
        burst: int,
        qps_max: float,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        interval: float = 0.25,
    ) -> None:
        super().__init__(qps, burst, clock, sleep)
        self.start, self.qps_max, self.interval = qps, max(qps, qps_max), interval
        self.max_burst = burst
        self.burst = self._burst_at(qps)
        self._tokens = float(self.burst)
        self.floor = max(1.0, qps / 10)
        self.mark = self.qps_max  # the rate that was last cut (slow start below it)
        self.peak = qps
        self.cuts = 0
        self.apf = False  # the server answered with API Priority and Fairness headers
        self._window_at = self._clock()
        self._answered = 0
        self._ewma: float | None = None
        self._fastest: float | None = None
        self._cut_at = float("-inf")
        self._accepted: deque[float] = deque()  # when the answers of the last second came (not 429)

    def observe(self, status: int, seconds: float, apf: bool = False, retry_after: float | None = None) -> None:
        """One answer: its status, how long it took, whether it carried APF headers, its Retry-After."""
        with self._lock:
            now = self._clock()
            self.apf = self.apf or apf
            while self._accepted and self._accepted[0] < now - 1.0:
                self._accepted.popleft()
            if status == 429:
                if now - self._cut_at >= self.interval:
                    # half, or below what the server took in the last second if that is less: one
                    # cut lands under its limit instead of halving down to it a quarter second at a time
                    took = 0.9 * len(self._accepted) if self._accepted else self.qps / 2
                    self.mark = max(self.floor, min(self.qps / 2, took) if self.cuts == 0 else took)
                    self._set(self.mark, now)
                    # no saved-up burst into a server that just said no, and nothing new before its Retry-After
                    self._tokens = min(self._tokens, 0.0) - min(retry_after or 0.0, 5.0) * self.qps
                    self._cut_at = now
                    self.cuts += 1
                return
            self._accepted.append(now)
            self._ewma = seconds if self._ewma is None else 0.8 * self._ewma + 0.2 * seconds
            self._fastest = self._ewma if self._fastest is None else min(self._fastest, self._ewma)
            self._answered += 1
            if now - self._window_at < self.interval:
                return
            busy = self._answered >= 0.5 * self.qps * (now - self._window_at)  # the rate was what held us
            # slow answers only hold the rate: a large LIST or a busy client machine is slow too, and
            # cutting on latency alone would starve a publish the server is happy to take
            fast = self._ewma <= 4 * self._fastest + 0.25
            if fast and busy and now - self._cut_at >= 2 * self.interval:
                # probing past the mark slows with every cut (5 % of it per interval after the first, 1 %
                # from the fifth): a server whose limit stays put is probed every ~25 s, not every ~6 s
                probe = 0.05 * self.mark / min(max(self.cuts, 1), 5)
                grown = min(self.qps * 2, self.mark) if self.qps < self.mark else self.qps + probe
                self._set(min(self.qps_max, grown), now)
            self._window_at, self._answered = now, 0

    def _set(self, qps: float, now: float) -> None:
        # tokens earned at the old rate up to now are kept; from now on they accrue at the new one
        self._tokens = min(float(self.burst), self._tokens + (now - self._last) * self.qps)
        self._last = now
        self.qps = qps
        self.burst = self._burst_at(qps)
        self._tokens = min(self._tokens, float(self.burst))
        self.peak = max(self.peak, qps)

    def _burst_at(self, qps: float) -> int:
        """Back to back at most ``burst`` requests and one interval's worth of the current rate: a
        burst far above the rate is what floods a server whose limit is below it."""
        return max(1, min(self.max_burst, int(qps * self.interval)))


def make_limiter(settings: ClientSettings, sleep: Callable[[float], None] = time.sleep) -> TokenBucket:
    """The client's rate limiter: adaptive from ``qps`` unless ``adaptive`` is off or ``qps`` is 0 (no limit)."""
    if settings.adaptive and settings.qps > 0:
        return AdaptiveRate(settings.qps, settings.burst, settings.qps_max, sleep=sleep)
    return TokenBucket(settings.qps, settings.burst, sleep=sleep)


@dataclass
class TransportStats:
    """What went over the wire: requests by method (retries included), retries and time spent waiting."""

    by_method: Counter[str] = field(default_factory=Counter)
    retries: int = 0
    throttled: int = 0  # 429s received
    waited: float = 0.0  # seconds slept in the rate limiter and backoffs
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def requests(self) -> int:
        return sum(self.by_method.values())

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {
                "requests": self.requests,
                "by_method": dict(self.by_method),
                "retries": self.retries,
                "throttled": self.throttled,
                "waited_s": round(self.waited, 3),
            }


def retry_after_seconds(value: str | None, now: float | None = None) -> float | None:
    """Parse a ``Retry-After`` header: delta-seconds or an HTTP date. None if absent or unreadable."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


class ResilientTransport(httpx2.BaseTransport):
    """Rate limit, authenticate and retry around an inner httpx transport (see module docstring)."""

    def __init__(
        self,
        inner: httpx2.BaseTransport,
        settings: ClientSettings,
        token_source: TokenSource | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.inner = inner
        self.settings = settings
        self.token_source = token_source
        self.limiter = make_limiter(settings, sleep)
        self.stats = TransportStats()
        self._sleep = sleep
        self._unreachable: str | None = None
        self._unreachable_at = 0.0

    def _backoff(self, attempt: int) -> float:
        s = self.settings
        base = min(s.backoff_max, s.backoff_initial * (2 ** (attempt - 1)))
        return base * random.uniform(0.5, 1.0)  # jitter so parallel workers don't retry in lockstep

    def _wait(self, seconds: float) -> None:
        with self.stats._lock:
            self.stats.waited += seconds
        if seconds > 0:
            self._sleep(seconds)

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        if self._unreachable is not None:
            ttl = self.settings.unreachable_seconds
            if ttl is None or time.monotonic() - self._unreachable_at < ttl:
                raise httpx2.ConnectError(f"API server unreachable ({self._unreachable})", request=request)
            self._unreachable = None  # a long-running client tries the server again
        refreshed = False
        attempt = 0
        while True:
            attempt += 1
            waited = self.limiter.acquire()
            with self.stats._lock:
                self.stats.waited += waited
                self.stats.by_method[request.method] += 1
            if self.token_source is not None:
                request.headers["Authorization"] = f"Bearer {self.token_source.token()}"
            sent = time.monotonic()
            try:
                response = self.inner.handle_request(request)
            except httpx2.TransportError as exc:
                if attempt >= self.settings.max_attempts or self._unreachable is not None:
                    # One request that used up its retries on connection errors marks the server
                    # unreachable for this client: the rest fail at once instead of retrying again.
                    if self._unreachable is None:
                        self._unreachable, self._unreachable_at = f"{type(exc).__name__}: {exc}", time.monotonic()
                    raise
                self._note_retry()
                self._wait(self._backoff(attempt))
                continue
            status = response.status_code
            if isinstance(self.limiter, AdaptiveRate):
                apf = any(h in response.headers for h in APF_HEADERS)
                wait = retry_after_seconds(response.headers.get("Retry-After")) if status == 429 else None
                self.limiter.observe(status, time.monotonic() - sent, apf, wait)
            if status == 401 and self.token_source is not None and not refreshed:
                refreshed = True  # the token may have expired in flight: mint a new one and resend once
                self.token_source.invalidate()
                _discard(response)
                attempt -= 1
                continue
            if status not in RETRY_STATUSES or attempt >= self.settings.max_attempts:
                return status_response(response, request) if status >= 400 else response
            delay = retry_after_seconds(response.headers.get("Retry-After"))
            delay = self._backoff(attempt) if delay is None else min(delay, self.settings.retry_after_max)
            _discard(response)
            self._note_retry(throttled=status == 429)
            self._wait(delay)

    def _note_retry(self, throttled: bool = False) -> None:
        with self.stats._lock:
            self.stats.retries += 1
            self.stats.throttled += throttled

    def close(self) -> None:
        self.inner.close()


_REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


def reason_for(code: int) -> str:
    """The Status ``reason`` kube-apiserver sends with ``code`` (for a Status that came without one)."""
    return _REASONS.get(code, "Unknown")


def _is_json(content_type: str) -> bool:
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or media.endswith("+json")


def status_response(response: httpx2.Response, request: httpx2.Request) -> httpx2.Response:
    """``response`` with a JSON ``Status`` body and ``Content-Type: application/json``.

    A JSON body of any JSON media type (``application/json; charset=utf-8``,
    ``application/vnd.kubernetes...+json``) that is a ``Status`` is passed on with
    the bare media type; anything else (HTML from a proxy, plain text, JSON that is
    not a Status) becomes a Status carrying the HTTP code and the start of the text.
    """
    raw = response.read()
    status: dict[str, Any] | None = None
    if _is_json(response.headers.get("Content-Type", "")):
        try:
            data = json.loads(raw or b"null")
        except ValueError:
            data = None
        if isinstance(data, dict) and data.get("kind") == "Status":
            status = data
            status.setdefault("code", response.status_code)
    if status is None:
        text = raw.decode("utf-8", "replace").strip()
        reason = reason_for(response.status_code)
        status = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": text[:300] or f"HTTP {response.status_code} {reason}",
            "reason": reason,
            "code": response.status_code,
        }
    if isinstance(status.get("message"), str):  # a hostile server may quote the bearer token back
        status["message"] = redact(status["message"], credential_values(request.headers.items()))
    headers = [
        (k, v)
        for k, v in response.headers.items()
        if k.lower() not in ("content-type", "content-length", "content-encoding")
    ]
    headers.append(("Content-Type", "application/json"))
    response.close()
    return httpx2.Response(
        response.status_code,
        headers=headers,
        content=json.dumps(status).encode(),
        request=request,
        extensions=response.extensions,
    )


def _discard(response: httpx2.Response) -> None:
    response.read()
    response.close()


class KeepAliveTransport(httpx2.BaseTransport):
    """HTTP/1.1 over keep-alive connections (``http.client``): the inner transport of :func:`build_client`.

    httpcore's pool, what httpx uses, walks every connection (polling each idle socket) under one
    lock on each request and again on each response: with 32 PATCHes in flight that was most of
    the client's CPU per request, and it serialised the threads. Here a request takes the most
    recently used idle connection to its host (or opens one), sends, reads the whole answer (the
    publisher reads every body anyway; nothing streams) and returns the connection: one short lock.
    Up to ``max_idle`` idle connections per host are kept (the publisher's concurrency, at most 64).

    A reused connection that fails before any answer came (the server closed it while it was idle)
    is retried once on a new connection, as httpcore and urllib3 do; every publisher request is
    idempotent. Errors are httpx's: ``ConnectError``/``ConnectTimeout`` (TLS verification included),
    ``WriteError``, ``ReadError``/``ReadTimeout``, ``RemoteProtocolError``, so :class:`ResilientTransport`
    retries them as before. No proxies (httpx's client never used them with a transport of its own).

    The rules of every client that carries a credential (:mod:`topocast.safeio.http`, docs/security.md)
    hold here too: a request ends by its wall-clock deadline (the read timeout: ``ClientSettings.timeout``)
    whatever the server trickles (:data:`~topocast.safeio.http.WATCHDOG`), an answer over
    ``max_answer_bytes`` is :class:`AnswerTooLarge` and a redirect is :class:`RedirectRefused` (neither
    retried); the bearer token never goes anywhere but the configured server.
    """

    def __init__(
        self,
        ssl_context: ssl.SSLContext | None = None,
        timeout: float = 60.0,
        max_idle: int = 64,
        max_answer_bytes: int = MAX_ANSWER_BYTES,
    ) -> None:
        self._ssl_context = ssl_context
        self._timeout = timeout
        self._max_idle = max_idle
        self._max_answer_bytes = max_answer_bytes
        self._idle: dict[tuple[str, str, int], list[http.client.HTTPConnection]] = {}
        self._lock = threading.Lock()
        self._closed = False

    def _connect(self, key: tuple[str, str, int], timeout: float, at: float) -> http.client.HTTPConnection:
        scheme, host, port = key
        try:
            return open_connection(scheme, host, port, at=at, ssl_context=self._ssl_context, idle_timeout=timeout)
        except TimeoutError as exc:
            raise httpx2.ConnectTimeout(str(exc)) from exc
        except OSError as exc:  # refused, unreachable, TLS verification (ssl.SSLError is an OSError)
            raise httpx2.ConnectError(str(exc)) from exc

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        url = request.url
        scheme = url.scheme
        key = (scheme, url.host, url.port or (443 if scheme == "https" else 80))
        timeouts = request.extensions.get("timeout") or {}
        timeout = timeouts.get("read", self._timeout) or self._timeout
        at = time.monotonic() + timeout  # the request's wall-clock deadline (docs/security.md)
        late = f"no complete answer within the {timeout:g} s deadline"
        target = url.raw_path.decode("ascii")
        body = request.read()
        with self._lock:
            stack = self._idle.get(key)
            conn = stack.pop() if stack else None
        reused = conn is not None
        while True:
            if conn is None:
                conn = self._connect(key, timeouts.get("connect") or timeout, at)
            else:
                conn.sock.settimeout(timeout)
            with WATCHDOG.guard(conn.sock, at) as watch:
                try:
                    conn.putrequest(request.method, target, skip_host=True, skip_accept_encoding=True)
                    for name, value in request.headers.raw:
                        conn.putheader(name, value)
                    conn.endheaders(body or None)
                except TimeoutError as exc:
                    conn.close()
                    raise httpx2.WriteTimeout(str(exc), request=request) from exc
                except OSError as exc:
                    conn.close()
                    if watch.fired:
                        raise httpx2.WriteTimeout(late, request=request) from exc
                    if reused:  # closed while idle: once more on a new connection
                        conn, reused = None, False
                        continue
                    raise httpx2.WriteError(str(exc), request=request) from exc
                try:
                    answer = conn.getresponse()
                    content = read_body(answer, self._max_answer_bytes, f"{request.method} {url.path}")
                    if watch.fired:
                        raise TimeoutError("deadline")
                except HttpCallError as exc:  # too large: not retried (the same answer would come again)
                    conn.close()
                    raise AnswerTooLarge(str(exc), request=request) from None
                except TimeoutError as exc:
                    conn.close()
                    raise httpx2.ReadTimeout(late, request=request) from exc
                except (OSError, http.client.HTTPException) as exc:
                    conn.close()
                    if watch.fired:
                        raise httpx2.ReadTimeout(late, request=request) from exc
                    nothing = isinstance(exc, http.client.RemoteDisconnected | ConnectionResetError | BrokenPipeError)
                    if reused and nothing:
                        conn, reused = None, False
                        continue
                    error = httpx2.ReadError if isinstance(exc, OSError) else httpx2.RemoteProtocolError
                    raise error(_quoted(exc, request), request=request) from exc
            break
        if answer.status in REDIRECTS:
            conn.close()
            moved = origin(urljoin(str(url), answer.getheader("Location") or ""))
            raise RedirectRefused(
                f"{request.method} {url.path} was redirected to {moved[0]}://{moved[1]}:{moved[2]} "
                f"(HTTP {answer.status}); not followed, so the credential stays with {key[0]}://{key[1]}:{key[2]}",
                request=request,
            )
        if answer.will_close:
            conn.close()
        else:
            with self._lock:
                stack = self._idle.setdefault(key, [])
                keep = not self._closed and len(stack) < self._max_idle
                if keep:
                    stack.append(conn)
            if not keep:
                conn.close()
        return httpx2.Response(
            answer.status,
            headers=answer.getheaders(),
            stream=httpx2.ByteStream(content),
            request=request,
            extensions={"http_version": b"HTTP/1.1", "reason_phrase": answer.reason.encode("latin-1", "replace")},
        )

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle = [conn for stack in self._idle.values() for conn in stack]
            self._idle.clear()
        for conn in idle:
            conn.close()


def _quoted(exc: Exception, request: httpx2.Request) -> str:
    """``exc`` for a message: one line, cut short, without the request's credential should the server echo it
    (http.client quotes a status line it cannot parse)."""
    said = " ".join(str(exc).split())[:QUOTED] or type(exc).__name__
    return redact(said, credential_values((k.decode("latin-1"), v.decode("latin-1")) for k, v in request.headers.raw))


@dataclass
class KubeClient:
    """The lightkube client plus a plain httpx client (for discovery) sharing one resilient transport."""

    lk: Client
    http: httpx2.Client
    transport: ResilientTransport
    server: str

    def __post_init__(self) -> None:
        # request_json's direct path: the plain client's default headers, timeout and auth, computed once
        self._headers = list(self.http.headers.raw)
        self._extensions = {"timeout": self.http.timeout.as_dict()}
        self._base = self.server.rstrip("/")  # a kubeconfig's server may end in "/" (httpx's base_url merge drops it)

    def get_json(self, path: str) -> dict[str, Any] | None:
        """GET a non-resource path (discovery). Returns None on 404; other errors raise lightkube ApiError."""
        resp = self.http.get(path)
        if resp.status_code == 404:
            return None
        if resp.is_error:  # the transport made every error body a JSON Status
            raise ApiError(request=resp.request, response=resp)
        data: dict[str, Any] = resp.json()
        return data

    def request_json(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> dict[str, Any]:
        """One request outside lightkube's typed models, for the hot paths (a 10,000-node LIST, one PATCH per
        node): the same transport (rate limit, retries, auth), JSON in and out, errors as lightkube ApiError.
        Decoding a typed ``Node`` per item costs more than the request itself at that scale.

        ``body`` is JSON-encoded (``bytes`` are sent as they are). The request goes straight to the resilient
        transport with the plain client's headers, timeout and auth (its auth flow runs here: a token file is
        re-read on a 401, as before): httpx's client layer around it (URL merging, cookies, redirects, hooks)
        cost about a third of the client's CPU per PATCH and does nothing for these requests. (Proxy variables
        were never followed: httpx ignores them for a client given its own transport.)"""
        content = None if body is None else body if isinstance(body, bytes) else _json_encode(body)
        headers = self._headers
        if content is not None:
            headers = [*headers, (b"Content-Type", content_type.encode("latin-1"))]
        url = self._base + path + ("?" + urlencode(params) if params else "")
        resp = self._send(httpx2.Request(method, url, headers=headers, content=content, extensions=self._extensions))
        if resp.is_error:  # the transport made every error body a JSON Status
            raise ApiError(request=resp.request, response=resp)
        try:
            data: dict[str, Any] = _json_decode(resp.read())
        except (msgspec.DecodeError, RecursionError) as exc:  # a hostile or broken server: one line, not a traceback
            why = "nests too deep" if isinstance(exc, RecursionError) else "is not JSON"
            raise httpx2.DecodingError(f"{method} {path}: the answer {why}", request=resp.request) from None
        return data

    def request_lines(self, path: str, *, params: Mapping[str, str], timeout: float) -> list[dict[str, Any]]:
        """A GET whose answer is newline-delimited JSON (a watch window), as a list; errors as lightkube ApiError.

        ``timeout`` is the read deadline of this call (the window plus a margin): the answer is read whole,
        when the server closes the window (``timeoutSeconds``)."""
        url = self._base + path + "?" + urlencode(params)
        extensions = {"timeout": {**self._extensions["timeout"], "read": timeout}}
        resp = self._send(httpx2.Request("GET", url, headers=self._headers, extensions=extensions))
        if resp.is_error:
            raise ApiError(request=resp.request, response=resp)
        return [_json_decode(line) for line in resp.read().splitlines() if line.strip()]

    def _send(self, request: httpx2.Request) -> httpx2.Response:
        """``request`` through the transport, driven by the plain client's auth flow (as httpx's client does)."""
        auth = self.http.auth
        if auth is None:
            return self.transport.handle_request(request)
        flow = auth.sync_auth_flow(request)
        request = next(flow)
        while True:
            response = self.transport.handle_request(request)
            response.read()
            try:
                request = flow.send(response)
            except StopIteration:
                return response
            response.close()

    def close(self) -> None:
        self.lk.close()  # closes the shared transport too
        self.http.close()


_json_encode = msgspec.json.Encoder().encode


def _json_decode(raw: bytes) -> Any:
    return msgspec.json.decode(raw or b"null")


def _kube_config(conn: K8sConnection, mode: str) -> SingleConfig:
    try:
        if mode == "in-cluster":
            return _single(KubeConfig.from_service_account(conn.service_account_dir), None)
        if mode == "kubeconfig":
            path = conn.kubeconfig or os.environ.get("KUBECONFIG", "").split(os.pathsep)[0] or "~/.kube/config"
            return _single(_read_kubeconfig(Path(path).expanduser()), conn.context)
    except (ConfigError, KeyError, OSError) as exc:
        raise KubernetesConfigError(f"cannot load Kubernetes {mode} configuration: {exc}") from None
    except (AttributeError, TypeError, ValueError) as exc:  # empty, binary or list-shaped files
        why = "not UTF-8 text" if isinstance(exc, UnicodeDecodeError) else "not a kubeconfig mapping"
        raise KubernetesConfigError(f"cannot load Kubernetes {mode} configuration: the file is {why}") from None
    user = User()
    if mode == "token":
        user = User(token=conn.token.get_secret_value() if conn.token else None, token_file=conn.token_file)
    cluster = Cluster(
        server=(conn.endpoint or "").rstrip("/"),
        certificate_auth=conn.ca_file,
        certificate_auth_data=conn.ca_data,
        insecure=conn.insecure_skip_tls_verify,
    )
    return _single(KubeConfig.from_one(cluster=cluster, user=user), None)


def _read_kubeconfig(path: Path) -> KubeConfig:
    """A kubeconfig read like a credential (:func:`topocast.safeio.files.read_credential`): it names the
    server the token goes to and the commands ``exec`` runs, so no link is followed and only root or
    this user may own it or write it, or the directories above it; group- or world-readable is allowed."""
    what = f"cannot load Kubernetes kubeconfig configuration: {path}"
    if not path.is_file():  # lightkube's wording for a missing file, kept
        raise ConfigError(f"Configuration file {path} not found")
    try:
        raw = read_credential(path, MAX_YAML_BYTES, "kubeconfig", private=False, root_links=True)
    except UnsafePathError as exc:
        raise KubernetesConfigError(f"cannot load Kubernetes kubeconfig configuration: {exc}") from None
    return KubeConfig.from_dict(load_yaml(raw.decode("utf-8"), what, KubernetesConfigError), fname=path)


def _single(config: KubeConfig, context: str | None) -> SingleConfig:
    single = config.get(context)
    if single is None:
        raise KubernetesConfigError(f"kubeconfig has no context {context or '(current)'}")
    return single


def build_client(
    conn: K8sConnection,
    settings: ClientSettings | None = None,
    *,
    token_source: TokenSource | None = None,
    inner_transport: httpx2.BaseTransport | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> KubeClient:
    """Construct the client for ``conn``. EKS/GKE endpoints are looked up when not configured."""
    settings = settings or ClientSettings()
    mode = conn.resolved_auth()
    if mode in ("eks", "gke") and not conn.endpoint:
        found = (
            eks_cluster_endpoint(conn.eks_cluster or "", conn.region or "")
            if mode == "eks"
            else gke_cluster_endpoint(conn.gke_cluster or "")
        )
        conn = conn.model_copy(update={"endpoint": found.endpoint, "ca_data": conn.ca_data or found.ca_data})
    if token_source is None and mode == "eks":
        token_source = make_eks_token_source(conn.eks_cluster or "", conn.region or "")
    elif token_source is None and mode == "gke":
        token_source = make_gke_token_source()
    config = _kube_config(conn, mode)
    user = config.user if config.user is not None else User()
    config = config._replace(user=user)
    if inner_transport is None:
        verify: ssl.SSLContext | None = None  # plain HTTP
        if config.cluster.server.startswith("https://"):
            try:
                verify = verify_cluster(config.cluster, user, config.abs_file)  # CA + client certificate
            except (OSError, ssl.SSLError, ConfigError) as exc:
                raise KubernetesConfigError(f"cannot set up TLS for {config.cluster.server}: {exc}") from None
        inner_transport = KeepAliveTransport(verify, settings.timeout)
    transport = ResilientTransport(inner_transport, settings, token_source, sleep=sleep)
    timeout = httpx2.Timeout(settings.timeout)
    lk = Client(config, timeout=timeout, field_manager=settings.field_manager, transport=transport)
    # Discovery goes through a plain httpx client with the same transport and the kubeconfig's user auth.
    http = httpx2.Client(
        base_url=config.cluster.server, transport=transport, timeout=timeout, auth=user_auth(config.user)
    )
    return KubeClient(lk=lk, http=http, transport=transport, server=config.cluster.server)
