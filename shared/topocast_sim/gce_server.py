"""A local Compute Engine REST endpoint: ``instances.list``, ``aggregatedList`` and ``get``.

Point google-cloud-compute at it (REST transport, anonymous credentials) and
its real request builder, response parser and pager run unchanged::

    server = FakeCompute(project="p", project_number="123").start()
    client = compute_v1.InstancesClient(credentials=AnonymousCredentials(), transport="rest",
                                        client_options=ClientOptions(api_endpoint=server.url))

What it implements, as the Compute API reference documents it:

* ``GET /compute/{v1,beta}/projects/{project}/zones/{zone}/instances`` and
  ``.../aggregated/instances`` (``items`` keyed ``zones/<zone>``, a
  ``NO_RESULTS_ON_PAGE`` warning for zones without results on the page) and
  ``.../zones/{zone}/instances/{name}``. ``{project}`` may be the project ID
  or its number.
* ``filter``: expressions ``FIELD = VALUE`` / ``FIELD != VALUE`` (quoted or
  bare values, each optionally in parentheses, joined by blanks or ``AND``)
  on ``name``, ``status``, ``id``, ``machineType`` (last segment) and
  ``labels.KEY``; ``FIELD eq REGEX`` / ``ne REGEX`` match the whole value
  (RE2-style). ``OR`` and other operators are answered with 400, as a
  reminder that the fake does not implement them.
* ``maxResults`` 0..500 (default 500, anything else is 400) with an opaque
  ``nextPageToken``; a token that does not belong to this listing is 400.
  Instances are ordered by zone, then name.
* Errors in Google's JSON shape (``{"error": {"code", "message", "errors":
  [{"reason"}], "status"}}``): 404 ``notFound``, 400 ``invalid``, and injected
  429 ``rateLimitExceeded`` / 5xx / 403 (:meth:`FakeCompute.inject_faults`,
  spread evenly over the calls so retries always recover).

``reservationSubBlocks`` ``get`` and ``list`` (``GET .../zones/{zone}/reservations/{r}/reservationBlocks/{b}/
reservationSubBlocks[/{s}]``, the URIs of google-cloud-compute's REST transport): sub-blocks added with
:meth:`FakeCompute.add_sub_block` are built as ``compute_v1.ReservationSubBlock`` (the client's own type) and
served in its JSON form, wrapped as ``ReservationSubBlocksGetResponse`` (``resource``) and
``ReservationSubBlocksListResponse`` (``items``, one page); an unknown one is 404. ``POST .../reportFaulty``
takes a ``ReservationSubBlocksReportFaultyRequest`` (a ``failureComponent`` of
:data:`FAILURE_COMPONENTS`, else 400), records it in :attr:`FakeCompute.faulty_reports` and answers a
finished zonal ``Operation``. A fault or its repair is
:meth:`FakeCompute.set_sub_block_health`; a VM runs in one when :meth:`add_sub_block` names it (its
``resourceStatus.reservationConsumptionInfo.consumedReservationSubBlock``).

Not implemented: ``orderBy``, ``fields``, ``returnPartialSuccess`` (accepted,
ignored), writes (tests change :attr:`FakeCompute.instances` directly through
:meth:`add`, :meth:`remove`, :meth:`set_status`, :meth:`set_labels`), quota semantics of its own.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
from collections.abc import Iterable
from fractions import Fraction
from typing import Any
from urllib.parse import parse_qs, unquote, urlparse

from topocast_sim.http import LocalServer, QuietHandler

MAX_RESULTS = 500
_PATH = re.compile(
    r"^/compute/(?:v1|beta)/projects/(?P<project>[^/]+)/"
    r"(?:aggregated/instances|zones/(?P<zone>[^/]+)/instances(?:/(?P<name>[^/]+))?)$"
)
_SUB_BLOCKS = re.compile(
    r"^/compute/(?:v1|beta)/projects/(?P<project>[^/]+)/zones/(?P<zone>[^/]+)/reservations/(?P<reservation>[^/]+)"
    r"/reservationBlocks/(?P<block>[^/]+)/reservationSubBlocks(?:/(?P<name>[^/]+))?$"
)
_REPORT_FAULTY = re.compile(
    r"^/compute/(?:v1|beta)/projects/(?P<project>[^/]+)/zones/(?P<zone>[^/]+)/reservations/(?P<reservation>[^/]+)"
    r"/reservationBlocks/(?P<block>[^/]+)/reservationSubBlocks/(?P<name>[^/]+)/reportFaulty$"
)
#: ``ReservationSubBlocksReportFaultyRequest.FailureComponent`` values a report may name
FAILURE_COMPONENTS = ("MULTIPLE_FAULTY_HOSTS", "NVLINK_SWITCH")
_EXPR = re.compile(
    r"\(?\s*(?P<field>[A-Za-z][\w.\-]*)\s*(?P<op>!=|=|\beq\b|\bne\b)\s*"
    r"(?:\"(?P<quoted>[^\"]*)\"|(?P<bare>[^\s()\"]+))\s*\)?"
)
_STATUS_TEXT = {
    400: "INVALID_ARGUMENT",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    502: "UNAVAILABLE",
    503: "UNAVAILABLE",
}
_REASON = {400: "invalid", 403: "forbidden", 404: "notFound", 429: "rateLimitExceeded"}


class ApiError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _value(inst: dict[str, Any], field: str) -> str | None:
    if field.startswith("labels."):
        return inst.get("labels", {}).get(field.removeprefix("labels."))
    if field in ("machineType", "zone"):
        return str(inst.get(field, "")).rsplit("/", 1)[-1]
    if field in ("name", "status", "id", "hostname"):
        value = inst.get(field)
        return None if value is None else str(value)
    raise ApiError(400, f"Invalid value for field 'filter': unsupported field '{field}' in this fake")


def parse_filter(text: str) -> list[tuple[str, str, str]]:
    """``(labels.a = "b") AND status = RUNNING`` -> ``[("labels.a", "=", "b"), ("status", "=", "RUNNING")]``."""
    terms: list[tuple[str, str, str]] = []
    pos = 0
    text = text.strip()
    while pos < len(text):
        m = _EXPR.match(text, pos)
        if not m:
            raise ApiError(400, f"Invalid value for field 'filter': '{text}'. Invalid list filter expression.")
        value = m.group("quoted") if m.group("quoted") is not None else m.group("bare")
        terms.append((m.group("field"), m.group("op"), value))
        pos = m.end()
        rest = text[pos:].lstrip()
        if rest.startswith("AND ") or rest.startswith("AND("):
            rest = rest[3:].lstrip()
        elif rest.startswith("OR ") or rest.startswith("OR("):
            raise ApiError(400, "Invalid value for field 'filter': OR is not supported by this fake")
        pos = len(text) - len(rest)
    return terms


def matches(inst: dict[str, Any], terms: Iterable[tuple[str, str, str]]) -> bool:
    for field, op, expected in terms:
        actual = _value(inst, field)
        if op in ("=", "!="):
            ok = actual == expected
        else:
            try:
                ok = actual is not None and re.fullmatch(expected, actual) is not None
            except re.error as exc:
                raise ApiError(400, f"Invalid value for field 'filter': bad regular expression ({exc})") from None
        if ok == (op in ("!=", "ne")):
            return False
    return True


class _Faults:
    def __init__(self) -> None:
        self.fraction = Fraction(0)
        self.status = 429
        self.operations: frozenset[str] | None = None
        self.debt = Fraction(0)


def _error_body(exc: ApiError) -> dict[str, Any]:
    reason = _REASON.get(exc.code, "backendError")
    return {"error": {"code": exc.code, "message": exc.message, "status": _STATUS_TEXT[exc.code],
                      "errors": [{"message": exc.message, "domain": "global", "reason": reason}]}}  # fmt: skip


class FakeCompute(LocalServer):
    """The in-memory project and its HTTP server (see the module docstring)."""

    def __init__(self, project: str = "demo-project", project_number: str = "123456789012") -> None:
        self.project = project
        self.project_number = project_number
        self.lock = threading.Lock()
        #: (zone, name) -> instance JSON
        self.instances: dict[tuple[str, str], dict[str, Any]] = {}
        self.zones: set[str] = set()
        #: operation -> HTTP requests seen (injected faults included)
        self.calls: dict[str, int] = {}
        self.injected: dict[str, int] = {}
        #: every request: (operation, query parameters)
        self.requests: list[tuple[str, dict[str, str]]] = []
        #: (zone, reservation, block, sub-block name) -> ReservationSubBlock JSON
        self.sub_blocks: dict[tuple[str, str, str, str], dict[str, Any]] = {}
        #: every accepted reportFaulty: (zone, reservation, block, sub-block, request body)
        self.faulty_reports: list[tuple[str, str, str, str, dict[str, Any]]] = []
        self._faults = _Faults()

    # ----- the project's content -----------------------------------------------------------------
    def add(self, instances: Iterable[dict[str, Any]]) -> None:
        with self.lock:
            for inst in instances:
                zone = str(inst["zone"]).rsplit("/", 1)[-1]
                self.zones.add(zone)
                self.instances[(zone, inst["name"])] = inst

    def remove(self, zone: str, name: str) -> dict[str, Any] | None:
        with self.lock:
            return self.instances.pop((zone, name), None)

    def add_sub_block(
        self,
        zone: str,
        reservation: str,
        block: str,
        name: str,
        *,
        topology: tuple[str, str, str],
        vms: Iterable[str] = (),
        health: str = "HEALTHY",
        hosts: tuple[int, int] = (18, 0),
        infra: tuple[int, int] = (1, 0),
    ) -> None:
        """A reservation sub-block whose ``physicalTopology`` is ``topology`` (cluster, block, subBlock) and
        ``healthInfo`` ``health`` with (healthy, degraded) ``hosts`` and ``infra``; the ``vms`` (names in
        ``zone``) run in it."""
        from google.cloud import compute_v1

        sub = compute_v1.ReservationSubBlock(
            name=name,
            zone=zone,
            kind="compute#reservationSubBlock",
            count=sum(hosts),
            physical_topology=compute_v1.ReservationSubBlockPhysicalTopology(
                cluster=topology[0], block=topology[1], sub_block=topology[2]
            ),
            health_info=compute_v1.ReservationSubBlockHealthInfo(
                health_status=health, healthy_host_count=hosts[0], degraded_host_count=hosts[1],
                healthy_infra_count=infra[0], degraded_infra_count=infra[1],
            ),
        )  # fmt: skip
        full = (
            f"projects/{self.project}/zones/{zone}/reservations/{reservation}/reservationBlocks/{block}"
            f"/reservationSubBlocks/{name}"
        )
        with self.lock:
            self.sub_blocks[(zone, reservation, block, name)] = json.loads(compute_v1.ReservationSubBlock.to_json(sub))
            for vm in vms:
                status = self.instances[(zone, vm)].setdefault("resourceStatus", {})
                status["reservationConsumptionInfo"] = {
                    "consumedReservation": full.split("/reservationBlocks/")[0],
                    "consumedReservationBlock": full.split("/reservationSubBlocks/")[0],
                    "consumedReservationSubBlock": full,
                }

    def set_sub_block_health(
        self, zone: str, reservation: str, block: str, name: str, health: str, *, degraded_hosts: int = 0,
        degraded_infra: int = 0,
    ) -> None:  # fmt: skip
        """A fault on a sub-block (or its repair): the next get reports ``health`` and the degraded counts."""
        with self.lock:
            info = self.sub_blocks[(zone, reservation, block, name)]["healthInfo"]
            total_hosts = int(info.get("healthyHostCount", 0)) + int(info.get("degradedHostCount", 0))
            total_infra = int(info.get("healthyInfraCount", 0)) + int(info.get("degradedInfraCount", 0))
            info.update(healthStatus=health, degradedHostCount=degraded_hosts, healthyHostCount=total_hosts -
                        degraded_hosts, degradedInfraCount=degraded_infra, healthyInfraCount=total_infra -
                        degraded_infra)  # fmt: skip

    def set_status(self, zone: str, name: str, status: str) -> None:
        with self.lock:
            self.instances[(zone, name)]["status"] = status

    def set_labels(self, zone: str, name: str, labels: dict[str, str]) -> None:
        """What ``instances.setLabels`` does: the VM's labels become ``labels`` (the whole set)."""
        with self.lock:
            self.instances[(zone, name)]["labels"] = dict(labels)

    def inject_faults(self, fraction: float, *, status: int = 429, operations: Iterable[str] | None = None) -> None:
        """Fail ``fraction`` of the calls (of ``operations`` if given: ``list``, ``aggregatedList``, ``get``)."""
        if not 0 <= fraction <= 1 or status not in _STATUS_TEXT:
            raise ValueError(f"fraction must be within 0..1 and status one of {sorted(_STATUS_TEXT)}")
        with self.lock:
            self._faults.fraction = Fraction(fraction).limit_denominator(1000)
            self._faults.status = status
            self._faults.operations = frozenset(operations) if operations is not None else None
            self._faults.debt = Fraction(0)

    def reset_counts(self) -> None:
        with self.lock:
            self.calls.clear()
            self.injected.clear()
            self.requests.clear()

    def total_calls(self) -> int:
        with self.lock:
            return sum(self.calls.values())

    # ----- request handling ----------------------------------------------------------------------
    def _fault(self, op: str) -> int | None:
        f = self._faults
        if not f.fraction or (f.operations is not None and op not in f.operations):
            return None
        f.debt += f.fraction  # error diffusion: exactly `fraction` of the calls fail, evenly spread
        if f.debt >= 1:
            f.debt -= 1
            self.injected[op] = self.injected.get(op, 0) + 1
            return f.status
        return None

    def _sub_block_request(self, m: re.Match[str]) -> dict[str, Any]:
        op = "reservationSubBlocks." + ("get" if m.group("name") else "list")
        project = unquote(m.group("project"))
        with self.lock:
            self.calls[op] = self.calls.get(op, 0) + 1
            self.requests.append((op, {}))
            status = self._fault(op)
        if status is not None:
            raise ApiError(status, "injected fault")
        if project not in (self.project, self.project_number):
            raise ApiError(404, f"The resource 'projects/{project}' was not found")
        key = tuple(unquote(m.group(k)) for k in ("zone", "reservation", "block"))
        with self.lock:
            if m.group("name"):
                sub = self.sub_blocks.get((*key, unquote(m.group("name"))))  # type: ignore[arg-type]
                if sub is None:
                    raise ApiError(404, f"The resource '{m.group(0)}' was not found")
                return {"resource": sub}
            items = [v for (z, r, b, _), v in sorted(self.sub_blocks.items()) if (z, r, b) == key]
        return {"kind": "compute#reservationSubBlocksListResponse", "items": items}

    def report_faulty(self, path: str, body: Any) -> dict[str, Any]:
        """``reservationSubBlocks.reportFaulty``: the body must name a known ``failureComponent`` (400
        otherwise, as the API refuses an unspecified one); answered with a finished zonal ``Operation``."""
        m = _REPORT_FAULTY.match(path)
        if not m:
            raise ApiError(404, f"The requested URL {path} was not found on this server.")
        key = (m["zone"], m["reservation"], m["block"], m["name"])
        with self.lock:
            self.calls["reservationSubBlocks.reportFaulty"] = self.calls.get("reservationSubBlocks.reportFaulty", 0) + 1
            known = key in self.sub_blocks
        if unquote(m["project"]) not in (self.project, self.project_number) or not known:
            raise ApiError(404, f"The resource '{path.removesuffix('/reportFaulty')}' was not found")
        component = body.get("failureComponent") if isinstance(body, dict) else None
        if component not in FAILURE_COMPONENTS:
            raise ApiError(400, f"Invalid value for field 'failureComponent': {component!r}")
        with self.lock:
            self.faulty_reports.append((*key, dict(body)))
            number = len(self.faulty_reports)
        target = f"https://www.googleapis.com/compute/v1/projects/{self.project}/zones/{m['zone']}/reservations/"
        target += f"{m['reservation']}/reservationBlocks/{m['block']}/reservationSubBlocks/{m['name']}"
        return {"kind": "compute#operation", "id": str(1000 + number), "name": f"operation-report-faulty-{number}",
                "operationType": "reportFaulty", "status": "DONE", "progress": 100, "targetLink": target,
                "zone": f"https://www.googleapis.com/compute/v1/projects/{self.project}/zones/{m['zone']}"}  # fmt: skip

    def handle(self, path: str, query: dict[str, str]) -> dict[str, Any]:
        sub = _SUB_BLOCKS.match(path)
        if sub:
            return self._sub_block_request(sub)
        m = _PATH.match(path)
        if not m:
            raise ApiError(404, f"The requested URL {path} was not found on this server.")
        op = "get" if m.group("name") else "list" if m.group("zone") else "aggregatedList"
        with self.lock:
            self.calls[op] = self.calls.get(op, 0) + 1
            self.requests.append((op, dict(query)))
            status = self._fault(op)
        if status == 429:
            raise ApiError(429, "Quota exceeded for quota metric 'Read requests' and limit 'Read requests per minute'")
        if status == 403:
            raise ApiError(403, "Required 'compute.instances.list' permission for 'projects/" + self.project + "'")
        if status is not None:
            raise ApiError(status, "Internal error. Please try again or contact Google Support.")
        project = unquote(m.group("project"))
        if project not in (self.project, self.project_number):
            raise ApiError(404, f"The resource 'projects/{project}' was not found")
        zone = unquote(m.group("zone")) if m.group("zone") else None
        if op == "get":
            name = unquote(m.group("name"))
            with self.lock:
                inst = self.instances.get((zone or "", name))
            if inst is None:
                raise ApiError(404, f"The resource 'projects/{project}/zones/{zone}/instances/{name}' was not found")
            return inst
        return self._listing(project, zone, query)

    def _listing(self, project: str, zone: str | None, query: dict[str, str]) -> dict[str, Any]:
        raw_max = query.get("maxResults", str(MAX_RESULTS))
        if not raw_max.isdigit() or int(raw_max) > MAX_RESULTS:
            raise ApiError(400, f"Invalid value for field 'maxResults': '{raw_max}'. Must be less than or equal to 500")
        page_size = int(raw_max) or MAX_RESULTS
        terms = parse_filter(query.get("filter", ""))
        with self.lock:
            selected = sorted(
                (inst for (z, _), inst in self.instances.items() if zone is None or z == zone),
                key=lambda i: (str(i["zone"]).rsplit("/", 1)[-1], i["name"]),
            )
            zones = sorted(self.zones)
        selected = [i for i in selected if matches(i, terms)]
        # the token binds to the listing it came from, like the real one (a token for another filter is 400)
        scope = hashlib.sha256(f"{zone}|{query.get('filter', '')}".encode()).hexdigest()[:8]
        offset = 0
        if query.get("pageToken"):
            try:
                tok_scope, tok_offset = base64.urlsafe_b64decode(query["pageToken"]).decode().split(":")
                offset = int(tok_offset)
            except ValueError:
                raise ApiError(400, "Invalid value for field 'pageToken'") from None
            if tok_scope != scope:
                raise ApiError(400, "Invalid value for field 'pageToken': it belongs to another listing")
        page = selected[offset : offset + page_size]
        base = f"https://www.googleapis.com/compute/v1/projects/{project}"
        out: dict[str, Any]
        if zone is not None:
            out = {"kind": "compute#instanceList", "id": f"projects/{project}/zones/{zone}/instances", "items": page}
            out["selfLink"] = f"{base}/zones/{zone}/instances"
        else:
            items: dict[str, Any] = {}
            for z in zones:
                members = [i for i in page if str(i["zone"]).rsplit("/", 1)[-1] == z]
                items[f"zones/{z}"] = (
                    {"instances": members}
                    if members
                    else {
                        "warning": {
                            "code": "NO_RESULTS_ON_PAGE",
                            "message": f"There are no results for scope 'zones/{z}' on this page.",
                            "data": [{"key": "scope", "value": f"zones/{z}"}],
                        }
                    }
                )
            out = {"kind": "compute#instanceAggregatedList", "id": f"projects/{project}/aggregated/instances"}
            out.update(items=items, selfLink=f"{base}/aggregated/instances")
        if offset + page_size < len(selected):
            out["nextPageToken"] = base64.urlsafe_b64encode(f"{scope}:{offset + page_size}".encode()).decode()
        return out

    # ----- server lifecycle ----------------------------------------------------------------------
    def start(self, host: str = "127.0.0.1", port: int = 0) -> FakeCompute:
        fake = self

        class Handler(QuietHandler):
            def do_POST(self) -> None:
                url = urlparse(self.path)
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                try:
                    status, body = 200, fake.report_faulty(url.path, json.loads(raw or b"{}"))
                except ApiError as exc:
                    status, body = exc.code, _error_body(exc)
                except ValueError:
                    status, body = 400, _error_body(ApiError(400, "the request body is not JSON"))
                self.send_json(status, body)

            def do_GET(self) -> None:
                url = urlparse(self.path)
                query = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
                try:
                    status, body = 200, fake.handle(url.path, query)
                except ApiError as exc:
                    status = exc.code
                    body = {
                        "error": {
                            "code": exc.code,
                            "message": exc.message,
                            "errors": [
                                {
                                    "message": exc.message,
                                    "domain": "global",
                                    "reason": _REASON.get(exc.code, "backendError"),
                                }
                            ],
                            "status": _STATUS_TEXT[exc.code],
                        }
                    }
                self.send_json(status, body)

        self._serve(Handler, host, port, "fake-compute")
        return self
