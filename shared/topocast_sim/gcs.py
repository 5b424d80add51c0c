"""Local Cloud Storage: gcp-storage-emulator plus a proxy that enforces generation preconditions.

gcp-storage-emulator speaks the JSON API well enough for google-cloud-storage,
but accepts every ``ifGenerationMatch`` / ``ifGenerationNotMatch`` /
``ifMetagenerationMatch`` / ``ifMetagenerationNotMatch`` without checking it
(offline-tooling.md §3). topocast's correctness rests on those checks (graph
pointer, manifests, debounce state, published Slurm files), so
:class:`PreconditionProxy` sits in front of the emulator and enforces them the
way Cloud Storage documents: it reads the object's current generation and
metageneration from the emulator and answers **412 conditionNotMet** (JSON
error body, which google-cloud-storage raises as ``PreconditionFailed``) when a
condition does not hold, or **304** for a read whose ``...NotMatch`` does not
hold. Conditional and mutating requests are serialised through one lock, so the
check and the write are atomic, as they are per object in GCS.

The proxy also plays Cloud Storage's Pub/Sub notifications: it serves the bucket's
``notificationConfigs`` (create, list, get, delete: what google-cloud-storage's
``BucketNotification`` and Terraform's ``google_storage_notification`` call) and, after every
upload that finalizes an object under a config's ``object_name_prefix``, publishes an
``OBJECT_FINALIZE`` message (``JSON_API_V1`` payload: the object resource; the attributes Cloud
Storage sets) to the config's topic on the Pub/Sub at ``PUBSUB_EMULATOR_HOST``
(:class:`topocast_sim.pubsub.FakePubSub`). Only ``OBJECT_FINALIZE`` is emitted (no delete,
archive or metadata-update events), and right after the upload's answer (Cloud Storage's
delivery is asynchronous, usually within seconds).

Covered: object metadata GET/PATCH/DELETE (``/storage/v1/b/B/o/NAME``),
downloads (``/download/storage/v1/b/B/o/NAME``), simple, multipart and
resumable-session uploads (``/upload/storage/v1/b/B/o``; the object name is
taken from the ``name`` parameter or the JSON metadata part). Not covered:
batch requests and the chunks of a resumable upload (checked once, when the
session starts), and object versioning (the emulator keeps one version).
Everything else passes through unchanged.
"""

from __future__ import annotations

import base64
import json
import os
import threading
from datetime import UTC, datetime
from http.client import HTTPConnection
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlparse

from topocast_sim.http import LocalServer, QuietHandler

_CONDITIONS = ("ifGenerationMatch", "ifGenerationNotMatch", "ifMetagenerationMatch", "ifMetagenerationNotMatch")
_HOP = {"connection", "keep-alive", "transfer-encoding", "proxy-connection", "te", "upgrade", "trailer"}


def _target(method: str, path: str, query: dict[str, str], body: bytes, content_type: str) -> tuple[str, str] | None:
    """(bucket, object name) a request addresses, or None when it is not an object request."""
    parts = path.split("/")
    # /storage/v1/b/B/o/NAME and /download/storage/v1/b/B/o/NAME
    for base in (["", "storage", "v1", "b"], ["", "download", "storage", "v1", "b"]):
        n = len(base)
        if parts[:n] == base and len(parts) > n + 2 and parts[n + 1] == "o":
            return unquote(parts[n]), unquote("/".join(parts[n + 2 :]))
    base = ["", "upload", "storage", "v1", "b"]
    if method == "POST" and parts[: len(base)] == base and len(parts) == len(base) + 2 and parts[-1] == "o":
        bucket = unquote(parts[len(base)])
        if query.get("name"):
            return bucket, query["name"]
        meta = _upload_metadata(body, content_type, query.get("uploadType", ""))
        if isinstance(meta, dict) and isinstance(meta.get("name"), str):
            return bucket, meta["name"]
    return None


def _upload_metadata(body: bytes, content_type: str, upload_type: str) -> Any:
    try:
        if upload_type == "resumable":
            return json.loads(body or b"{}")
        if upload_type == "multipart" and "boundary=" in content_type:
            boundary = content_type.split("boundary=", 1)[1].split(";")[0].strip().strip('"').encode()
            first = body.split(b"--" + boundary)[1]
            return json.loads(first.split(b"\r\n\r\n", 1)[1].rstrip(b"\r\n"))
    except (ValueError, IndexError):
        return None
    return None


