"""A small in-process fake kube-apiserver that speaks the real HTTP/JSON wire protocol.

No real kube-apiserver can run on this machine (see offline-tooling.md §5), so the
Kubernetes publisher is tested against this stdlib ``ThreadingHTTPServer``, driven
by the *real* lightkube client over real sockets. It records every request so tests
can count API calls and check RBAC.

What it implements
------------------
* Discovery: ``/version``, ``/api``, ``/api/v1``, ``/apis``, ``/apis/<group>``,
  ``/apis/<group>/<version>`` (trailing slashes accepted). Custom resource kinds are
  configurable per server (``crds=``): absent ones give 404 in discovery and on use.
* Resources: ``nodes`` and ``namespaces`` (cluster-scoped), ``configmaps``
  (namespaced; writes into a namespace that does not exist give 404), and any
  cluster- or namespace-scoped custom resource from ``crds``. Several served
  versions of one CRD share storage (no conversion: the objects are the same shape).
* DRA ``resourceslices`` (``resource.k8s.io`` v1, v1beta2, v1beta1; pass :data:`RESOURCE_SLICES` in
  ``crds=``): list with ``limit`` + ``continue`` paging and the ``spec.driver`` / ``spec.nodeName``
  field selectors. Not implemented for them: conversion between versions (v1beta1 keeps a device's
  attributes under ``basic``; a test stores the shape of the version it lists), watch, the
  ``spec.pool`` generation rules and the ``/status`` of claims (no ResourceClaims at all).
* Verbs: get, list (``labelSelector`` with ``=``, ``==``, ``!=``, ``in``, ``notin``,
  exists, ``!``-not-exists; ``fieldSelector`` on ``metadata.name`` /
  ``metadata.namespace``; ``limit`` + ``continue`` paging), create (POST), update
  (PUT), patch, delete.
* PATCH content types: ``application/merge-patch+json`` (RFC 7386),
  ``application/strategic-merge-patch+json`` (a merge patch where ``null`` deletes;
  rejected with 415 on custom resources, as the real server does),
  ``application/json-patch+json`` (RFC 6902: add, remove, replace, move, copy,
  test) and ``application/apply-patch+yaml`` (server-side apply: ``fieldManager``
  required, ``force``, creates absent objects — logged with the implied RBAC verb
  ``create``, which the real server also checks — per-manager field ownership with
  conflicts → 409 unless forced, fields a manager stops applying are removed when
  no other manager owns them, ``metadata.managedFields`` in responses).
* ``metadata.resourceVersion`` from one global counter, bumped only by writes that
  change something (a no-op apply leaves it alone); a write whose body carries a
  stale ``metadata.resourceVersion`` gets 409 Conflict. ``uid``,
  ``creationTimestamp`` and, for custom resources, ``generation`` are filled in.
* Label key/value validation on every write, and a Node's ``spec.taints`` (key, value, effect, unique by
  key and effect) (422 Invalid, like the real server).
* Errors are ``Status`` JSON bodies with the real reasons (NotFound, Conflict,
  AlreadyExists, BadRequest, Invalid, UnsupportedMediaType, MethodNotAllowed,
  TooManyRequests, InternalError, ServiceUnavailable, Unauthorized) and
  ``Content-Type: application/json``.
* Fault injection: :meth:`FakeKubeApiServer.inject` (status for the next N matching
  requests, optionally after skipping K, with ``Retry-After``), :meth:`fail_after`
  (every request after K fails), :meth:`refuse` (every write to the named nodes is
  refused, as an admission policy on one node pool does) and ``action`` hooks run
  before a matching request (e.g. a concurrent writer bumping an object to provoke a
  409). An injected answer is a real ``Status``: ``kind: Status``, ``code``, the
  ``reason`` (the code's own unless given; a webhook may send ``""``), the
  ``message`` and, for a request naming an object, ``details`` with its ``name`` and
  ``kind`` (the resource), as kube-apiserver fills them.
* A request log (:attr:`FakeKubeApiServer.requests`): method, path, query, content
  type, Authorization header, the Kubernetes verb/group/resource/namespace/name and
  the response status.
* Optional bearer-token check (``token=``) → 401, and optional TLS (``tls=(cert, key)``).
* ``dryRun=All`` on create, update, patch and delete is honoured: the request is
  validated and answered exactly as a real one (the would-be object, the Status),
  but nothing is stored and no resourceVersion is used up. Any other ``dryRun``
  value is rejected with 400, as kube-apiserver does.
* Behaviours of other servers, to test the client against: ``error_content_type``
  (e.g. ``application/json; charset=utf-8``, what kmock sends) and
  ``ignore_label_selector`` (a server or proxy that returns every object).
* Load: ``latency`` seconds slept per request (outside the lock, so concurrent
  requests overlap as on a real server) and ``rate_limit=(qps, burst)``, a token
  bucket shared by all clients that answers 429 with ``Retry-After: 1`` when empty,
  like API Priority and Fairness rejecting a flow whose queue is full; with it, every
  answer carries APF's ``X-Kubernetes-PF-FlowSchema-UID`` / ``-PriorityLevel-UID``
  headers, as a server with APF enabled sends (``apf_headers``, default: with a rate limit).
  ``throttle_log`` keeps the monotonic time of each 429 (the bench counts them per second).

* Watch (``?watch=1``) of any kind, from a ``resourceVersion``: every write and delete after it is an
  ``ADDED`` / ``MODIFIED`` / ``DELETED`` event (a delete takes a resourceVersion of its own, as in etcd),
  newline-delimited JSON; ``allowWatchBookmarks=true`` ends the answer with a ``BOOKMARK`` carrying the
  current resourceVersion; the answer closes after ``timeoutSeconds`` (an integer, as the real server
  parses it; default 1). A ``resourceVersion`` older than the oldest event kept (:meth:`compact`, as etcd
  compaction does) is answered with one ``ERROR`` event holding a 410 ``Expired`` Status (HTTP 200, as
  kube-apiserver does for a watch). :meth:`drop_watches` closes the next N watch connections with no
  answer at all (a load balancer cutting idle streams). Events are sent when the window ends, not as
  they happen (the client reads answers whole); label and field selectors are not applied to watches.
* ``coordination.k8s.io`` ``leases`` when :data:`LEASES` is passed in ``crds=`` (namespaced; leader
  election's optimistic concurrency is the stale-``resourceVersion`` 409 below).

What it does not implement
--------------------------
authorization (RBAC is checked by the tests from the request log instead);
admission webhooks and CRD schema validation (inject a 422 to simulate a rejection);
OpenAPI, protobuf/CBOR and aggregated discovery; subresources (``/status``,
``/scale``); strategic-merge list semantics (``patchMergeKey``, ``$patch``
directives: lists are replaced); field selectors on other fields;
generateName, finalizers, graceful deletion and deletecollection; client
certificates; list snapshots (a ``continue`` token is a position, not a
resourceVersion: no 410 Gone). Field ownership is approximated: lists are owned
atomically and ``managedFields`` entries carry no timestamps. A dry-run answer
carries the would-be resourceVersion (a real server leaves it unchanged). The
rate limit is a single token bucket, not API Priority and Fairness itself (no
priority levels, flow distinguishers, queues or seat counting); it only shows
what a client sees when the server sheds load: 429 and ``Retry-After``.
"""

