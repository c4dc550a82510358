"""Limits held in a real Redis by several limiters at once (what several gateway processes
hold), and what happens when Redis goes away: open serves without limits, closed refuses
with a 503, neither is a 500."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.errors import EngineUnavailableError, QuotaExceededError, RateLimitError
from app.tenants.keys import ApiKey, KeyLimits
from app.tenants.shared_limits import SharedRateLimiter
from tests.redis_server import RedisServer, running_redis

WINDOW = 2.0  # seconds: the minute, shortened for the test


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RedisServer]:
    with running_redis(tmp_path) as found:
        yield found


def key(name: str = "alpha", **limits: int) -> ApiKey:
    return ApiKey(name, "0" * 64, limits=KeyLimits(**limits))


def limiters(server: RedisServer, count: int = 2, **options: object) -> list[SharedRateLimiter]:
    return [
        SharedRateLimiter(server.url, window_seconds=WINDOW, **options)  # type: ignore[arg-type]
        for _ in range(count)
    ]


def test_two_processes_hold_one_request_rate_together(server: RedisServer) -> None:
    first, second = limiters(server)
    alpha = key(requests_per_minute=4)
    grants = [(first if i % 2 else second).take(alpha, 1) for i in range(4)]
    assert grants[-1].headers["x-ratelimit-remaining-requests"] == "0"
    assert grants[0].headers["x-ratelimit-limit-requests"] == "4"
    for limiter in (first, second):
        with pytest.raises(RateLimitError) as refused:
            limiter.take(alpha, 1)
        assert refused.value.error_type == "requests"
        assert 0 < float(refused.value.headers()["retry-after-ms"]) <= WINDOW * 1000
    for grant in grants:
        first.release(grant, 1)
    time.sleep(WINDOW + 0.1)
    second.take(alpha, 1)  # the window slid
    # Another key's limits are its own.
    first.take(key("beta", requests_per_minute=1), 1)


def test_tokens_in_flight_and_refunds_are_shared(server: RedisServer) -> None:
    first, second = limiters(server)
    alpha = key(tokens_per_minute=1000, max_in_flight=2)
    big = first.take(alpha, 700)
    with pytest.raises(RateLimitError) as refused:
        second.take(alpha, 400)
    assert refused.value.error_type == "tokens"
    first.release(big, 100)  # it used 100: 600 go back, for every process
    small = second.take(alpha, 400)
    assert small.headers["x-ratelimit-remaining-tokens"] == "500"
    other = first.take(alpha, 10)
    with pytest.raises(RateLimitError, match="in flight"):
        second.take(alpha, 10)
    first.refund(other)  # never ran: its place and tokens go back
    second.take(alpha, 10)


def test_budgets_are_shared_and_seeded_from_the_ledger(server: RedisServer) -> None:
    spent = {"alpha": 900}  # what this process's ledger says was used today and this month
    first, second = limiters(server, spent_before=lambda name, _period: spent.get(name, 0))
    alpha = key(tokens_per_day=1000)
    grant = first.take(alpha, 50)
    first.release(grant, 50)
    with pytest.raises(QuotaExceededError):
        second.take(alpha, 60)  # 900 + 50 + 60 > 1000, across processes
    second.take(alpha, 50)


def test_without_redis_open_serves_and_closed_refuses(server: RedisServer) -> None:
    (open_,) = limiters(server, count=1, unreachable="open")
    (closed,) = limiters(server, count=1, unreachable="closed")
    alpha = key(requests_per_minute=1)
    open_.release(open_.take(alpha, 1), 1)
    server.stop()
    for _ in range(3):  # over the limit, but nothing can count it: served, with no headers
        grant = open_.take(alpha, 1)
        assert grant.headers == {}
        open_.release(grant, 1)
    assert open_.headers(alpha) == {}
    with pytest.raises(EngineUnavailableError) as refused:
        closed.take(alpha, 1)
    assert refused.value.status_code == 503 and refused.value.code == "rate_limits_unavailable"
    assert refused.value.headers() == {"Retry-After": "1"}