def _error(code: int, reason: str, message: str) -> bytes:
    return json.dumps(
        {
            "error": {
                "code": code,
                "message": message,
                "errors": [{"message": message, "domain": "global", "reason": reason}],
            }
        }
    ).encode()


class PreconditionProxy(LocalServer):
    """HTTP proxy in front of a gcp-storage-emulator URL (see the module docstring)."""

    def __init__(self, upstream: str) -> None:
        parsed = urlparse(upstream)
        self.upstream_host = parsed.hostname or "127.0.0.1"
        self.upstream_port = parsed.port or 80
        self.lock = threading.Lock()
        self.checked = 0
        self.refused = 0
        #: fault injection: answer the next N uploads (POST /upload/...) with HTTP ``fail_status``
        self.fail_uploads = 0
        self.fail_status = 503
        self.injected = 0
        #: fault injection: forward the next N uploads of an object whose name contains
        #: ``lose_match``, then drop the connection unanswered (the write landed, its response is lost)
        self.lose_responses = 0
        self.lose_match = ""
        self.lost = 0
        #: the buckets' notification configs (``notificationConfigs`` resources), by bucket
        self.notifications: dict[str, list[dict[str, Any]]] = {}
        self.notified = 0
        self.undelivered = 0  # finalize events with no PUBSUB_EMULATOR_HOST or topic to go to

    def notification_configs(self, method: str, bucket: str, rest: list[str], body: bytes) -> tuple[int, bytes]:
        """``/storage/v1/b/B/notificationConfigs[/ID]``: create, list, get, delete."""
        with self.lock:
            configs = self.notifications.setdefault(bucket, [])
            if method == "POST" and not rest:
                try:
                    config = json.loads(body or b"{}")
                except ValueError:
                    return 400, _error(400, "invalid", "Invalid JSON payload")
                if not isinstance(config, dict) or not str(config.get("topic", "")).startswith("//pubsub."):
                    return 400, _error(400, "invalid", "topic must be //pubsub.googleapis.com/projects/P/topics/T")
                config = {**config, "id": str(len(configs) + 1), "kind": "storage#notification", "etag": "1"}
                config.setdefault("payload_format", "JSON_API_V1")
                config["selfLink"] = f"/storage/v1/b/{bucket}/notificationConfigs/{config['id']}"
                configs.append(config)
                return 200, json.dumps(config).encode()
            if method == "GET" and not rest:
                return 200, json.dumps({"kind": "storage#notifications", "items": configs}).encode()
            found = [c for c in configs if rest and c["id"] == rest[0]]
            if not found:
                return 404, _error(404, "notFound", "Not Found")
            if method == "DELETE":
                configs.remove(found[0])
                return 204, b""
            return 200, json.dumps(found[0]).encode()

    def finalized(self, data: bytes) -> None:
        """An upload's answer: when it is an object resource, its OBJECT_FINALIZE notifications."""
        if not self.notifications:  # no bucket has a notification config: nothing to parse
            return
        try:
            obj = json.loads(data)
        except ValueError:
            return
        if not isinstance(obj, dict) or obj.get("kind") != "storage#object":
            return
        bucket, name = str(obj.get("bucket", "")), str(obj.get("name", ""))
        with self.lock:
            configs = [
                c
                for c in self.notifications.get(bucket, [])
                if name.startswith(c.get("object_name_prefix", ""))
                and "OBJECT_FINALIZE" in (c.get("event_types") or ["OBJECT_FINALIZE"])
            ]
        host = os.environ.get("PUBSUB_EMULATOR_HOST")
        for c in configs:
            attributes = {
                **(c.get("custom_attributes") or {}),
                "notificationConfig": f"projects/_/buckets/{bucket}/notificationConfigs/{c['id']}",
                "eventType": "OBJECT_FINALIZE",
                "payloadFormat": c.get("payload_format", "JSON_API_V1"),
                "bucketId": bucket,
                "objectId": name,
                "objectGeneration": str(obj.get("generation", "")),
                "eventTime": datetime.now(UTC).isoformat().replace("+00:00", "Z"),
            }
            payload = base64.b64encode(data if attributes["payloadFormat"] == "JSON_API_V1" else b"").decode()
            topic = str(c["topic"]).split("pubsub.googleapis.com/", 1)[-1]
            message = json.dumps({"messages": [{"data": payload, "attributes": attributes}]}).encode()
            delivered = False
            if host:
                conn = HTTPConnection(host, timeout=10)  # "host:port", as the client libraries take it
                try:
                    headers = {"Content-Type": "application/json"}
                    conn.request("POST", f"/v1/{topic}:publish", body=message, headers=headers)
                    delivered = conn.getresponse().status == 200
                except OSError:
                    delivered = False
                finally:
                    conn.close()
            with self.lock:
                self.notified += delivered
                self.undelivered += not delivered

    def _upstream(
        self, method: str, path: str, body: bytes | None, headers: dict[str, str]
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        conn = HTTPConnection(self.upstream_host, self.upstream_port, timeout=60)
        try:
            conn.request(method, path, body=body, headers=headers)
            resp = conn.getresponse()
            return resp.status, resp.getheaders(), resp.read()
        finally:
            conn.close()

    def _current(self, bucket: str, name: str) -> tuple[int, int] | None:
        status, _, body = self._upstream(
            "GET", f"/storage/v1/b/{quote(bucket, safe='')}/o/{quote(name, safe='')}", None, {}
        )
        if status != 200:
            return None
        meta = json.loads(body)
        return int(meta.get("generation", 0)), int(meta.get("metageneration", 0))

    def _lose(self, name: str) -> bool:
        """Whether to drop the response to this (already forwarded) upload of ``name``."""
        with self.lock:
            if self.lose_responses <= 0 or self.lose_match not in name:
                return False
            self.lose_responses -= 1
            self.lost += 1
            return True

    def check(self, method: str, query: dict[str, str], current: tuple[int, int] | None) -> int | None:
        """The status to answer instead of forwarding (412/304), or None when every condition holds."""
        read = method in ("GET", "HEAD")
        if current is None and read:
            return None  # a read of a missing object: the emulator answers 404
        generation, metageneration = current if current else (0, 0)
        for cond in _CONDITIONS:
            if cond not in query:
                continue
            try:
                wanted = int(query[cond])
            except ValueError:
                return 400
            actual = generation if cond in ("ifGenerationMatch", "ifGenerationNotMatch") else metageneration
            holds = actual != wanted if cond.endswith("NotMatch") else actual == wanted
            if not holds:
                return 304 if read and cond.endswith("NotMatch") else 412
        return None

    def start(self, host: str = "127.0.0.1", port: int = 0) -> PreconditionProxy:
        proxy = self

        class Handler(QuietHandler):
            def _handle(self) -> None:
                url = urlparse(self.path)
                query = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP and k.lower() != "host"}
                parts = url.path.split("/")
                if parts[:4] == ["", "storage", "v1", "b"] and len(parts) > 5 and parts[5] == "notificationConfigs":
                    status, data = proxy.notification_configs(self.command, unquote(parts[4]), parts[6:], body)
                    self._reply(status, [("Content-Type", "application/json")], data)
                    return
                if self.command == "POST" and url.path.startswith("/upload/"):
                    with proxy.lock:
                        fail = proxy.fail_uploads > 0
                        if fail:
                            proxy.fail_uploads -= 1
                            proxy.injected += 1
                    if fail:
                        msg = "Injected backend error"
                        self._reply(
                            proxy.fail_status,
                            [("Content-Type", "application/json")],
                            _error(proxy.fail_status, "backendError", msg),
                        )
                        return
                target = _target(self.command, url.path, query, body, self.headers.get("Content-Type", ""))
                guarded = target is not None and (self.command != "GET" or any(c in query for c in _CONDITIONS))
                if guarded:
                    with proxy.lock:
                        answer = None
                        if any(c in query for c in _CONDITIONS):
                            proxy.checked += 1
                            answer = proxy.check(self.command, query, proxy._current(*target))  # type: ignore[misc]
                        if answer is not None:
                            proxy.refused += 1
                            self._reply(
                                answer,
                                [("Content-Type", "application/json")],
                                b""
                                if answer == 304
                                else _error(
                                    answer,
                                    "conditionNotMet",
                                    "At least one of the pre-conditions you specified did not hold.",
                                ),
                            )
                            return
                        status, out_headers, data = proxy._upstream(self.command, self.path, body or None, headers)
                else:
                    status, out_headers, data = proxy._upstream(self.command, self.path, body or None, headers)
                if self.command == "POST" and target is not None and proxy._lose(target[1]):
                    self.close_connection = True  # no reply at all: the client sees the connection drop
                    return
                self._reply(status, out_headers, data)
                if self.command in ("POST", "PUT") and url.path.startswith("/upload/") and 200 <= status < 300:
                    proxy.finalized(data)

            def _reply(self, status: int, headers: list[tuple[str, str]], data: bytes) -> None:
                self.send_response(status)
                for k, v in headers:
                    if k.lower() not in _HOP and k.lower() != "content-length":
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _handle

        self._serve(Handler, host, port, "gcs-precondition-proxy")
        return self