from __future__ import annotations

import base64
import contextvars
import copy
import json
import re
import socket
import ssl
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import yaml

JSON = dict[str, Any]
Path = tuple[str, ...]
_MISSING = object()
#: set while a ``dryRun=All`` request is served: its writes leave no watch event
_IN_DRY_RUN: contextvars.ContextVar[bool] = contextvars.ContextVar("dry_run")


# ----- resource types ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ResourceType:
    """One kind the server knows: group, served versions, plural and scope."""

    group: str
    versions: tuple[str, ...]
    kind: str
    plural: str
    namespaced: bool = False

    @property
    def custom(self) -> bool:
        return self.group != ""

    def api_version(self, version: str) -> str:
        return f"{self.group}/{version}" if self.group else version


NODES = ResourceType("", ("v1",), "Node", "nodes")
NAMESPACES = ResourceType("", ("v1",), "Namespace", "namespaces")
CONFIGMAPS = ResourceType("", ("v1",), "ConfigMap", "configmaps", namespaced=True)
CORE = (NODES, NAMESPACES, CONFIGMAPS)

LEASES = ResourceType("coordination.k8s.io", ("v1",), "Lease", "leases", namespaced=True)
KUEUE_TOPOLOGY = ResourceType("kueue.x-k8s.io", ("v1beta2", "v1beta1"), "Topology", "topologies")
KAI_TOPOLOGY = ResourceType("kai.scheduler", ("v1alpha1",), "Topology", "topologies")
VOLCANO_HYPERNODE = ResourceType("topology.volcano.sh", ("v1alpha1",), "HyperNode", "hypernodes")
DEFAULT_CRDS = (KUEUE_TOPOLOGY, KAI_TOPOLOGY, VOLCANO_HYPERNODE)
#: DRA (resource.k8s.io, a built-in group served like one more kind here): pass in ``crds=`` to serve it
RESOURCE_SLICES = ResourceType("resource.k8s.io", ("v1", "v1beta2", "v1beta1"), "ResourceSlice", "resourceslices")
#: field selectors a kind supports besides metadata.name / metadata.namespace (kube-apiserver's field labels)
FIELD_LABELS = {"resourceslices": ("spec.driver", "spec.nodeName")}

#: Fields the server owns; never part of a manager's field set.
_SYSTEM_META = {"name", "namespace", "resourceVersion", "uid", "generation", "creationTimestamp", "managedFields"}


class ApiFailure(Exception):
    """Raised inside the handler to answer with a Status body."""

    def __init__(self, code: int, reason: str, message: str, details: JSON | None = None) -> None:
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details


def status_body(code: int, reason: str, message: str, details: JSON | None = None) -> JSON:
    body: JSON = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message}
    body["reason"] = reason
    body["details"] = details or {}
    body["code"] = code
    return body


_REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    502: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


# ----- request log and faults --------------------------------------------------------------------------


@dataclass
class LoggedRequest:
    """One request as the server saw it (``verb`` is the Kubernetes RBAC verb, '' for discovery)."""

    method: str
    path: str
    query: dict[str, str]
    content_type: str
    authorization: str
    verb: str = ""
    group: str = ""
    version: str = ""
    resource: str = ""
    namespace: str | None = None
    name: str | None = None
    status: int = 0
    body: Any = None
    #: RBAC verbs the real server also checks: an apply that creates is authorized as "create" too
    implied_verbs: list[str] = field(default_factory=list)

    @property
    def is_discovery(self) -> bool:
        return self.verb == ""


@dataclass
class Fault:
    """Answer matching requests with ``status`` (or just run ``action``) ``count`` times after ``skip``."""

    status: int | None
    count: int | None = 1  # None = forever
    skip: int = 0
    retry_after: float | None = None
    match: Callable[[LoggedRequest], bool] | None = None
    action: Callable[[FakeKubeApiServer], None] | None = None
    message: str = "injected fault"
    reason: str | None = None  # None: the code's own reason


@dataclass
class _Stored:
    obj: JSON
    #: (manager, operation) -> owned leaf paths
    managers: dict[tuple[str, str], set[Path]] = field(default_factory=dict)
    managed_fields: list[JSON] | None = None  # rendered form, built on first read


# ----- label selectors and validation -----------------------------------------------------------------

_LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def label_errors(labels: Any) -> list[str]:
    """Why these labels would be rejected by a real API server (empty list = valid)."""
    if labels is None:
        return []
    if not isinstance(labels, dict):
        return ["metadata.labels: must be a map of string to string"]
    errs = []
    for key, value in labels.items():
        prefix, _, name = key.rpartition("/")
        if (prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix))) or (
            len(name) > 63 or not _LABEL_NAME.match(name)
        ):
            errs.append(f'metadata.labels: Invalid value: "{key}": name part must be a valid qualified name')
        if not isinstance(value, str):
            errs.append(f'metadata.labels: Invalid value: {value!r}: label values must be strings (key "{key}")')
        elif len(value) > 63:
            errs.append(f'metadata.labels: Invalid value: "{value}": must be no more than 63 characters')
        elif value and not _LABEL_NAME.match(value):
            errs.append(
                f'metadata.labels: Invalid value: "{value}": a valid label must consist of alphanumeric '
                "characters, '-', '_' or '.', and must start and end with an alphanumeric character"
            )
    return errs


#: the effects a taint may have (core/v1 ``TaintEffect``)
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


def taint_errors(taints: Any) -> list[str]:
    """Why a Node's ``spec.taints`` would be rejected (Kubernetes ``validateNodeTaints``, pkg/apis/core/validation):
    the key a qualified name, the value a label value, the effect one of :data:`TAINT_EFFECTS`, and no two taints
    with the same key and effect ("taints must be unique by key and effect pair")."""
    if taints is None:
        return []
    if not isinstance(taints, list):
        return ["spec.taints: must be a list"]
    errs: list[str] = []
    seen: set[tuple[str, str]] = set()
    for i, taint in enumerate(taints):
        where = f"spec.taints[{i}]"
        if not isinstance(taint, dict) or not isinstance(taint.get("key"), str):
            errs.append(f"{where}.key: Required value")
            continue
        key, value, effect = taint["key"], taint.get("value", ""), taint.get("effect")
        errs += [e.replace("metadata.labels", where) for e in label_errors({key: value if value is not None else ""})]
        if effect not in TAINT_EFFECTS:
            errs.append(f'{where}.effect: Unsupported value: "{effect}": supported values: {", ".join(TAINT_EFFECTS)}')
        if (key, str(effect)) in seen:
            errs.append(f"{where}: Duplicate value: taints must be unique by key and effect pair")
        seen.add((key, str(effect)))
    return errs


