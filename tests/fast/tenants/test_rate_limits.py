"""Per-key limits on a made-up clock: sliding minutes, reserved tokens given back, requests in
flight, day and month budgets, and OpenAI's headers."""

from __future__ import annotations

import pytest

from app.errors import QuotaExceededError, RateLimitError
from app.tenants.keys import ApiKey, KeyLimits
from app.tenants.rate_limits import RateLimiter, duration

DAY = 86400.0


class Clock:
    def __init__(self, at: float = 1000.0) -> None:
        self.at = at

    def __call__(self) -> float:
        return self.at


def limiter(clock: Clock, **kwargs: object) -> RateLimiter:
    return RateLimiter(clock=clock, wall=lambda: 1_797_500_000 + clock.at, **kwargs)  # type: ignore[arg-type]


def key(**limits: int) -> ApiKey:
    return ApiKey("alpha", "0" * 64, limits=KeyLimits(**limits))


def test_n_requests_a_minute_in_any_minute_and_retry_after_when_the_oldest_leaves() -> None:
    clock, alpha = Clock(), key(requests_per_minute=3)
    limits = limiter(clock)
    for second in (0, 10, 20):
        clock.at = 1000 + second
        grant = limits.take(alpha, 1)
        limits.release(grant, 1)
    assert grant.headers == {
        "x-ratelimit-limit-requests": "3",
        "x-ratelimit-remaining-requests": "0",
        "x-ratelimit-reset-requests": "1m0s",
    }
    clock.at = 1030
    with pytest.raises(RateLimitError) as refused:
        limits.take(alpha, 1)
    # The first request (at 0 s) leaves the window at 60 s: 30 s from now.
    assert refused.value.error_type == "requests" and refused.value.code == "rate_limit_exceeded"
    assert refused.value.headers() == {"Retry-After": "30", "retry-after-ms": "30000"}
    assert "Limit 3, Used 3, Requested 1" in refused.value.message
    clock.at = 1060.001
    limits.take(alpha, 1)  # the window slid past the first
    with pytest.raises(RateLimitError):
        limits.take(alpha, 1)


def test_tokens_are_reserved_at_admission_and_what_is_not_used_is_given_back() -> None:
    clock, alpha = Clock(), key(tokens_per_minute=1000)
    limits = limiter(clock)
    first = limits.take(alpha, 600)  # e.g. its prompt and max_tokens
    assert first.headers["x-ratelimit-remaining-tokens"] == "400"
    with pytest.raises(RateLimitError) as refused:
        limits.take(alpha, 500)
    assert refused.value.error_type == "tokens"
    limits.release(first, 150)  # it used 150: 450 go back
    second = limits.take(alpha, 500)
    assert second.headers["x-ratelimit-remaining-tokens"] == "350"
    with pytest.raises(RateLimitError) as never:
        limits.take(alpha, 1001)  # more than a minute's limit: no wait helps
    assert never.value.headers() == {"x-should-retry": "false"}


def test_requests_in_flight_and_a_refund_for_a_request_that_never_ran() -> None:
    clock, alpha = Clock(), key(max_in_flight=2, requests_per_minute=2)
    limits = limiter(clock)
    first, second = limits.take(alpha, 1), limits.take(alpha, 1)
    assert first.headers["x-ratelimit-remaining-requests"] == "1"
    with pytest.raises(RateLimitError, match="in flight"):
        limits.take(alpha, 1)
    limits.refund(second)  # refused by the engine's queue, say: it counts for nothing
    limits.release(first, 1)
    limits.take(alpha, 1)  # the refund gave back its place in the minute too
    with pytest.raises(RateLimitError, match="RPM"):
        limits.take(alpha, 1)


def test_budgets_count_what_was_spent_before_and_refuse_as_insufficient_quota() -> None:
    clock = Clock()
    alpha = key(tokens_per_day=1000, tokens_per_month=5000)
    spent = {("alpha", "2026-12-17"): 700}  # the ledger's count for today (this made-up day)
    limits = limiter(clock, spent_before=lambda name, period: spent.get((name, period), 0))
    day = limits.take(alpha, 100)
    with pytest.raises(QuotaExceededError) as refused:
        limits.take(alpha, 250)  # 700 spent + 100 reserved + 250 > 1000
    assert refused.value.code == "insufficient_quota" and "day" in refused.value.message
    assert refused.value.headers() == {"x-should-retry": "false"}
    limits.release(day, 40)  # a stream may cross the budget; it is only counted after
    later = limits.take(alpha, 250)
    limits.release(later, 250)
    with pytest.raises(QuotaExceededError):
        limits.take(alpha, 20)  # 700 + 40 + 250 spent
    clock.at += DAY  # the next day starts at nothing; the month goes on
    limits.release(limits.take(alpha, 900), 900)
    clock.at += DAY
    limits.release(limits.take(alpha, 900), 900)
    # 40 + 250 + 900 + 900 spent this month (the ledger had nothing for it)
    with pytest.raises(QuotaExceededError, match="month"):
        limits.take(key(tokens_per_month=5000), 5000 - 2090 + 1)


def test_keys_without_limits_get_no_headers_and_no_refusal() -> None:
    limits = limiter(Clock())
    free = key()
    grants = [limits.take(free, 10_000) for _ in range(1000)]
    assert grants[-1].headers == {}


@pytest.mark.parametrize(
    ("seconds", "written"), [(0.12, "120ms"), (7.5, "7.5s"), (59.96, "60s"), (360, "6m0s")]
)
def test_reset_times_are_written_as_openai_writes_them(seconds: float, written: str) -> None:
    assert duration(seconds) == written