class LocalGcs:
    """An in-memory gcp-storage-emulator on a free port with a :class:`PreconditionProxy` in front.

    ``url`` is the proxy (what clients use); ``emulator_url`` bypasses the checks.
    ``separate_process=True`` runs both in a child process (``python -m
    topocast_sim.gcs``), so their CPU time does not compete with the caller's
    threads for the GIL; the fault-injection and counters of :attr:`proxy` are
    only available in-process.
    """

    def __init__(self, buckets: tuple[str, ...] = (), *, separate_process: bool = False) -> None:
        self.buckets = buckets
        self.separate_process = separate_process
        self._server: Any = None
        self._child: Any = None
        self._urls: tuple[str, str] | None = None
        self.proxy: PreconditionProxy | None = None

    def start(self) -> LocalGcs:
        if self.separate_process:
            import subprocess
            import sys

            self._child = subprocess.Popen(
                [sys.executable, "-m", "topocast_sim.gcs"], stdout=subprocess.PIPE, stdin=subprocess.PIPE, text=True
            )
            line = self._child.stdout.readline().split() if self._child.stdout else []
            if len(line) != 2:
                self.stop()
                raise RuntimeError("the local GCS child process did not start")
            self._urls = (line[0], line[1])
        else:
            import logging

            from gcp_storage_emulator.server import create_server

            logging.getLogger("gcp_storage_emulator").setLevel(logging.CRITICAL)  # it logs every 404 as an error
            self._server = create_server("127.0.0.1", 0, in_memory=True)
            # The emulator re-serialises its whole metadata (every object, every soft-deleted one) to a
            # ".meta" file after each write: O(objects) per write. In memory nothing ever reads it back.
            self._server._storage._write_config_to_file = lambda: None
            self._server.start()
            host, port = self._server._api._httpd.server_address[:2]
            self.proxy = PreconditionProxy(f"http://{host}:{port}").start()
            self._urls = (self.proxy.url, f"http://{host}:{port}")
        if self.buckets:
            from topocast.gcp.clients import storage_client

            client = storage_client("local", self.url)
            for name in self.buckets:
                client.create_bucket(name)
        return self

    @property
    def url(self) -> str:
        assert self._urls is not None, "LocalGcs not started"
        return self._urls[0]

    @property
    def emulator_url(self) -> str:
        assert self._urls is not None, "LocalGcs not started"
        return self._urls[1]

    def stop(self) -> None:
        if self.proxy is not None:
            self.proxy.stop()
        if self._server is not None:
            # the emulator's loop looks for shutdown() every 0.5 s (serve_forever's default, which it does
            # not let us set): stop it in the background instead of waiting for that on every pipeline stop
            threading.Thread(target=self._server.stop, name="gcs-emulator-stop", daemon=True).start()
            self._server = None
        if self._child is not None:
            self._child.terminate()  # the child we started, by its handle
            self._child.wait(timeout=10)
            self._child = None

    def __enter__(self) -> LocalGcs:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main() -> None:
    """Run a :class:`LocalGcs` until stdin closes; prints ``<proxy url> <emulator url>`` when ready."""
    import sys

    gcs = LocalGcs().start()
    print(gcs.url, gcs.emulator_url, flush=True)
    try:
        sys.stdin.read()  # the parent closes the pipe (or exits) to stop us
    finally:
        gcs.stop()


if __name__ == "__main__":
    main()