def _split_requirements(selector: str) -> list[str]:
    parts, depth, cur = [], 0, ""
    for ch in selector:
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return [p.strip() for p in parts if p.strip()]


def parse_label_selector(selector: str) -> Callable[[dict[str, str]], bool]:
    """Compile a Kubernetes label selector string into a predicate over a label map."""
    tests: list[Callable[[dict[str, str]], bool]] = []
    for req in _split_requirements(selector):
        m = re.fullmatch(r"(\S+)\s+(in|notin)\s+\((.*)\)", req)
        if m:
            key, op, values = m.group(1), m.group(2), {v.strip() for v in m.group(3).split(",")}
            if op == "in":
                tests.append(lambda lb, k=key, vs=values: lb.get(k) in vs)
            else:
                tests.append(lambda lb, k=key, vs=values: lb.get(k) not in vs)
            continue
        m = re.fullmatch(r"([^!=\s]+)\s*(==|=|!=)\s*(\S*)", req)
        if m:
            key, op, value = m.groups()
            if op == "!=":
                tests.append(lambda lb, k=key, v=value: lb.get(k) != v)
            else:
                tests.append(lambda lb, k=key, v=value: lb.get(k) == v)
            continue
        if re.fullmatch(r"![^!=\s]+", req):
            tests.append(lambda lb, k=req[1:]: k not in lb)
        elif re.fullmatch(r"[^!=\s()]+", req):
            tests.append(lambda lb, k=req: k in lb)
        else:
            raise ApiFailure(400, "BadRequest", f"unable to parse requirement: {req!r}")
    return lambda labels: all(t(labels) for t in tests)


# ----- patch algorithms ---------------------------------------------------------------------------------


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: maps merge recursively, ``null`` deletes, everything else replaces.
    Returns a new object (``target`` and ``patch`` are left as they are)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    return _merge_into(copy.deepcopy(target) if isinstance(target, dict) else {}, patch)


def _merge_into(result: JSON, patch: JSON) -> JSON:
    """Merge ``patch`` into ``result`` (a copy the caller owns) in place: one deep copy per request, not per level."""
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict):
            current = result.get(key)
            result[key] = _merge_into(current if isinstance(current, dict) else {}, value)
        else:
            result[key] = copy.deepcopy(value)
    return result


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise ApiFailure(422, "Invalid", f"json patch path {path!r} must start with '/'")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _walk(doc: Any, parts: list[str]) -> Any:
    for p in parts:
        if isinstance(doc, list):
            doc = doc[int(p)]
        elif isinstance(doc, dict):
            doc = doc[p]
        else:
            raise KeyError(p)
    return doc


def json_patch(doc: Any, ops: Any) -> Any:
    """RFC 6902 JSON patch (add, remove, replace, move, copy, test)."""
    if not isinstance(ops, list):
        raise ApiFailure(400, "BadRequest", "json patch body must be a list of operations")
    doc = copy.deepcopy(doc)
    for op in ops:
        try:
            kind, parts = op["op"], _pointer(op["path"])
            if kind == "test":
                if _walk(doc, parts) != op["value"]:
                    raise ApiFailure(422, "Invalid", f"testing value {op['path']} failed")
                continue
            if kind in ("move", "copy"):
                value = copy.deepcopy(_walk(doc, _pointer(op["from"])))
                if kind == "move":
                    doc = json_patch(doc, [{"op": "remove", "path": op["from"]}])
                kind, op = "add", {"path": op["path"], "value": value}
            parent, last = _walk(doc, parts[:-1]), parts[-1] if parts else None
            if last is None:
                if kind == "remove":
                    raise ApiFailure(422, "Invalid", "cannot remove the whole document")
                doc = copy.deepcopy(op["value"])
            elif kind == "add":
                if isinstance(parent, list):
                    parent.insert(len(parent) if last == "-" else int(last), copy.deepcopy(op["value"]))
                else:
                    parent[last] = copy.deepcopy(op["value"])
            elif kind == "replace":
                if isinstance(parent, list):
                    parent[int(last)] = copy.deepcopy(op["value"])
                else:
                    if last not in parent:
                        raise KeyError(last)
                    parent[last] = copy.deepcopy(op["value"])
            elif kind == "remove":
                if isinstance(parent, list):
                    del parent[int(last)]
                else:
                    del parent[last]
            else:
                raise ApiFailure(400, "BadRequest", f"unknown json patch op {kind!r}")
        except (KeyError, IndexError, ValueError, TypeError) as exc:
            raise ApiFailure(422, "Invalid", f"json patch {op!r} failed: missing path element {exc}") from None
    return doc


def owned_paths(obj: Any, prefix: Path = ()) -> set[Path]:
    """Leaf paths of an object a field manager can own (lists are atomic; system metadata excluded)."""
    out: set[Path] = set()
    if not isinstance(obj, dict):
        return out
    for key, value in obj.items():
        if not prefix and key in ("apiVersion", "kind", "status"):
            continue
        if prefix == ("metadata",) and key in _SYSTEM_META:
            continue
        path = (*prefix, key)
        if isinstance(value, dict) and value:
            out |= owned_paths(value, path)
        else:
            out.add(path)
    return out


def get_path(obj: Any, path: Path) -> Any:
    for key in path:
        if not isinstance(obj, dict) or key not in obj:
            return _MISSING
        obj = obj[key]
    return obj


def delete_path(obj: JSON, path: Path) -> None:
    parent = get_path(obj, path[:-1])
    if isinstance(parent, dict):
        parent.pop(path[-1], None)


def deep_merge(base: Any, overlay: Any) -> Any:
    """Server-side-apply merge of one applied configuration: maps merge, lists and scalars replace.
    Returns a new object (``base`` and ``overlay`` are left as they are)."""
    if not (isinstance(base, dict) and isinstance(overlay, dict)):
        return copy.deepcopy(overlay)
    return _overlay_into(copy.deepcopy(base), overlay)


def _overlay_into(out: JSON, overlay: JSON) -> JSON:
    for key, value in overlay.items():
        current = out.get(key)
        both = isinstance(current, dict) and isinstance(value, dict)
        out[key] = _overlay_into(current, value) if both else copy.deepcopy(value)
    return out


def fields_v1(paths: Iterable[Path]) -> JSON:
    """Render owned paths in the nested ``f:<field>`` FieldsV1 form."""
    root: JSON = {}
    for path in sorted(paths):
        node = root
        for key in path:
            node = node.setdefault(f"f:{key}", {})
    return root


