"""A local directory as an :class:`~topocast.pipeline.objects.ObjectStore`: a store copied off a bucket
(``aws s3 sync``, ``gcloud storage rsync``), an air-gapped install, tests and benches.

Key ``a/b/c.json`` is the file ``<root>/a/b/c.json``; its metadata sits beside it in
``<root>/a/b/.c.json.meta`` (left out of listings; a synced copy without it simply has none). The version
token is the content's sha256. Conditional writes are checked, then written through a temporary file and
an atomic rename: enough for one writer at a time (a directory has no compare-and-swap).
"""

from __future__ import annotations

import hashlib
import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from topocast.errors import TopocastError
from topocast.pipeline.objects import MUST_NOT_EXIST, ObjectInfo, StoredObject
from topocast.safeio.limits import MAX_GRAPH_BYTES, check_size

__all__ = ["DirObjects"]


class DirObjects:
    """Objects under one local directory (see the module docstring)."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)

    def uri(self, key: str) -> str:
        return (self.root / key).as_uri() if self.root.is_absolute() else str(self.root / key)

    def _path(self, key: str) -> Path:
        if key.startswith("/") or ".." in key.split("/"):
            raise TopocastError(f"{key!r}: not a key inside {self.root}")
        return self.root / key

    def _meta_path(self, key: str) -> Path:
        path = self._path(key)
        return path.with_name(f".{path.name}.meta")

    def _metadata(self, key: str) -> dict[str, str]:
        try:
            data = json.loads(self._meta_path(key).read_text())
        except (OSError, ValueError):
            return {}
        return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}

    def head(self, key: str) -> ObjectInfo | None:
        path = self._path(key)
        try:
            stat = path.stat()
            token = hashlib.sha256(path.read_bytes()).hexdigest()
        except FileNotFoundError:
            return None
        return ObjectInfo(key, token, self._metadata(key), stat.st_size, datetime.fromtimestamp(stat.st_mtime, UTC))

    def get(self, key: str, *, limit: int | None = None) -> StoredObject | None:
        path = self._path(key)
        try:
            stat = path.stat()
            check_size(stat.st_size, limit or MAX_GRAPH_BYTES, self.uri(key), TopocastError)
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        token = hashlib.sha256(data).hexdigest()
        return StoredObject(key, data, token, self._metadata(key), datetime.fromtimestamp(stat.st_mtime, UTC))

    def put(
        self,
        key: str,
        data: bytes,
        *,
        content_type: str = "application/octet-stream",
        metadata: dict[str, str] | None = None,
        if_generation_match: Any | None = None,
    ) -> Any | None:
        path = self._path(key)
        if if_generation_match is not None:
            current = self.head(key)
            if if_generation_match == MUST_NOT_EXIST and current is not None:
                return None
            if if_generation_match != MUST_NOT_EXIST and (current is None or current.generation != if_generation_match):
                return None
        path.parent.mkdir(parents=True, exist_ok=True)
        self._write(self._meta_path(key), json.dumps(metadata or {}).encode())
        self._write(path, data)
        return hashlib.sha256(data).hexdigest()

    @staticmethod
    def _write(path: Path, data: bytes) -> None:
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)

    def delete(self, key: str, *, if_generation_match: Any | None = None) -> bool:
        current = self.head(key)
        if current is None or (if_generation_match is not None and current.generation != if_generation_match):
            return False
        self._path(key).unlink()
        self._meta_path(key).unlink(missing_ok=True)
        return True

    def list_prefix(self, prefix: str) -> list[ObjectInfo]:
        """Objects whose key starts with ``prefix``; only sizes and times (the token costs a read: use head)."""
        directory = self._path(prefix.rsplit("/", 1)[0]) if "/" in prefix else self.root
        if not directory.is_dir():
            return []
        out = []
        for path in sorted(directory.rglob("*")):
            if not path.is_file() or path.name.startswith("."):
                continue
            key = path.relative_to(self.root).as_posix()
            if key.startswith(prefix):
                stat = path.stat()
                out.append(ObjectInfo(key, None, {}, stat.st_size, datetime.fromtimestamp(stat.st_mtime, UTC)))
        return out

    def copy(self, key: str, to: str, *, metadata: dict[str, str]) -> None:
        got = self.get(key)
        if got is None:
            raise TopocastError(f"{self.uri(key)}: no such object to copy")
        self.put(to, got.data, metadata=metadata)
