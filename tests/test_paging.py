"""The one bound of every paged listing (``safeio.paging.PageGuard``), and the Kubernetes LISTs that use it.

The provider adapters' own hostile services are in their tests (OCI, Nebius, Azure, NMX-M): a fresh
token with the same items, empty pages, IDs made up forever.
"""

from __future__ import annotations

from typing import Any

import pytest

from topocast.errors import ProviderError
from topocast.safeio.paging import PageGuard, page_cap


def test_the_page_cap_is_the_pages_the_bound_needs_at_the_page_size() -> None:
    assert page_cap(500, 200_000) == 402  # 400 full pages, one short, one spare
    assert page_cap(None, 1000) == 1000


def test_a_listing_ends_on_no_token_or_an_empty_page() -> None:
    guard = PageGuard("api", 2)
    assert guard.more(["a", "b"], "t1") is True
    assert guard.more([], "t2") is False
    assert PageGuard("api", 2).more(["a"], None) is False


def test_an_empty_page_counts_against_the_cap_where_the_api_may_send_one() -> None:
    guard = PageGuard("api", 100, bound=200, empty_ends=False)  # the cap: 200 // 100 + 2 = 4 pages
    assert [guard.more([], f"t{i}") for i in range(3)] == [True, True, True]
    with pytest.raises(ProviderError, match=r"^api: more than 4 pages of 100 \(the bound of 200 items\)"):
        guard.more([], "t3")


def test_a_server_trickling_items_is_stopped_by_the_page_cap() -> None:
    guard = PageGuard("api", 10, bound=100)  # one page of 10, then pages of 1: the cap is 100 // 10 + 2 = 12
    guard.more([f"x{i}" for i in range(10)], "t0")
    for i in range(1, 11):
        assert guard.more([f"y{i}"], f"t{i}")
    with pytest.raises(ProviderError, match=r"^api: more than 12 pages of 10"):
        guard.more(["y11"], "t11")


def test_a_server_capping_pages_below_our_size_is_no_error() -> None:
    guard = PageGuard("api", 500, bound=1000)  # the server sends 100 at most: 10 pages for 1,000 items
    assert all(guard.more([f"{p}-{i}" for i in range(100)], f"t{p}") for p in range(9))
    assert guard.more([f"9-{i}" for i in range(100)], None) is False


def test_an_id_on_two_pages_or_a_token_twice_is_refused() -> None:
    guard = PageGuard("api", 2)
    guard.more(["a", "b"], "t1")
    with pytest.raises(ProviderError, match=r"^api: item 'b' came on two pages \(page 2\)"):
        guard.more(["b", "c"], "t2")
    guard = PageGuard("api", 2)
    guard.more(["a", "b"], "t1")
    with pytest.raises(ProviderError, match=r"^api: the API returned page token 't1' twice"):
        guard.more(["c", "d"], "t1")


class _EndlessNodes:
    """An API server answering every Node LIST page with the same nodes and a fresh ``continue`` token."""

    def __init__(self) -> None:
        self.requests = 0
        self.server = "https://127.0.0.1:6443"

    def request_json(self, method: str, path: str, params: dict[str, str] | None = None) -> Any:
        self.requests += 1
        items = [{"metadata": {"name": f"gpu-{i}", "uid": f"uid-{i}"}} for i in range(2)]
        return {"items": items, "metadata": {"continue": f"c{self.requests}"}}


def test_a_node_list_repeating_its_nodes_is_refused_at_the_second_page() -> None:
    from topocast.k8s.labels import list_cluster_nodes

    kc = _EndlessNodes()
    with pytest.raises(ProviderError, match=r"^Kubernetes LIST /api/v1/nodes: item 'uid-0' came on two pages"):
        list_cluster_nodes(kc, page_size=2)  # type: ignore[arg-type]
    assert kc.requests == 2


class _EndlessInstances:
    """A Compute Engine ``instances.list`` answering every page with the same VM and a fresh page token
    (the real pager: ``pages`` yields ``InstanceList`` messages, ``items`` and ``next_page_token``)."""

    def __init__(self) -> None:
        self.pages = 0

    def list(self, request: Any, retry: Any = None) -> Any:
        from google.cloud import compute_v1

        outer = self

        class Pager:
            @property
            def pages(self) -> Any:
                while True:
                    outer.pages += 1
                    vm = compute_v1.Instance(id=1, name="gpu-1", status="RUNNING")
                    yield compute_v1.InstanceList(items=[vm], next_page_token=f"t{outer.pages}")

        return Pager()


@pytest.mark.slow  # importing google-cloud-compute takes ~3 s
def test_a_gce_listing_repeating_its_vms_is_refused_at_the_second_page() -> None:
    pytest.importorskip("google.cloud.compute_v1")
    from topocast.providers.gcp.api import ComputeCalls

    client = _EndlessInstances()
    with pytest.raises(ProviderError, match=r"^compute\.instances\.list on project p zone z: item '1' came on two"):
        ComputeCalls(client, "p").list_all(["z"], 500, "")
    assert client.pages == 2


def test_pages_of_a_few_items_count_as_full_ones() -> None:
    guard = PageGuard("api", 1000, bound=100_000)  # 7 new items a page: counted as pages of 100, the cap is 1,002
    for page in range(1001):
        assert guard.more([f"{page}-{i}" for i in range(7)], f"t{page}")
    with pytest.raises(ProviderError, match=r"^api: more than 1002 pages of 100 \(the bound of 100000 items\)"):
        guard.more(["last"], "t-last")
