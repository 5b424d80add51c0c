"""One bound for every paged listing topocast reads from an API (OCI, Azure, Nebius, NetQ, Kubernetes).

A listing ends when the API says so (no next token), and a hostile or broken API can keep saying
"there is more": a fresh token with the same items forever, empty pages with fresh tokens, an offset
it ignores. :class:`PageGuard` is told every page and stops each of these with one line naming the
API and the bound, before memory or time runs out:

* **an empty page ends the listing** (whatever token comes with it: an API with more to send sends it),
  unless the API may legitimately send one (a Kubernetes LIST with a selector): then it counts as a page;
* **an item ID on two pages** is refused: the listing is not advancing (or shifted under us);
* **a token seen twice** is refused (a loop);
* **more than** :data:`MAX_LISTED_ITEMS` **items**, or **more pages than that bound needs** at the page size
  (:func:`page_cap`): the size asked for, or the largest page the server sent when that is smaller (a
  server-side maximum below ours makes every page short, and is no reason to fail a real listing), but
  never less than :data:`MIN_PAGE_ITEMS`: a server sending a few items a page is trickling.

Pure: it counts what it is shown.
"""

from __future__ import annotations

from collections.abc import Iterable

from topocast.errors import ProviderError, TopocastError

__all__ = ["MAX_LISTED_ITEMS", "MIN_PAGE_ITEMS", "PageGuard", "page_cap"]

#: the most items one listing may return: the 100,000 nodes every cap of ``safeio.limits`` is sized for
MAX_LISTED_ITEMS = 100_000


#: the smallest page a real API sends when asked for more (a server-side maximum is never below it)
MIN_PAGE_ITEMS = 100


def page_cap(page_size: int | None, bound: int = MAX_LISTED_ITEMS) -> int:
    """The most pages a listing of at most ``bound`` items needs at ``page_size`` (``bound`` when unknown)."""
    return bound // page_size + 2 if page_size and page_size > 0 else bound


class PageGuard:
    """Told each page (its item IDs and its next token), says whether to fetch another one."""

    def __init__(
        self,
        api: str,
        page_size: int | None = None,
        *,
        bound: int | None = None,
        error: type[TopocastError] = ProviderError,
        empty_ends: bool = True,
    ) -> None:
        self.api = api
        self.page_size = page_size
        self.bound = MAX_LISTED_ITEMS if bound is None else bound
        self.error = error
        self.empty_ends = empty_ends
        self.largest = 0
        self.pages = 0
        self.items = 0
        self._ids: set[str] = set()
        self._tokens: set[str] = set()

    def more(self, ids: Iterable[object], token: object) -> bool:
        """Record one page (``ids``: its items' IDs, None for an item without one); True: fetch the next.

        Raises ``error`` naming the API and the bound when the listing does not advance or grows past it.
        """
        self.pages += 1
        count = 0
        for item_id in ids:
            count += 1
            if item_id is None or item_id == "":
                continue
            key = str(item_id)
            if key in self._ids:
                raise self.error(
                    f"{self.api}: item {key[:80]!r} came on two pages (page {self.pages}): the listing is not "
                    "advancing; refusing to page on"
                )
            self._ids.add(key)
        self.items += count
        self.largest = max(self.largest, count)
        if self.items > self.bound:
            raise self.error(f"{self.api}: more than {self.bound} items listed (the bound of one listing)")
        if not token or (not count and self.empty_ends):
            return False  # the end, or an empty page: an API with more to send sends it
        # a server may cap its pages below our size (no error for a real listing), but a server sending
        # a few items a page is trickling: pages count as at least MIN_PAGE_ITEMS (or our size, if smaller)
        size = max(self.largest, MIN_PAGE_ITEMS)
        size = min(size, self.page_size) if self.page_size else size
        cap = page_cap(size, self.bound)
        if self.pages >= cap:
            raise self.error(
                f"{self.api}: more than {cap} pages of {size or 'unknown size'} "
                f"(the bound of {self.bound} items); refusing to page on"
            )
        key = str(token)
        if key in self._tokens:
            raise self.error(f"{self.api}: the API returned page token {key[:40]!r} twice")
        self._tokens.add(key)
        return True
