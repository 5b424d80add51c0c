"""The adaptive client rate: up while the server keeps up, halved on a 429, held while answers are slow."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from k8s_fake_apiserver import FakeKubeApiServer
from test_k8s_publisher import add_cluster_nodes, artifacts, make_graph, make_publisher

from topocast.k8s.client import AdaptiveRate, ClientSettings, TokenBucket, make_limiter


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def busy_window(rate: AdaptiveRate, clock: Clock, seconds: float = 0.01, status: int = 200) -> None:
    """One interval in which the client used its whole rate, every answer taking ``seconds``."""
    n = max(1, int(rate.qps * rate.interval))
    start = clock.now
    for i in range(1, n + 1):
        clock.now = start + rate.interval * i / n + (1e-9 if i == n else 0.0)
        rate.observe(status, seconds)


def test_the_rate_doubles_while_the_server_keeps_up_and_halves_on_a_429() -> None:
    clock = Clock()
    rate = AdaptiveRate(50, 100, qps_max=2000, clock=clock, sleep=lambda s: None)
    seen = []
    for _ in range(4):
        busy_window(rate, clock)
        seen.append(round(rate.qps))
    assert seen == [100, 200, 400, 800]
    clock.now += 0.01
    for _ in range(32):  # the requests in flight come back throttled together: one cut
        rate.observe(429, 0.01, retry_after=1.0)
    # the server took at most 12 + 25 + 50 + 100 answers in the last second: the cut goes below that
    assert rate.qps <= min(800 / 2, 0.9 * 187) and rate.cuts == 1
    cut = rate.qps
    assert rate.acquire() >= 0.9, "nothing new is sent before the Retry-After"
    clock.now += 2.0
    busy_window(rate, clock)
    busy_window(rate, clock)
    assert cut < rate.qps <= cut * 1.1 + 1  # past the cut it only probes: +5 % of it per interval


def test_a_limit_that_stays_put_is_probed_ever_more_slowly() -> None:
    """After five cuts at the same limit the probe is 1 % of the mark per interval, not 5 %: fewer 429 bursts."""
    clock = Clock()
    rate = AdaptiveRate(50, 100, qps_max=2000, clock=clock, sleep=lambda s: None)
    for _ in range(5):
        busy_window(rate, clock)
        clock.now += 0.3
        rate.observe(429, 0.01)
        clock.now += 1.0
    assert rate.cuts == 5
    mark = rate.mark
    busy_window(rate, clock)
    busy_window(rate, clock)
    assert mark < rate.qps <= mark * 1.02 + 1e-6


def test_slow_answers_hold_the_rate_and_it_never_passes_qps_max_or_drops_below_its_floor() -> None:
    clock = Clock()
    rate = AdaptiveRate(50, 100, qps_max=120, clock=clock, sleep=lambda s: None)
    busy_window(rate, clock, 0.01)
    busy_window(rate, clock, 2.0)  # the server slows down: no growth
    held = rate.qps
    busy_window(rate, clock, 2.0)
    assert rate.qps == held == 100
    for _ in range(20):
        busy_window(rate, clock, 0.01)
    assert rate.qps == 120
    for _ in range(40):
        clock.now += 1.0
        rate.observe(429, 0.01)
    assert rate.qps == rate.floor == 5.0


def test_qps_0_or_adaptive_off_is_the_plain_bucket() -> None:
    assert type(make_limiter(ClientSettings(qps=0))) is TokenBucket
    assert type(make_limiter(ClientSettings(adaptive=False))) is TokenBucket
    assert isinstance(make_limiter(ClientSettings()), AdaptiveRate)


@pytest.fixture
def limited() -> Iterator[FakeKubeApiServer]:
    with FakeKubeApiServer(token="test-token", rate_limit=(40.0, 10)) as server:
        yield server


def test_against_a_rate_limited_apf_server_the_default_client_backs_off_and_patches_every_node(
    limited: FakeKubeApiServer,
) -> None:
    graph = make_graph(60)
    add_cluster_nodes(limited, graph)
    publisher = make_publisher(limited, client={"qps": 30, "retry_after_max": 0.2})

    report = publisher.run(artifacts(graph, ("k8s-labels",)))

    assert report.ok, report.summary()
    patched = sorted(str(r.name) for r in limited.calls("PATCH", resource="nodes") if r.status == 200)
    assert patched == sorted(n.name for n in graph.nodes)
    # a 429 halves the rate and spends the burst: a few probes find the server's limit (7-16 here);
    # a client without a limit gets one for most of its requests (see bench/k8s.py)
    assert limited.throttled <= len(graph.nodes) // 3, limited.throttled
