"""Move nodes on a running slurmctld through slurmrestd (Slurm's REST API), v0.0.43 to v0.0.45.

The live plan is :func:`topocast.slurm.live.plan_live`'s (only adds and moves, below the
share limit); this module only carries it over HTTP instead of ``scontrol update``:

* one bulk ``POST /slurm/vX/nodes/`` per destination, ``{"name": [nodes], "topology_str": spec}``
  (``name`` must be a list: a string is accepted with a warning, a ``node_names`` key is ignored
  and the call fails 422, error 2018);
* then every changed node's ``topology`` read back (``GET /slurm/vX/node/{name}``, or one
  ``GET /slurm/vX/nodes/`` when many changed) and compared with the plan, topology by topology;
* on any mismatch or failed call the moved nodes go back (:func:`topocast.slurm.live.apply_moves`).
  A bulk update is **not atomic** (26.05: a list with an unknown node moves the others, then
  answers 422), so the failed call's nodes are moved back too.

Checked against slurmrestd 26.05.5 (tests/test_slurm_rest.py). The versions differ where this
module reads them: ``topology_str`` / ``node.topology`` exist from v0.0.43 (Slurm 25.05) on;
v0.0.45's ping answer has ``responding`` / ``status`` instead of ``pinged: "UP"``. The newest
of :data:`SUPPORTED` the server offers is picked by probing ``GET /slurm/vX/diag/`` newest first
(which also checks the token; ``/openapi/v3``, whose ``info.x-slurm.data_parsers`` lists the
versions, is only read to explain a server that offers none).

Authentication is a Slurm JWT (``scontrol token``) sent as ``X-SLURM-USER-TOKEN`` with the
user it was issued to as ``X-SLURM-USER-NAME``; :mod:`topocast.slurm.rest_token` reads it from a
file or a secret store. The token is held by :class:`~topocast.slurm.rest_token.SlurmToken`,
whose repr hides it; no message of this module contains it (what slurmrestd answers is quoted
with the token taken out, should it echo it). A refusal says whether the token's ``exp`` had
passed, and a token already expired is warned about before the first call.

Every call goes through :func:`topocast.safeio.http.call` (docs/security.md): no redirect is
followed, so the token never leaves ``url``; ``timeout`` is each call's wall-clock deadline; the
answer is capped by what the call can need (1 MiB for diag, a ping, one node or a POST; 64 MiB
for a node listing, decoded as each node's name and topology only).
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote, urlparse

import msgspec

from topocast.errors import TopocastError
from topocast.model.hostlist import compact_str, expand
from topocast.safeio.http import CallPolicy, HttpCallError, call, redact
from topocast.slurm.converge import ControllerView
from topocast.slurm.install import wait_until
from topocast.slurm.live import LivePlan
from topocast.slurm.rest_token import SlurmToken
from topocast.slurm.scontrol import POWER_SAVING_FLAGS

__all__ = ["SUPPORTED", "RestUpdater", "SlurmRest", "SlurmRestError", "connect"]

#: the API versions with ``update_node_msg.topology_str`` and ``node.topology``, oldest first
SUPPORTED = ("v0.0.43", "v0.0.44", "v0.0.45")
#: above this many changed nodes the read-back is one ``GET .../nodes/`` instead of one GET each
READ_EACH_MAX = 64
KiB, MiB = 1024, 1024 * 1024
#: the largest answer of a small call (diag is ~3 KB, a ping or a node update less; one node ~4 KB)
SMALL_ANSWER_BYTES = 1 * MiB
#: ``/openapi/v3`` (several MB), read only to explain a server that offers no supported version
OPENAPI_ANSWER_BYTES = 16 * MiB
#: a ``GET .../nodes/`` listing: 26.05 answers ~3 KB a node, so this allows ~16 KB a node ...
LISTING_BYTES_PER_NODE = 16 * KiB
#: ... and at most this much (~20,000 nodes); only each node's name and topology are decoded
#: (msgspec), so the peak stays near the answer's size, inside the agent unit's MemoryMax=512M
MAX_LISTING_BYTES = 64 * MiB

log = logging.getLogger(__name__)


class SlurmRestError(TopocastError):
    """slurmrestd refused or failed a call; ``status`` is the HTTP status (None: no answer)."""

    def __init__(self, message: str, status: int | None = None, errors: Iterable[int] = ()) -> None:
        super().__init__(message)
        self.status = status
        self.errors = list(errors)


def _slurm_errors(body: Any) -> list[dict[str, Any]]:
    errors = body.get("errors") if isinstance(body, dict) else None
    return [e for e in errors if isinstance(e, dict)] if isinstance(errors, list) else []


def _describe(errors: list[dict[str, Any]]) -> str:
    parts = []
    for e in errors[:3]:
        number = e.get("error_number")
        text = e.get("error") or ""
        desc = e.get("description") or ""
        parts.append(
            " ".join(str(x) for x in (f"error {number}" if number else "", text, f"({desc})" if desc else "") if x)
        )
    return "; ".join(parts)


class _Node(msgspec.Struct):
    name: str
    topology: str | None = None
    state: list[str] = []


class _Nodes(msgspec.Struct):
    """What a node listing is read for: every other field is skipped while decoding, never held."""

    nodes: list[_Node] = []
    errors: list[dict[str, Any]] = []
    warnings: list[dict[str, Any]] = []


@dataclass
class SlurmRest:
    """A slurmrestd at ``url`` (``http(s)://host:port``) speaking API ``version`` (:func:`connect` picks it).

    Every call goes through :func:`topocast.safeio.http.call`: no redirect is followed (the token
    stays with ``url``), ``timeout`` is the wall-clock deadline of each call, and each answer is
    capped by what the call can need (:data:`SMALL_ANSWER_BYTES`, :data:`MAX_LISTING_BYTES`).
    """

    url: str
    token: SlurmToken
    version: str = SUPPORTED[-1]
    #: seconds each call may take, from connecting to the last byte of the answer
    timeout: float = 30.0
    #: TLS trust for an https URL (None: the system's CAs)
    ssl_context: ssl.SSLContext | None = field(default=None, repr=False)
    #: (major, minor) of the Slurm behind it, from the openapi document or a ping
    slurm_version: tuple[int, int] | None = None

    def __post_init__(self) -> None:
        parsed = urlparse(self.url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise SlurmRestError(f"{self.url}: not an http(s)://host:port slurmrestd URL")
        self.url = self.url.rstrip("/")
        self._warned_expiry = False

    # ----- HTTP ---------------------------------------------------------------------------------
    def call(
        self, method: str, path: str, body: Any = None, *, what: str | None = None, max_bytes: int = SMALL_ANSWER_BYTES
    ) -> Any:
        """``method path`` with the token; the JSON answer, or :class:`SlurmRestError` naming the call.

        ``max_bytes``: the largest answer this call can need (default: a small one)."""
        answer = self._exchange(method, path, body, what, max_bytes, None)
        if not isinstance(answer, dict):
            where = f"slurmrestd {self.url}: {what or f'{method} {path}'}"
            raise SlurmRestError(f"{where}: the answer is not a JSON object")
        return answer

    def _exchange(self, method: str, path: str, body: Any, what: str | None, max_bytes: int, shape: Any) -> Any:
        """One call; its answer decoded as ``shape`` (a msgspec type; None: any JSON)."""
        what = what or f"{method} {path}"
        where = f"slurmrestd {self.url}: {what}"
        self._warn_if_expired()
        headers = {"Accept": "application/json", **self.token.headers()}
        data = None
        if body is not None:
            data = msgspec.json.encode(body)
            headers["Content-Type"] = "application/json"
        policy = CallPolicy(deadline=self.timeout, max_answer_bytes=max_bytes)
        try:
            got = call(method, self.url + path, what=where, policy=policy, headers=headers, body=data,
                       ssl_context=self.ssl_context)  # fmt: skip
        except HttpCallError as exc:
            raise SlurmRestError(str(exc)) from None
        status, raw = got.status, got.body
        answer: Any
        try:
            answer = msgspec.json.decode(raw, type=shape) if shape is not None and status < 300 else _json(raw)
        except msgspec.ValidationError as exc:
            raise SlurmRestError(
                f"{where}: HTTP {status} but the answer is not what slurmrestd sends ({self._quote(str(exc))})", status
            ) from None
        except msgspec.DecodeError:
            answer = None
        except RecursionError:  # msgspec recurses into values it skips too
            raise SlurmRestError(
                f"{where}: HTTP {status} but the answer nests too deep to be slurmrestd's", status
            ) from None
        if isinstance(answer, msgspec.Struct):
            errors = [e for e in getattr(answer, "errors", []) if isinstance(e, dict)]
        else:
            errors = _slurm_errors(answer)
        if status in (401, 403) or any(e.get("error_number") == 1007 for e in errors) or status == 511:
            detail = _describe(errors) or raw[:80].decode("utf-8", "replace").strip() or "no detail"
            raise SlurmRestError(
                f"{where}: {self._refusal()} (HTTP {status}: {self._quote(detail)})",
                status,
                [e.get("error_number", 0) for e in errors],
            )
        if status >= 300 or errors:
            detail = _describe(errors) or (raw[:200].decode("utf-8", "replace").strip() if answer is None else "")
            raise SlurmRestError(
                f"{where}: HTTP {status}{': ' + self._quote(detail) if detail else ''}",
                status,
                [e.get("error_number", 0) for e in errors],
            )
        if answer is None:
            raise SlurmRestError(f"{where}: HTTP {status} but the answer is not JSON", status)
        return answer

    def _quote(self, said: str) -> str:
        """What slurmrestd said, for a message: one line, without the token should it echo it."""
        return redact(_one_line(said), [self.token.value])

    def _refusal(self) -> str:
        """Why slurmrestd refused the token: expired (its ``exp`` claim is past) or not accepted at all."""
        user = self.token.user or "?"
        expires = self.token.expires
        if expires is not None and expires <= datetime.now(UTC):
            return f"the token for user {user} was refused: it expired at {_utc(expires)}; issue a new one"
        return f"the token for user {user} was refused (wrong key or user)"

    def _warn_if_expired(self) -> None:
        expires = self.token.expires
        if not self._warned_expiry and expires is not None and expires <= datetime.now(UTC):
            self._warned_expiry = True
            log.warning("the slurmrestd token from %s expired at %s; slurmrestd will refuse it", self.token.source,
                        _utc(expires))  # fmt: skip

    def _path(self, rest: str) -> str:
        return f"/slurm/{self.version}/{rest}"

    # ----- what the live path needs ----------------------------------------------------------------
    def ping(self) -> tuple[int, int] | None:
        """The controller answers (raises otherwise); returns its Slurm (major, minor)."""
        answer = self.call("GET", self._path("ping/"))
        pings = answer.get("pings") or []
        # v0.0.43/44: "pinged": "UP"; v0.0.45: "responding": true, "status": "No error"
        if not any(isinstance(p, dict) and (p.get("responding") or p.get("pinged") == "UP") for p in pings):
            status = "; ".join(str(p.get("status")) for p in pings if isinstance(p, dict) and p.get("status"))
            if "authentication" in status.lower():  # v0.0.45 says so in the ping itself
                raise SlurmRestError(
                    f"slurmrestd {self.url}: ping: the token for user {self.token.user or '?'} was refused ({status})",
                    401,
                )
            raise SlurmRestError(f"slurmrestd {self.url}: slurmctld does not respond ({status or pings})")
        self.slurm_version = _meta_version(answer) or self.slurm_version
        return self.slurm_version

    def check_token(self) -> dict[str, Any]:
        """A call slurmctld answers only for an accepted token (``GET .../diag/``: 3 KB, where the node
        listing of a 2,000-node cluster takes seconds to serialize); its answer."""
        return self.call("GET", self._path("diag/"), what="GET diag (token check)")

    def nodes(self) -> dict[str, str]:
        """node name -> its ``topology`` ("" when placed only by the topology file), every node."""
        answer = self._exchange("GET", self._path("nodes/"), None, "GET nodes", MAX_LISTING_BYTES, _Nodes)
        return {node.name: node.topology or "" for node in answer.nodes}

    def node_listing(self) -> dict[str, dict[str, Any]]:
        """node name -> its ``topology`` and ``state`` flags, every node (one ``GET .../nodes/``, every other
        field skipped while decoding)."""
        answer = self._exchange("GET", self._path("nodes/"), None, "GET nodes", MAX_LISTING_BYTES, _Nodes)
        return {node.name: {"name": node.name, "topology": node.topology, "state": node.state} for node in answer.nodes}

    def node_topologies(self, names: Iterable[str]) -> dict[str, str]:
        """``topology`` of each of ``names`` (one GET each up to :data:`READ_EACH_MAX`, else the listing)."""
        return {n: str(r.get("topology") or "") for n, r in self.node_records(names).items()}

    def node_records(self, names: Iterable[str]) -> dict[str, dict[str, Any]]:
        """The node objects of ``names`` (one GET each up to :data:`READ_EACH_MAX`, else the listing)."""
        wanted = list(dict.fromkeys(names))
        if len(wanted) > READ_EACH_MAX:
            every = self.node_listing()
            return {n: every[n] for n in wanted if n in every}
        out: dict[str, dict[str, Any]] = {}
        for name in wanted:
            answer = self.call("GET", self._path(f"node/{quote(name, safe='')}"), what=f"GET node {name}")
            out.update(_records(answer))
        return out

    def set_topology(self, names: list[str], spec: str) -> None:
        """One bulk ``POST .../nodes/``: ``names`` get ``Topology=spec``."""
        what = f"POST nodes {compact_str(names)} topology_str={spec!r}"
        answer = self.call("POST", self._path("nodes/"), {"name": names, "topology_str": spec}, what=what)
        warnings = [w for w in answer.get("warnings") or [] if isinstance(w, dict)]
        if warnings:  # e.g. a field the data parser did not take: the update may not have happened
            raise SlurmRestError(f"slurmrestd {self.url}: {what}: warning {warnings[0].get('description')}")

    def reconfigure(self) -> None:
        self.call("GET", self._path("reconfigure/"), what="reconfigure")


def _json(raw: bytes) -> Any:
    """Any JSON answer (an empty body is ``{}``); :class:`msgspec.DecodeError` when it is not JSON."""
    return msgspec.json.decode(raw) if raw.strip() else {}


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _utc(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _meta_version(answer: dict[str, Any]) -> tuple[int, int] | None:
    version = ((answer.get("meta") or {}).get("slurm") or {}).get("version") or {}
    return _version(version)


def _version(version: Any) -> tuple[int, int] | None:
    try:
        return int(version["major"]), int(version["minor"])
    except (KeyError, TypeError, ValueError):
        return None


def _records(answer: dict[str, Any]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for node in answer.get("nodes") or []:
        if isinstance(node, dict) and isinstance(node.get("name"), str):
            out[node["name"]] = node
    return out


def _offered(document: dict[str, Any]) -> list[str]:
    """The versions an ``/openapi/v3`` document serves node updates for."""
    paths = document.get("paths") or {}
    return [v for v in SUPPORTED if f"/slurm/{v}/nodes/" in paths and f"/slurm/{v}/node/{{node_name}}" in paths]


def connect(
    url: str,
    token: SlurmToken,
    *,
    version: str | None = None,
    timeout: float = 30.0,
    ssl_context: ssl.SSLContext | None = None,
) -> SlurmRest:
    """A client on the newest API version of :data:`SUPPORTED` the server offers (or ``version``),
    with the token checked.

    The versions are probed newest first with ``GET /slurm/vX/diag/`` (a 404 means not offered):
    one small call that also proves the token, where ``/openapi/v3`` is a document of several MB
    that slurmrestd serves without asking slurmctld (so it cannot check the token) and a ping
    takes ~20 s to fail on a refused one (26.05). ``/openapi/v3`` is read only to say what a server
    that offers none of them does offer. Raises :class:`SlurmRestError` when the server is
    unreachable, refuses the token or offers none of the supported versions (Slurm < 25.05 has no
    ``topology_str``).
    """
    if version is not None and version not in SUPPORTED:
        raise SlurmRestError(f"API version {version!r} is not supported (use one of {', '.join(SUPPORTED)})")
    client = SlurmRest(url, token, version or SUPPORTED[-1], timeout, ssl_context)
    for candidate in [version] if version else reversed(SUPPORTED):
        client.version = candidate
        try:
            answer = client.check_token()
        except SlurmRestError as exc:
            if exc.status == 404:
                continue
            raise
        client.slurm_version = _meta_version(answer)
        return client
    try:
        document = client.call("GET", "/openapi/v3", what="GET /openapi/v3", max_bytes=OPENAPI_ANSWER_BYTES)
        info = document.get("info") or {}
        parsers = [
            p.get("plugin") for p in (info.get("x-slurm") or {}).get("data_parsers") or [] if isinstance(p, dict)
        ]
        offered = (
            f"{info.get('version', 'unknown version')}, offers {', '.join(sorted(map(str, parsers))) or 'nothing'}"
        )
    except SlurmRestError:
        offered = "no /openapi/v3 either"
    wanted = version or ", ".join(SUPPORTED)
    raise SlurmRestError(
        f"slurmrestd {client.url} ({offered}) answers none of {wanted}: node topology over REST needs Slurm >= 25.05"
    )


@dataclass
class RestUpdater:
    """:class:`topocast.slurm.live.NodeUpdater` over slurmrestd: moves by bulk POST, checked by reading back."""

    client: SlurmRest
    call_name: str = "slurmrestd POST nodes"
    check_step: str = "read-back"
    uses_scontrol: bool = False
    #: how long a reconfigure may take until slurmctld answers a ping again
    reconfigure_timeout: float = 10.0
    #: the last node listing of this run (``GET .../nodes/``: 24.5 MB at 10,000 nodes, read once where
    #: it serves: the defined nodes, the power states of many nodes, the drift view refreshes it)
    _listing: dict[str, dict[str, Any]] | None = field(default=None, repr=False)

    def version(self) -> tuple[int, int] | None:
        return self.client.slurm_version or self.client.ping()

    def _every(self, fresh: bool = False) -> dict[str, dict[str, Any]]:
        if self._listing is None or fresh:
            self._listing = self.client.node_listing()
        return self._listing

    def defined(self) -> list[str] | None:
        return sorted(self._every())

    def move(self, hosts: str, spec: str) -> None:
        self.client.set_topology(expand(hosts), spec)

    def check(self, plan: LivePlan, text: str, known: list[str]) -> list[str]:
        """Every changed node's ``topology`` as the controller reads it back, against the plan."""
        wanted = {node: spec for hosts, spec in plan.moves for node in expand(hosts)}
        shown = self.client.node_topologies(wanted)
        problems = []
        for node, spec in wanted.items():
            got = shown.get(node)
            if got is None:
                problems.append(f"node {node} is not in slurmrestd's answer")
            elif set(got.split(",")) != set(spec.split(",")):
                problems.append(f"node {node} reads back topology {got!r}, not {spec!r}")
        if len(problems) > 3:  # the report shows three
            problems[2:] = [f"{problems[2]} (and {len(problems) - 3} more nodes)"]
        return problems

    def reconfigure(self) -> None:
        """``GET .../reconfigure/``, then pings until slurmctld answers again (it rereads its files)."""
        self.client.reconfigure()
        errors: list[str] = []

        def answers() -> bool:
            try:
                self.client.ping()
            except SlurmRestError as exc:
                errors[:] = [str(exc)]
                return False
            return True

        if not wait_until(answers, self.reconfigure_timeout, pause=0.2):
            raise SlurmRestError(
                f"slurmrestd {self.client.url}: slurmctld did not answer within {self.reconfigure_timeout:g} s "
                f"after the reconfigure ({errors[0] if errors else 'no answer'})"
            )

    def view(self, topologies: list[tuple[str, str]]) -> ControllerView:
        """The node listing's live ``topology`` values: a partial view (slurmrestd shows no switch or
        block, and ``""`` for a node the file the controller read places)."""
        every = self._every(fresh=True)
        live = {n: str(r.get("topology")) for n, r in every.items() if r.get("topology")}
        return ControllerView(live, False, "slurmrestd GET nodes (live Topology= only)")

    def power_saving(self, nodes: list[str]) -> list[str]:
        if len(nodes) > READ_EACH_MAX or self._listing is not None:
            every = self._every()
            records = {n: every[n] for n in nodes if n in every}
        else:
            records = self.client.node_records(nodes)
        return sorted(n for n, r in records.items() if POWER_SAVING_FLAGS & {str(f) for f in r.get("state") or []})


def updater_from_cli(via: list[str] | None, token_from: str | None) -> RestUpdater | None:
    """``--via slurmrestd URL --token-from SRC`` -> a connected :class:`RestUpdater` (None without --via).

    Connecting first (version discovery, a ping with the token) makes a bad URL or token one clear
    error before anything is fetched or installed.
    """
    from topocast.slurm.rest_token import read_token

    if via is None:
        if token_from is not None:
            raise TopocastError("--token-from needs --via slurmrestd URL")
        return None
    kind, url = via
    if kind != "slurmrestd":
        raise TopocastError(f"--via {kind!r}: the only live path besides scontrol is 'slurmrestd URL'")
    if token_from is None:
        raise TopocastError(
            "--via slurmrestd needs --token-from (a file, ssm:///, secretsmanager://, an ARN or gsm://)"
        )
    # connect checks the token: a refused one fails here, before anything is fetched or installed
    return RestUpdater(connect(url, read_token(token_from)))