# ----- the server -----------------------------------------------------------------------------------


class FakeKubeApiServer:
    """Fake kube-apiserver on 127.0.0.1 (see the module docstring for its exact scope)."""

    def __init__(
        self,
        crds: Iterable[ResourceType] = DEFAULT_CRDS,
        namespaces: Iterable[str] = ("default", "kube-system", "kube-public", "slurm"),
        token: str | None = None,
        git_version: str = "v1.33.0",
        tls: tuple[str, str] | None = None,
        *,
        error_content_type: str = "application/json",
        ignore_label_selector: bool = False,
        latency: float = 0.0,
        rate_limit: tuple[float, int] | None = None,
        apf_headers: bool | None = None,
    ) -> None:
        self.error_content_type = error_content_type
        self.ignore_label_selector = ignore_label_selector
        self.latency = latency
        self.rate_limit = rate_limit
        self._bucket = float(rate_limit[1]) if rate_limit else 0.0
        self._bucket_at = time.monotonic()
        self.throttled = 0  # 429s sent by the rate limit
        self.throttle_log: list[float] = []  # when each of them was sent (time.monotonic)
        self.apf_headers = rate_limit is not None if apf_headers is None else apf_headers
        self.crds = tuple(crds)
        self.token = token
        self.git_version = git_version
        self.tls = tls  # (certfile, keyfile): serve HTTPS
        self.requests: list[LoggedRequest] = []
        self.faults: list[Fault] = []
        self._types = {(t.group, v, t.plural): t for t in (*CORE, *self.crds) for v in t.versions}
        self._objects: dict[tuple[str, str, str, str], _Stored] = {}
        self._rv = 1000  # the last resourceVersion handed out
        self._lock = threading.RLock()
        #: watch events (resourceVersion, type, group, plural, object), oldest first; ``_floor`` is the
        #: resourceVersion compaction left: a watch from before it gets 410
        self._events: list[tuple[int, str, str, str, JSON]] = []
        self._floor = self._rv
        self._drop_watches = 0
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        for ns in namespaces:
            self.put(NAMESPACES, {"metadata": {"name": ns}})

    # ----- lifecycle ---------------------------------------------------------------------------------
    def start(self) -> FakeKubeApiServer:
        handler = type("Handler", (_Handler,), {"fake": self})
        self._httpd = _Server(("127.0.0.1", 0), handler)
        self._httpd.daemon_threads = True
        if self.tls is not None:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(*self.tls)
            self._httpd.socket = ctx.wrap_socket(self._httpd.socket, server_side=True)
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> FakeKubeApiServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        assert self._httpd is not None, "server not started"
        scheme = "https" if self.tls else "http"
        return f"{scheme}://127.0.0.1:{self._httpd.server_address[1]}"

    # ----- direct state access for tests ---------------------------------------------------------------
    def put(self, rtype: ResourceType, obj: JSON, manager: str = "test-setup") -> JSON:
        """Create or replace an object directly (no request logged), as ``manager`` would with an update."""
        with self._lock:
            obj = copy.deepcopy(obj)
            meta = obj.setdefault("metadata", {})
            key = self._key(rtype, meta.get("namespace"), meta["name"])
            old = self._objects.get(key)
            return self._store(rtype, key, obj, old, manager, "Update", rtype.versions[0])

    def add_node(
        self,
        name: str,
        labels: dict[str, str] | None = None,
        provider_id: str | None = None,
        annotations: dict[str, str] | None = None,
    ) -> None:
        meta: JSON = {"name": name, "labels": dict(labels or {})}
        if annotations:
            meta["annotations"] = dict(annotations)
        spec = {"providerID": provider_id} if provider_id else {}
        self.put(NODES, {"apiVersion": "v1", "kind": "Node", "metadata": meta, "spec": spec}, manager="kubelet")

    def get(self, rtype: ResourceType, name: str, namespace: str | None = None) -> JSON | None:
        """The object as a GET would return it (with managedFields), or None."""
        with self._lock:
            stored = self._objects.get(self._key(rtype, namespace, name))
            return self._render(stored, deep=True) if stored else None

    def list(self, rtype: ResourceType) -> list[JSON]:
        with self._lock:
            keys = sorted(k for k in self._objects if k[:2] == (rtype.group, rtype.plural))
            return [self._render(self._objects[k], deep=True) for k in keys]

    def delete(self, rtype: ResourceType, name: str, namespace: str | None = None) -> None:
        with self._lock:
            stored = self._objects.pop(self._key(rtype, namespace, name), None)
            if stored is not None:
                self._deleted(rtype, stored)

    def compact(self) -> None:
        """Forget every watch event so far (etcd compaction): a watch from an older resourceVersion gets 410."""
        with self._lock:
            self._events.clear()
            self._floor = self._rv

    def drop_watches(self, count: int) -> None:
        """Close the next ``count`` watch connections without an answer."""
        with self._lock:
            self._drop_watches += count

    def _event(self, kind: str, rtype: ResourceType, obj: JSON) -> None:
        self._events.append((self._rv, kind, rtype.group, rtype.plural, copy.deepcopy(obj)))

    def _deleted(self, rtype: ResourceType, stored: _Stored) -> None:
        self._rv += 1
        obj = dict(stored.obj)
        obj["metadata"] = {**stored.obj["metadata"], "resourceVersion": str(self._rv)}
        self._event("DELETED", rtype, obj)

    def watch(self, req: LoggedRequest) -> tuple[int, Any, dict[str, str]]:
        """A watch window: the events after ``resourceVersion`` that happen before ``timeoutSeconds`` ends."""
        rtype = self._types.get((req.group, req.version, req.resource))
        if rtype is None:
            return 404, status_body(404, "NotFound", "the server could not find the requested resource"), {}
        with self._lock:
            if self._drop_watches > 0:
                self._drop_watches -= 1
                return 0, None, {}
        try:
            window = int(req.query.get("timeoutSeconds") or 1)
            since = int(req.query.get("resourceVersion") or self._rv)
        except ValueError:
            return 400, status_body(400, "BadRequest", "timeoutSeconds and resourceVersion must be integers"), {}
        if since < self._floor:
            expired = status_body(410, "Expired", f"too old resource version: {since} ({self._floor})")
            return 200, [{"type": "ERROR", "object": expired}], {}
        time.sleep(window)
        with self._lock:
            events = [
                {"type": kind, "object": obj}
                for rv, kind, group, plural, obj in self._events
                if rv > since
                and (group, plural) == (rtype.group, rtype.plural)
                and (req.namespace is None or obj["metadata"].get("namespace") == req.namespace)
            ]
            if req.query.get("allowWatchBookmarks") == "true":
                mark = {"kind": rtype.kind, "apiVersion": rtype.api_version(req.version),
                        "metadata": {"resourceVersion": str(self._rv)}}  # fmt: skip
                events.append({"type": "BOOKMARK", "object": mark})
        return 200, events, {}

    def touch(self, rtype: ResourceType, name: str, namespace: str | None = None) -> None:
        """Simulate another writer: bump the object's resourceVersion (and an annotation)."""
        with self._lock:
            obj = self.get(rtype, name, namespace)
            assert obj is not None, f"{rtype.plural}/{name} does not exist"
            obj["metadata"].setdefault("annotations", {})["fake/touched"] = str(time.monotonic_ns())
            self.put(rtype, obj, manager="someone-else")

    # ----- faults and log -------------------------------------------------------------------------------
    def inject(
        self,
        status: int | None,
        count: int | None = 1,
        *,
        skip: int = 0,
        retry_after: float | None = None,
        match: Callable[[LoggedRequest], bool] | None = None,
        action: Callable[[FakeKubeApiServer], None] | None = None,
        message: str = "injected fault",
        reason: str | None = None,
    ) -> Fault:
        fault = Fault(status, count, skip, retry_after, match, action, message, reason)
        with self._lock:
            self.faults.append(fault)
        return fault

    def refuse(self, nodes: Iterable[str], status: int, message: str, reason: str | None = None) -> Fault:
        """Refuse every write (PATCH, PUT) to ``nodes`` with ``status`` for good, the way a validating
        admission policy or webhook bound to one node pool does (VAP: 422 Invalid or the validation's
        ``reason``; a webhook: 403 Forbidden with ``admission webhook "..." denied the request: ...``)."""
        names = frozenset(nodes)
        return self.inject(
            status,
            None,
            match=lambda r: r.resource == "nodes" and r.method in ("PATCH", "PUT") and r.name in names,
            message=message,
            reason=reason,
        )

    def fail_after(self, k: int, status: int = 503) -> Fault:
        """Every request after the next ``k`` fails with ``status`` (an outage half-way through)."""
        return self.inject(status, None, skip=k)

    def clear_faults(self) -> None:
        with self._lock:
            self.faults.clear()

    def reset_log(self) -> None:
        with self._lock:
            self.requests.clear()

    def calls(
        self, method: str | None = None, verb: str | None = None, resource: str | None = None
    ) -> list[LoggedRequest]:
        with self._lock:
            return [
                r
                for r in self.requests
                if (method is None or r.method == method)
                and (verb is None or r.verb == verb)
                and (resource is None or r.resource == resource)
            ]

    # ----- internals -------------------------------------------------------------------------------------
    @staticmethod
    def _key(rtype: ResourceType, namespace: str | None, name: str) -> tuple[str, str, str, str]:
        return (rtype.group, rtype.plural, namespace or "", name)

    def _store(
        self,
        rtype: ResourceType,
        key: tuple[str, str, str, str],
        new: JSON,
        old: _Stored | None,
        manager: str,
        operation: str,
        version: str,
        managers: dict[tuple[str, str], set[Path]] | None = None,
    ) -> JSON:
        """Validate and persist ``new``; bump resourceVersion only if something changed."""
        meta = new.setdefault("metadata", {})
        meta.pop("managedFields", None)  # the server keeps ownership itself; clients can't overwrite it here
        errs = label_errors(meta.get("labels"))
        if rtype.kind == "Node":
            errs += taint_errors((new.get("spec") or {}).get("taints"))
        if errs:
            raise ApiFailure(
                422,
                "Invalid",
                f'{rtype.kind} "{meta.get("name")}" is invalid: ' + "; ".join(errs),
                {"name": meta.get("name"), "kind": rtype.kind},
            )
        new["apiVersion"], new["kind"] = rtype.api_version(version), rtype.kind
        if managers is None:  # an update: whoever wrote a changed field now owns it
            managers = {k: set(v) for k, v in (old.managers if old else {}).items()}
            before = old.obj if old else {}
            now = owned_paths(new)
            changed = {p for p in now if get_path(before, p) != get_path(new, p)}
            gone = owned_paths(before) - now
            for paths in managers.values():
                paths -= changed | gone
            managers.setdefault((manager, operation), set()).update(changed)
        managers = {k: v for k, v in managers.items() if v}
        if old is not None:
            for system in ("uid", "creationTimestamp", "generation", "resourceVersion"):
                if system in old.obj["metadata"]:
                    meta[system] = old.obj["metadata"][system]
            if _content(old.obj) == _content(new) and old.managers == managers:
                return self._render(old)
            if rtype.custom and _spec(old.obj) != _spec(new):
                meta["generation"] = int(meta.get("generation", 1)) + 1
        else:
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            if rtype.custom:
                meta["generation"] = 1
        self._rv += 1
        meta["resourceVersion"] = str(self._rv)
        stored = _Stored(new, managers)
        self._objects[key] = stored
        if not _IN_DRY_RUN.get(False):
            self._event("MODIFIED" if old is not None else "ADDED", rtype, new)
        return self._render(stored)

    @staticmethod
    def _render(stored: _Stored, deep: bool = False) -> JSON:
        """The object as the API returns it. Shallow by default: the wire path serialises it at once,
        and stored objects are never mutated in place (every write builds a new dict)."""
        if stored.managed_fields is None:
            stored.managed_fields = [
                {
                    "manager": mgr,
                    "operation": op,
                    "apiVersion": stored.obj["apiVersion"],
                    "fieldsType": "FieldsV1",
                    "fieldsV1": fields_v1(paths),
                }
                for (mgr, op), paths in sorted(stored.managers.items())
            ]
        out = dict(stored.obj)
        out["metadata"] = {**stored.obj["metadata"], "managedFields": stored.managed_fields}
        return copy.deepcopy(out) if deep else out

    def handle(self, req: LoggedRequest, raw_body: bytes) -> tuple[int, Any, dict[str, str]]:
        """Route one request; returns (status, JSON body, extra headers)."""
        with self._lock:
            self.requests.append(req)
            for fault in list(self.faults):
                if fault.match is not None and not fault.match(req):
                    continue
                if fault.skip > 0:
                    fault.skip -= 1
                    continue
                if fault.count is not None:
                    fault.count -= 1
                    if fault.count <= 0:
                        self.faults.remove(fault)
                if fault.action is not None:
                    fault.action(self)
                if fault.status is not None:
                    headers = {}
                    details: JSON = {}
                    if fault.retry_after is not None:
                        headers["Retry-After"] = f"{fault.retry_after:g}"
                        details["retryAfterSeconds"] = int(fault.retry_after)
                    if req.name:
                        details.update(name=req.name, kind=req.resource)
                    reason = _REASONS.get(fault.status, "InternalError") if fault.reason is None else fault.reason
                    return fault.status, status_body(fault.status, reason, fault.message, details), headers
        if self.token is not None and req.authorization != f"Bearer {self.token}":
            return 401, status_body(401, "Unauthorized", "Unauthorized"), {}
        if self.rate_limit is not None and not self._take_token():
            message = "Too many requests, please try again later."
            return 429, status_body(429, "TooManyRequests", message, {"retryAfterSeconds": 1}), {"Retry-After": "1"}
        dry_run = req.query.get("dryRun")
        try:
            if dry_run is not None and dry_run != "All":
                raise ApiFailure(400, "BadRequest", f"Invalid dry run value: {dry_run!r}: valid values are 'All'")
            if req.verb == "watch":  # outside the lock: a watch window waits for writes
                return self.watch(req)
            with self._lock:
                if dry_run is None:
                    return self._dispatch(req, raw_body)
                saved = (dict(self._objects), self._rv)  # _store never mutates a stored object in place
                token = _IN_DRY_RUN.set(True)
                try:
                    return self._dispatch(req, raw_body)
                finally:
                    self._objects, self._rv = saved
                    _IN_DRY_RUN.reset(token)
        except ApiFailure as exc:
            return exc.code, status_body(exc.code, exc.reason, exc.message, exc.details), {}

    def _take_token(self) -> bool:
        qps, burst = self.rate_limit or (0.0, 0)
        with self._lock:
            now = time.monotonic()
            self._bucket = min(float(burst), self._bucket + (now - self._bucket_at) * qps)
            self._bucket_at = now
            if self._bucket < 1.0:
                self.throttled += 1
                self.throttle_log.append(now)
                return False
            self._bucket -= 1.0
            return True

    # ----- routing ----------------------------------------------------------------------------------------
    def parse_path(self, req: LoggedRequest) -> None:
        """Fill verb/group/version/resource/namespace/name from method + path (no side effects)."""
        parts = [p for p in req.path.split("/") if p]
        if parts[:1] == ["api"] and len(parts) >= 3:
            group, version, rest = "", parts[1], parts[2:]
        elif parts[:1] == ["apis"] and len(parts) >= 4:
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            return  # discovery or unknown
        namespace = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        req.group, req.version, req.namespace = group, version, namespace
        req.resource = rest[0]
        req.name = rest[1] if len(rest) > 1 else None
        if len(rest) > 2:
            req.resource = f"{rest[0]}/{rest[2]}"
        collection = req.name is None
        req.verb = {
            "GET": "watch" if req.query.get("watch") in ("1", "true") else ("list" if collection else "get"),
            "POST": "create",
            "PUT": "update",
            "PATCH": "patch",
            "DELETE": "deletecollection" if collection else "delete",
        }.get(req.method, req.method.lower())

    def _dispatch(self, req: LoggedRequest, raw_body: bytes) -> tuple[int, JSON, dict[str, str]]:
        if not req.verb:
            return self._discovery(req.path)
        rtype = self._types.get((req.group, req.version, req.resource))
        if rtype is None or (rtype.namespaced and req.namespace is None and req.verb != "list"):
            raise ApiFailure(404, "NotFound", "the server could not find the requested resource")
        if not rtype.namespaced and req.namespace is not None:
            raise ApiFailure(404, "NotFound", "the server could not find the requested resource")
        body = self._parse_body(req, raw_body) if req.method in ("POST", "PUT", "PATCH") else None
        req.body = body
        if req.verb == "list":
            return 200, self._list(rtype, req), {}
        if req.verb == "get":
            out = self._render(self._must_get(rtype, req))
            out["apiVersion"] = rtype.api_version(req.version)  # served versions share storage
            return 200, out, {}
        if req.verb == "create":
            return 201, self._create(rtype, req, body), {}
        if req.verb == "update":
            return 200, self._update(rtype, req, body), {}
        if req.verb == "patch":
            return self._patch(rtype, req, body)
        if req.verb == "delete":
            stored = self._must_get(rtype, req)
            del self._objects[self._key(rtype, req.namespace, req.name or "")]
            if not _IN_DRY_RUN.get(False):
                self._deleted(rtype, stored)
            details = {
                "name": req.name,
                "group": rtype.group,
                "kind": rtype.plural,
                "uid": stored.obj["metadata"]["uid"],
            }
            return (
                200,
                {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details},
                {},
            )
        raise ApiFailure(405, "MethodNotAllowed", f"{req.verb} is not supported by this fake API server")

    def _discovery(self, path: str) -> tuple[int, JSON, dict[str, str]]:
        parts = [p for p in path.split("/") if p]
        if parts == ["version"]:
            major, minor = self.git_version.lstrip("v").split(".")[:2]
            return 200, {"major": major, "minor": minor, "gitVersion": self.git_version, "platform": "linux/amd64"}, {}
        if parts == ["api"]:
            return 200, {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []}, {}
        if parts == ["apis"]:
            groups = {}
            for t in self.crds:
                groups.setdefault(t.group, []).extend(v for v in t.versions if v not in groups.get(t.group, []))
            return (
                200,
                {
                    "kind": "APIGroupList",
                    "apiVersion": "v1",
                    "groups": [self._group(g, vs) for g, vs in groups.items()],
                },
                {},
            )
        if parts[:1] == ["apis"] and len(parts) == 2:
            versions = [v for t in self.crds if t.group == parts[1] for v in t.versions]
            if versions:
                return (
                    200,
                    {"kind": "APIGroup", "apiVersion": "v1", **self._group(parts[1], list(dict.fromkeys(versions)))},
                    {},
                )
        group_version = None
        if parts[:1] == ["api"] and len(parts) == 2:
            group_version = ("", parts[1])
        elif parts[:1] == ["apis"] and len(parts) == 3:
            group_version = (parts[1], parts[2])
        if group_version is not None:
            types = [t for (g, v, _), t in self._types.items() if (g, v) == group_version]
            if types:
                gv = "/".join(p for p in group_version if p)
                return (
                    200,
                    {
                        "kind": "APIResourceList",
                        "apiVersion": "v1",
                        "groupVersion": gv,
                        "resources": [self._resource_entry(t) for t in types],
                    },
                    {},
                )
        raise ApiFailure(404, "NotFound", "the server could not find the requested resource")

    @staticmethod
    def _group(group: str, versions: list[str]) -> JSON:
        vs = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
        return {"name": group, "versions": vs, "preferredVersion": vs[0]}

    @staticmethod
    def _resource_entry(t: ResourceType) -> JSON:
        verbs = ["create", "delete", "get", "list", "patch", "update", "watch"]
        return {
            "name": t.plural,
            "singularName": t.kind.lower(),
            "namespaced": t.namespaced,
            "kind": t.kind,
            "verbs": verbs,
        }

    @staticmethod
    def _parse_body(req: LoggedRequest, raw: bytes) -> Any:
        try:
            if req.content_type.startswith("application/apply-patch+yaml"):
                try:  # clients (lightkube, kubectl) send apply bodies as JSON, a subset of YAML: the fast parser
                    return json.loads(raw or b"null")
                except ValueError:
                    return yaml.safe_load(raw.decode() or "null")
            return json.loads(raw or b"null")
        except (ValueError, yaml.YAMLError) as exc:
            raise ApiFailure(400, "BadRequest", f"the body of the request was in an unknown format: {exc}") from None

    def _must_get(self, rtype: ResourceType, req: LoggedRequest) -> _Stored:
        stored = self._objects.get(self._key(rtype, req.namespace, req.name or ""))
        if stored is None:
            raise self._not_found(rtype, req.name)
        return stored

    @staticmethod
    def _not_found(rtype: ResourceType, name: str | None) -> ApiFailure:
        qualified = f"{rtype.plural}.{rtype.group}" if rtype.group else rtype.plural
        return ApiFailure(
            404,
            "NotFound",
            f'{qualified} "{name}" not found',
            {"name": name, "group": rtype.group, "kind": rtype.plural},
        )

    def _check_namespace(self, rtype: ResourceType, namespace: str | None) -> None:
        if rtype.namespaced and self._key(NAMESPACES, None, namespace or "") not in self._objects:
            raise ApiFailure(
                404, "NotFound", f'namespaces "{namespace}" not found', {"name": namespace, "kind": "namespaces"}
            )

    @staticmethod
    def _conflict(rtype: ResourceType, name: str | None) -> ApiFailure:
        qualified = f"{rtype.plural}.{rtype.group}" if rtype.group else rtype.plural
        return ApiFailure(
            409,
            "Conflict",
            f'Operation cannot be fulfilled on {qualified} "{name}": the object has been modified; '
            "please apply your changes to the latest version and try again",
            {"name": name, "group": rtype.group, "kind": rtype.plural},
        )

    def _check_precondition(self, rtype: ResourceType, req: LoggedRequest, body: Any, current: _Stored | None) -> None:
        wanted = body.get("metadata", {}).get("resourceVersion") if isinstance(body, dict) else None
        if wanted is not None and (current is None or str(wanted) != current.obj["metadata"]["resourceVersion"]):
            raise self._conflict(rtype, req.name)

    def _list(self, rtype: ResourceType, req: LoggedRequest) -> JSON:
        selector = parse_label_selector("" if self.ignore_label_selector else req.query.get("labelSelector", ""))
        fields: dict[str, str] = {}
        known = ("metadata.name", "metadata.namespace", *FIELD_LABELS.get(rtype.plural, ()))
        for term in _split_requirements(req.query.get("fieldSelector", "")):
            key, _, value = term.partition("=")
            key = key.rstrip("=")
            if key not in known:
                only = ", ".join(f'"{k}"' for k in known)
                raise ApiFailure(400, "BadRequest", f'"{key}" is not a known field selector: only {only}')
            fields[key] = value.lstrip("=")
        keys = sorted(
            k
            for k in self._objects
            if k[:2] == (rtype.group, rtype.plural) and (req.namespace is None or k[2] == req.namespace)
        )
        start = req.query.get("continue")
        if start:
            after = tuple(json.loads(base64.urlsafe_b64decode(start.encode())))
            keys = [k for k in keys if k > after]
        items = []
        for k in keys:
            obj = self._objects[k].obj
            meta = obj["metadata"]
            if fields.get("metadata.name", meta["name"]) != meta["name"]:
                continue
            if fields.get("metadata.namespace", meta.get("namespace", "")) != meta.get("namespace", ""):
                continue
            spec = obj.get("spec") or {}
            if any(spec.get(k.removeprefix("spec.")) != v for k, v in fields.items() if k.startswith("spec.")):
                continue
            if selector(meta.get("labels") or {}):
                rendered = self._render(self._objects[k])
                rendered["apiVersion"] = rtype.api_version(req.version)
                items.append((k, rendered))
        limit = int(req.query.get("limit") or 0)
        list_meta: JSON = {"resourceVersion": str(self._rv)}
        if limit and len(items) > limit:
            list_meta["continue"] = base64.urlsafe_b64encode(json.dumps(items[limit - 1][0]).encode()).decode()
            list_meta["remainingItemCount"] = len(items) - limit
            items = items[:limit]
        out_items = []
        for _, obj in items:
            if not rtype.custom:  # typed lists omit kind/apiVersion on items, as the real server does
                obj.pop("apiVersion", None)
                obj.pop("kind", None)
            out_items.append(obj)
        return {
            "kind": f"{rtype.kind}List",
            "apiVersion": rtype.api_version(req.version),
            "metadata": list_meta,
            "items": out_items,
        }

    def _validate_identity(self, rtype: ResourceType, req: LoggedRequest, body: Any) -> JSON:
        if not isinstance(body, dict):
            raise ApiFailure(400, "BadRequest", "the request body must be a JSON object")
        meta = body.setdefault("metadata", {})
        if req.name is not None and meta.get("name", req.name) != req.name:
            raise ApiFailure(
                400,
                "BadRequest",
                f"the name of the object ({meta.get('name')}) does not match the name on the URL ({req.name})",
            )
        meta["name"] = req.name or meta.get("name")
        if not meta["name"]:
            raise ApiFailure(422, "Invalid", f"{rtype.kind}: metadata.name: Required value: name is required")
        if rtype.namespaced:
            if meta.get("namespace", req.namespace) != req.namespace:
                raise ApiFailure(
                    400, "BadRequest", "the namespace of the object does not match the namespace on the URL"
                )
            meta["namespace"] = req.namespace
        return body

    def _create(self, rtype: ResourceType, req: LoggedRequest, body: Any) -> JSON:
        body = self._validate_identity(rtype, req, body)
        req.name = body["metadata"]["name"]
        self._check_namespace(rtype, req.namespace)
        key = self._key(rtype, req.namespace, req.name or "")
        if key in self._objects:
            qualified = f"{rtype.plural}.{rtype.group}" if rtype.group else rtype.plural
            raise ApiFailure(
                409,
                "AlreadyExists",
                f'{qualified} "{req.name}" already exists',
                {"name": req.name, "group": rtype.group, "kind": rtype.plural},
            )
        body["metadata"].pop("resourceVersion", None)
        return self._store(rtype, key, body, None, self._manager(req), "Update", req.version)

    def _update(self, rtype: ResourceType, req: LoggedRequest, body: Any) -> JSON:
        current = self._must_get(rtype, req)
        body = self._validate_identity(rtype, req, body)
        self._check_precondition(rtype, req, body, current)
        key = self._key(rtype, req.namespace, req.name or "")
        return self._store(rtype, key, body, current, self._manager(req), "Update", req.version)

    @staticmethod
    def _manager(req: LoggedRequest) -> str:
        return req.query.get("fieldManager") or "unknown"

    def _patch(self, rtype: ResourceType, req: LoggedRequest, body: Any) -> tuple[int, JSON, dict[str, str]]:
        ctype = req.content_type.split(";")[0].strip()
        key = self._key(rtype, req.namespace, req.name or "")
        current = self._objects.get(key)
        if ctype == "application/apply-patch+yaml":
            return self._apply(rtype, req, body, current)
        if ctype not in (
            "application/merge-patch+json",
            "application/strategic-merge-patch+json",
            "application/json-patch+json",
        ):
            raise ApiFailure(
                415,
                "UnsupportedMediaType",
                f"the body of the request was in an unknown format - "
                f"accepted media types include: application/json-patch+json, application/merge-patch+json, "
                f"application/apply-patch+yaml (got {ctype!r})",
            )
        if ctype == "application/strategic-merge-patch+json" and rtype.custom:
            raise ApiFailure(415, "UnsupportedMediaType", "strategic merge patch is not supported for custom resources")
        if current is None:
            raise self._not_found(rtype, req.name)
        if ctype == "application/json-patch+json":
            new = json_patch(current.obj, body)
        else:
            if not isinstance(body, dict):
                raise ApiFailure(400, "BadRequest", "a merge patch must be a JSON object")
            self._check_precondition(rtype, req, body, current)
            new = merge_patch(current.obj, body)
        new = self._validate_identity(rtype, req, new)
        new["metadata"]["resourceVersion"] = current.obj["metadata"]["resourceVersion"]
        return 200, self._store(rtype, key, new, current, self._manager(req), "Update", req.version), {}

    def _apply(
        self, rtype: ResourceType, req: LoggedRequest, body: Any, current: _Stored | None
    ) -> tuple[int, JSON, dict[str, str]]:
        manager = req.query.get("fieldManager")
        if not manager:
            raise ApiFailure(
                422,
                "Invalid",
                'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is required for apply patch',
            )
        body = self._validate_identity(rtype, req, body)
        if body.get("apiVersion") != rtype.api_version(req.version) or body.get("kind") != rtype.kind:
            raise ApiFailure(
                400,
                "BadRequest",
                f"apply patch apiVersion/kind {body.get('apiVersion')}/{body.get('kind')}"
                f" does not match the URL ({rtype.api_version(req.version)}/{rtype.kind})",
            )
        self._check_precondition(rtype, req, body, current)
        body["metadata"].pop("resourceVersion", None)
        if current is None:
            self._check_namespace(rtype, req.namespace)
            req.implied_verbs.append("create")  # kube-apiserver's patch handler authorizes apply-create as create
        force = req.query.get("force") in ("true", "1")
        live = copy.deepcopy(current.obj) if current else {"metadata": {}}
        managers = {k: set(v) for k, v in (current.managers if current else {}).items()}
        applied = owned_paths(body)
        conflicts = []
        for (mgr, op), paths in managers.items():
            if (mgr, op) == (manager, "Apply"):
                continue
            for p in sorted(paths & applied):
                if get_path(live, p) != get_path(body, p):
                    conflicts.append((mgr, p))
        if conflicts and not force:
            causes = [
                {"reason": "FieldManagerConflict", "message": f'conflict with "{m}"', "field": "." + ".".join(p)}
                for m, p in conflicts
            ]
            raise ApiFailure(
                409,
                "Conflict",
                f"Apply failed with {len(conflicts)} conflict(s): "
                + "; ".join(f'conflict with "{m}": .{".".join(p)}' for m, p in conflicts),
                {"name": req.name, "group": rtype.group, "kind": rtype.plural, "causes": causes},
            )
        for mgr, p in conflicts:
            for (m, _op), paths in managers.items():
                if m == mgr:
                    paths.discard(p)
        previous = managers.get((manager, "Apply"), set())
        others = set().union(*(v for k, v in managers.items() if k != (manager, "Apply")))
        for p in previous - applied:
            if p not in others:
                delete_path(live, p)
        new = deep_merge(live, body)
        managers[(manager, "Apply")] = applied
        status = 200 if current else 201
        key = self._key(rtype, req.namespace, req.name or "")
        return status, self._store(rtype, key, new, current, manager, "Apply", req.version, managers), {}


