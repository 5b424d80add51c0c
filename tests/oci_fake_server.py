"""A wire-level fake of the OCI Core Services endpoints the ``oci`` provider calls, and of the OCI IMDS.

Built from the SDK's model classes, not from topocast's code: every record is an
``oci.core.models.ComputeHostSummary`` / ``ComputeHost`` / ``Instance`` serialised with the model's own
``attribute_map`` (the camelCase wire names), answered on the documented paths of the API reference
(``GET /20160918/computeHosts?compartmentId=&limit=&page=``, ``GET /20160918/computeHosts/{id}``,
``GET /20160918/instances?compartmentId=&limit=&page=``) with paging by the ``opc-next-page``
header. The request signature is not checked (any ``Authorization`` header passes, none is refused
with 401 ``NotAuthenticated``, as the service answers an unsigned call). ``fail`` makes one
operation answer an error.

Compartments, as OCI keeps them: a list answers only what its ``compartmentId`` holds (400
``MissingParameter`` without one). Compute hosts sit in the root compartment, the tenancy
(``ComputeHostSummary.compartment_id``: "This should always be the root compartment"), so
``ListComputeHosts`` of the instances' compartment answers no host; ``computeHostInSubtree=true``
adds every compartment under the one named (the SDK docstring: "all the compartments in the tenancy
are traversed"). ``ListInstances`` has no subtree: it answers the instances of that compartment only.

The IMDS part answers ``/opc/v2/host/rdmaTopologyData`` and ``/opc/v2/instance/id`` when the request
carries ``Authorization: Bearer Oracle``.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

__all__ = ["FakeOci", "oci_config", "wire"]


def wire(model: Any) -> dict[str, Any]:
    """An SDK model object as the service sends it: camelCase keys from its ``attribute_map``."""
    out: dict[str, Any] = {}
    for attr, key in model.attribute_map.items():
        value = getattr(model, attr)
        if value is None:
            continue
        if isinstance(value, datetime):
            value = value.isoformat()
        elif hasattr(value, "attribute_map"):
            value = wire(value)
        out[key] = value
    return out


@dataclass
class FakeOci:
    """``with FakeOci(hosts, instances) as fake: fake.url`` is a Core Services endpoint."""

    hosts: list[Any] = field(default_factory=list)  # oci.core.models.ComputeHostSummary
    instances: list[Any] = field(default_factory=list)  # oci.core.models.Instance
    details: dict[str, Any] = field(default_factory=dict)  # host id -> oci.core.models.ComputeHost
    rdma: dict[str, Any] = field(default_factory=dict)  # IMDS: rdmaTopologyData JSON
    instance_id: str = "ocid1.instance.oc1..self"
    #: the root compartment (``oci_config``'s tenancy) and each other compartment's parent
    tenancy: str = "ocid1.tenancy.oc1..aaaafake"
    parents: dict[str, str] = field(default_factory=dict)
    #: operation -> (status, code) to answer instead
    fail: dict[str, tuple[int, str]] = field(default_factory=dict)
    #: operation -> a page token to hand back on every page (a paging bug of the service)
    repeat_token: dict[str, str] = field(default_factory=dict)
    #: operation -> a hostile service's paging: "same-items" (a fresh token with the first page again, forever),
    #: "empty" (a fresh token with no items, forever), "fresh-items" (new IDs and a fresh token, forever)
    endless: dict[str, str] = field(default_factory=dict)
    calls: list[tuple[str, dict[str, list[str]]]] = field(default_factory=list)
    url: str = ""

    def __enter__(self) -> FakeOci:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                parsed = urlparse(self.path)
                query = parse_qs(parsed.query)
                status, body, headers = fake.answer(parsed.path, query, dict(self.headers))
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.send_header("opc-request-id", "fake-request")
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _page(self, op: str, items: list[Any], query: dict[str, list[str]]) -> tuple[list[Any], dict[str, str]]:
        limit = int(query.get("limit", ["1000"])[0])
        token = query.get("page", ["0"])[0] or "0"
        if op in self.endless:
            n = int(token.removeprefix("t")) + 1
            chunk = {
                "same-items": items[:limit],
                "empty": [],
                "fresh-items": [{**i, "id": f"{i['id']}-{n}-{k}"} for k, i in enumerate(items[:limit])],
            }
            return chunk[self.endless[op]], {"opc-next-page": f"t{n}"}  # fmt: skip
        start = int(token)
        chunk = items[start : start + limit]
        headers = {}
        if start + limit < len(items):
            headers["opc-next-page"] = self.repeat_token.get(op, str(start + limit))
        return chunk, headers

    def answer(
        self, path: str, query: dict[str, list[str]], headers: dict[str, str]
    ) -> tuple[int, Any, dict[str, str]]:
        if path.startswith("/opc/v2/"):
            if headers.get("Authorization") != "Bearer Oracle":
                return 401, {"code": "NotAuthenticated", "message": "missing IMDSv2 header"}, {}
            if path == "/opc/v2/host/rdmaTopologyData":
                return 200, self.rdma, {}
            if path == "/opc/v2/instance/id":
                return 200, self.instance_id.encode(), {}
            return 404, {"code": "NotFound", "message": path}, {}
        op = {"/20160918/computeHosts": "ListComputeHosts", "/20160918/instances": "ListInstances"}.get(path)
        if op is None and path.startswith("/20160918/computeHosts/"):
            op = "GetComputeHost"
        self.calls.append((op or path, query))
        if op is None:
            return 404, {"code": "NotAuthorizedOrNotFound", "message": path}, {}
        if "authorization" not in {k.lower() for k in headers}:
            return (
                401,
                {
                    "code": "NotAuthenticated",
                    "message": "The required information to complete authentication was not provided.",
                },
                {},
            )
        if op in self.fail:
            status, code = self.fail[op]
            return status, {"code": code, "message": f"{op} failed (fake)"}, {}
        if op == "GetComputeHost":
            host_id = path.rsplit("/", 1)[1]
            if host_id not in self.details:
                return 404, {"code": "NotAuthorizedOrNotFound", "message": host_id}, {}
            return 200, wire(self.details[host_id]), {}
        compartment = query.get("compartmentId", [None])[0]
        if not compartment:
            return 400, {"code": "MissingParameter", "message": "compartmentId is required"}, {}
        if op == "ListComputeHosts":
            ad = query.get("availabilityDomain", [None])[0]
            subtree = query.get("computeHostInSubtree", ["false"])[0] == "true"
            chosen = [
                h
                for h in self.hosts
                if (ad is None or h.availability_domain == ad) and self._holds(compartment, h.compartment_id, subtree)
            ]
            items, more = self._page(op, [wire(h) for h in chosen], query)
            return 200, {"items": items}, more
        held = [i for i in self.instances if i.compartment_id == compartment]
        items, more = self._page(op, [wire(i) for i in held], query)
        return 200, items, more

    def _holds(self, compartment: str, owner: str | None, subtree: bool) -> bool:
        """Whether ``owner`` is ``compartment`` or, with ``subtree``, a compartment under it."""
        while owner:
            if owner == compartment:
                return True
            if not subtree:
                return False
            owner = self.parents.get(owner, self.tenancy if owner != self.tenancy else None)
        return False


def oci_config(tmp: Path, region: str = "us-chicago-1") -> Path:
    """An OCI config file with a fresh API key (the fake ignores the signature, the SDK still signs)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = tmp / "oci_api_key.pem"
    pem.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    pem.chmod(0o600)
    config = tmp / "oci-config"
    config.write_text(
        "[DEFAULT]\n"
        "user=ocid1.user.oc1..aaaafake\n"
        "fingerprint=11:22:33:44:55:66:77:88:99:00:aa:bb:cc:dd:ee:ff\n"
        "tenancy=ocid1.tenancy.oc1..aaaafake\n"
        f"region={region}\n"
        f"key_file={pem}\n"
    )
    return config
