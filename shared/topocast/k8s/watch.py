"""Watching a kind for changes that matter: list, then watch from the list's resourceVersion, forever.

The client reads each answer whole, so the watch runs in windows (``timeoutSeconds``): each window
returns the events since the last resourceVersion seen, and bookmarks (``allowWatchBookmarks``) move
that resourceVersion on even when nothing changed, so a quiet kind never falls behind compaction.

Nothing is lost on the way, deletions included (the bug of watchers that only follow events):

* a window that fails (a dropped connection, a 5xx, a timeout) is retried from the same
  resourceVersion: events are kept on the server, so the next window brings them;
* a resourceVersion the server no longer has (``410 Expired``, the ``ERROR`` event a watch gets after
  etcd compaction) means events were missed: the kind is listed again and the list is compared with
  what was known, so an object deleted in the gap is reported as deleted.

What is "known" is a fingerprint per object of only what the caller cares about (``relevant``: for
topology, a Node's labels), so a heartbeat that only touches ``status`` is not a change.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

__all__ = ["Change", "KindWatcher", "WatchApi", "node_topology_view"]


class WatchApi(Protocol):
    """What the watcher calls (:class:`topocast.k8s.client.KubeClient` has both)."""

    def request_json(
        self, method: str, path: str, *, params: Any = None, body: Any = None, content_type: str = ...
    ) -> dict[str, Any]: ...

    def request_lines(self, path: str, *, params: Mapping[str, str], timeout: float) -> list[dict[str, Any]]: ...


@dataclass(frozen=True)
class Change:
    """One object that changed in a way that matters: ``added``, ``modified`` or ``deleted``."""

    kind: str
    name: str


def node_topology_view(obj: Mapping[str, Any], ignore: Collection[str] = ()) -> Any:
    """What of a Node topology reads: its labels but those in ``ignore`` (the ones topocast writes itself)."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return tuple(sorted((str(k), str(v)) for k, v in labels.items() if k not in ignore))


@dataclass
class KindWatcher:
    """List + windowed watch of one collection (``/api/v1/nodes``), reporting :class:`Change` s."""

    api: WatchApi
    path: str = "/api/v1/nodes"
    relevant: Callable[[Mapping[str, Any]], Any] = node_topology_view
    window_seconds: int = 10
    page_size: int = 500
    sleep: Callable[[float], None] = time.sleep
    #: name -> fingerprint of what matters, as last seen
    known: dict[str, Any] = field(default_factory=dict)
    resource_version: str | None = None
    #: counters for /metrics: windows read, relists (410 or start), window failures
    stats: dict[str, int] = field(default_factory=lambda: {"windows": 0, "relists": 0, "watch_errors": 0})
    last_error: str | None = None

    def relist(self) -> list[Change]:
        """List everything (paged) and compare with what was known: the changes, deletions included."""
        seen: dict[str, Any] = {}
        params: dict[str, str] = {"limit": str(self.page_size)}
        pages = 0
        while True:
            page = self.api.request_json("GET", self.path, params=params)
            for item in page.get("items") or []:
                seen[str(item["metadata"]["name"])] = self.relevant(item)
            meta = page.get("metadata") or {}
            pages += 1
            token = meta.get("continue")
            if not token:
                break
            if pages > 100_000:  # a server that hands out continue tokens forever
                raise RuntimeError(f"{self.path}: more than 100,000 pages; refusing to go on")
            params = {"limit": str(self.page_size), "continue": str(token)}
        self.resource_version = str(meta.get("resourceVersion") or "") or None
        self.stats["relists"] += 1
        changes = [Change("deleted", name) for name in sorted(set(self.known) - set(seen))]
        changes += [Change("added", n) for n in sorted(set(seen) - set(self.known))]
        changes += [Change("modified", n) for n in sorted(set(seen) & set(self.known)) if seen[n] != self.known[n]]
        self.known = seen
        return changes

    def poll(self) -> list[Change]:
        """One watch window (a relist first when there is no resourceVersion yet, or it expired)."""
        from lightkube.core.exceptions import ApiError

        if self.resource_version is None:
            return self.relist()
        params = {
            "watch": "1",
            "resourceVersion": self.resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(self.window_seconds),
        }
        try:
            events = self.api.request_lines(self.path, params=params, timeout=self.window_seconds + 30.0)
        except ApiError as exc:
            if getattr(exc.status, "code", None) == 410:
                return self.relist()
            return self._failed(f"HTTP {getattr(exc.status, 'code', '?')}: {exc}")
        except Exception as exc:  # a dropped stream, a timeout: the same resourceVersion next time
            return self._failed(f"{type(exc).__name__}: {exc}")
        self.stats["windows"] += 1
        self.last_error = None
        return self._apply(events)

    def _failed(self, why: str) -> list[Change]:
        self.stats["watch_errors"] += 1
        self.last_error = f"watch {self.path}: {why}"[:300]
        self.sleep(1.0)
        return []

    def _apply(self, events: Iterable[Mapping[str, Any]]) -> list[Change]:
        changes: dict[str, Change] = {}
        for event in events:
            kind, obj = event.get("type"), event.get("object") or {}
            meta = obj.get("metadata") or {}
            if kind == "ERROR":
                if obj.get("code") == 410:  # compacted: what happened in between is only in a fresh list
                    return [*changes.values(), *self.relist()]
                continue
            if meta.get("resourceVersion"):
                self.resource_version = str(meta["resourceVersion"])
            if kind == "BOOKMARK":
                continue
            name = str(meta.get("name") or "")
            if not name:
                continue
            if kind == "DELETED":
                if self.known.pop(name, None) is not None or name in changes:
                    changes[name] = Change("deleted", name)
                continue
            view = self.relevant(obj)
            before = self.known.get(name)
            self.known[name] = view
            if before is None:
                changes[name] = Change("added", name)
            elif before != view:
                changes[name] = Change("modified", name)
        return list(changes.values())