def _content(obj: JSON) -> JSON:
    out = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind")}
    out["metadata"] = {
        k: v for k, v in obj.get("metadata", {}).items() if k not in ("resourceVersion", "managedFields")
    }
    return out


def _spec(obj: JSON) -> JSON:
    return {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "metadata", "status")}


class _Server(ThreadingHTTPServer):
    # socketserver listens with a backlog of 5: 32 PATCHes in flight on a loaded machine overflow it, the
    # kernel resets connections and the client's retries show up as extra requests. A real API server's is large.
    request_queue_size = 1024


class _Handler(BaseHTTPRequestHandler):
    fake: FakeKubeApiServer
    protocol_version = "HTTP/1.1"  # keep-alive, like a real API server
    # Buffered: the status line, headers and a small body leave in one send (handle_one_request flushes).
    wbufsize = -1

    def setup(self) -> None:
        super().setup()
        # Without this, Nagle + delayed ACK add ~40 ms to every keep-alive response.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:  # silence the default stderr logging
        pass

    def _serve(self) -> None:
        split = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(split.query, keep_blank_values=True).items()}
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        req = LoggedRequest(
            method=self.command,
            path=split.path,
            query=query,
            content_type=self.headers.get("Content-Type", ""),
            authorization=self.headers.get("Authorization", ""),
        )
        self.fake.parse_path(req)
        if self.fake.latency:
            time.sleep(self.fake.latency)  # outside the lock: concurrent requests overlap
        status, body, headers = self.fake.handle(req, raw)
        req.status = status
        if status == 0:  # a dropped watch: the connection closes with no answer
            self.close_connection = True
            return
        if isinstance(body, list):  # a watch: one JSON event per line
            payload = b"".join(json.dumps(e, separators=(",", ":")).encode() + b"\n" for e in body)
        else:
            payload = json.dumps(body, separators=(",", ":")).encode()
        self.send_response(status)
        self.send_header("Content-Type", self.fake.error_content_type if status >= 400 else "application/json")
        self.send_header("Content-Length", str(len(payload)))
        for k, v in headers.items():
            self.send_header(k, v)
        if self.fake.apf_headers:  # the UIDs of the FlowSchema and PriorityLevelConfiguration that matched
            self.send_header("X-Kubernetes-PF-FlowSchema-UID", "2a3c5b1e-0000-4000-8000-workload-low")
            self.send_header("X-Kubernetes-PF-PriorityLevel-UID", "7d1f9c2a-0000-4000-8000-workload-low")
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve
