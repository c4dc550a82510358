"""Per-key limits, as OpenAI states them: requests and tokens per minute, requests in flight,
and token budgets per day and per month.

Minutes are sliding: a key limited to N requests a minute has at most N begun in any 60 s,
and `Retry-After` is when the oldest of them leaves the window. A request reserves its tokens
(an estimate of its prompt and its `max_tokens`, or a bound) when it is admitted and gives
back what it did not use when it ends. Budgets count tokens used in the UTC day and month,
from the usage ledger when there is one; a stream that crosses its budget mid-way is not cut
(the budget only refuses requests that start after it is spent).
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Protocol

from app.errors import QuotaExceededError, RateLimitError
from app.tenants.keys import ApiKey

WINDOW_SECONDS = 60.0


class Taken:
    """One amount in a window; `live` until it leaves the window."""

    __slots__ = ("amount", "at", "live")

    def __init__(self, at: float, amount: float) -> None:
        self.at, self.amount, self.live = at, amount, True


class SlidingWindow:
    """Amounts taken in the last `seconds`; an amount taken may be settled to another later."""

    def __init__(self, seconds: float = WINDOW_SECONDS) -> None:
        self.seconds = seconds
        self._entries: deque[Taken] = deque()  # oldest first
        self._total = 0.0

    def used(self, now: float) -> float:
        while self._entries and self._entries[0].at <= now - self.seconds:
            gone = self._entries.popleft()
            gone.live = False
            self._total -= gone.amount
        return max(self._total, 0.0)

    def wait(self, now: float, amount: float, limit: float) -> float:
        """Seconds until `amount` more fits under `limit` (0: now; inf: never)."""
        if amount > limit:
            return math.inf
        over = self.used(now) + amount - limit
        if over <= 0:
            return 0.0
        for taken in self._entries:  # the oldest leave first
            over -= taken.amount
            if over <= 0:
                return taken.at + self.seconds - now
        return math.inf  # only settled-down amounts could get here; never in practice

    def take(self, now: float, amount: float) -> Taken:
        taken = Taken(now, amount)
        self._entries.append(taken)
        self._total += amount
        return taken

    def settle(self, taken: Taken, amount: float) -> None:
        """Change what was taken (a reservation's real use); one already gone changes nothing."""
        if taken.live:
            self._total += amount - taken.amount
        taken.amount = amount

    def reset_in(self, now: float) -> float:
        """Seconds until nothing taken now is in the window."""
        self.used(now)
        return self._entries[-1].at + self.seconds - now if self._entries else 0.0


@dataclass
class PeriodCount:
    """Tokens used in one UTC period (a day, a month), restarting when the period changes."""

    period: str = ""
    used: int = 0

    def at(self, period: str) -> PeriodCount:
        if period != self.period:
            self.period, self.used = period, 0
        return self


@dataclass
class KeyState:
    requests: SlidingWindow
    tokens: SlidingWindow
    in_flight: int = 0
    day: PeriodCount = field(default_factory=PeriodCount)
    month: PeriodCount = field(default_factory=PeriodCount)
    # Tokens reserved by requests running now, not yet in day/month.
    reserved: int = 0


def duration(seconds: float) -> str:
    """OpenAI's way of writing a reset time: 120ms, 7.5s, 6m0s."""
    if seconds < 1:
        return f"{max(0, round(seconds * 1000))}ms"
    if seconds < 60:
        return f"{seconds:.3g}s"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes}m{rest}s"


# -- what both limiters answer (this module's RateLimiter and shared_limits.py's) -----------


def over_budget(
    key: ApiKey, period: str, budget: int, used: int, reserved: int, tokens: int
) -> QuotaExceededError:
    return QuotaExceededError(
        f"You exceeded your token budget for this {period} (key {key.name}: limit {budget}, "
        f"used {used}, reserved by requests running {reserved}, requested {tokens})."
    )


def over_in_flight(key: ApiKey) -> RateLimitError:
    return RateLimitError(
        f"Rate limit reached for requests in flight (key {key.name}): limit "
        f"{key.limits.max_in_flight}. Retry when one of them ends.",
        retry_after=1,
        kind="requests",
    )


def over_rate(
    key: ApiKey, kind: str, used: float, amount: int, wait: float | None
) -> RateLimitError:
    """Over the requests (`kind` "requests") or tokens per minute; `wait` None: never fits."""
    limits = key.limits
    limit = limits.requests_per_minute if kind == "requests" else limits.tokens_per_minute
    what = "requests per min (RPM)" if kind == "requests" else "tokens per min (TPM)"
    again = "" if wait is None else f" Please try again in {duration(wait)}."
    return RateLimitError(
        f"Rate limit reached for {what} (key {key.name}): Limit {limit}, Used {round(used)}, "
        f"Requested {amount}.{again}",
        retry_after=wait,
        kind=kind,
    )


def rate_headers(
    key: ApiKey, requests: tuple[float, float], tokens: tuple[float, float]
) -> dict[str, str]:
    """OpenAI's x-ratelimit-* headers, from each window's (amount used, seconds until reset)."""
    headers: dict[str, str] = {}
    for limit, (used, reset), what in (
        (key.limits.requests_per_minute, requests, "requests"),
        (key.limits.tokens_per_minute, tokens, "tokens"),
    ):
        if limit is None:
            continue
        headers[f"x-ratelimit-limit-{what}"] = str(limit)
        headers[f"x-ratelimit-remaining-{what}"] = str(max(0, limit - round(used)))
        headers[f"x-ratelimit-reset-{what}"] = duration(reset)
    return headers


class Grant:
    """A request's place under its key's limits, given back when it ends; `headers` are the
    rate-limit headers its response carries."""

    headers: dict[str, str]


class Limiter(Protocol):
    """Every key's limits: this process's (RateLimiter) or a deployment's (app/tenants/
    shared_limits.py, in Redis)."""

    def take(self, key: ApiKey, tokens: int) -> Grant: ...

    def release(self, grant: Grant, used_tokens: int) -> None: ...

    def refund(self, grant: Grant) -> None: ...

    def headers(self, key: ApiKey) -> dict[str, str]: ...


@dataclass
class LocalGrant(Grant):
    state: KeyState
    reserved: int
    request_entry: Taken | None
    token_entry: Taken | None
    headers: dict[str, str]
    released: bool = False

    def release(self, used_tokens: int, day: str, month: str) -> None:
        if self.released:
            return
        self.released = True
        self.state.in_flight -= 1
        self.state.reserved -= self.reserved
        if self.token_entry is not None:
            self.state.tokens.settle(self.token_entry, used_tokens)
        self.state.day.at(day).used += used_tokens
        self.state.month.at(month).used += used_tokens


# The tokens a key used in a UTC period before this process started: (key name, period) ->
# tokens, from the usage ledger.
SpentBefore = Callable[[str, str], int]


def periods(wall: float) -> tuple[str, str]:
    moment = datetime.fromtimestamp(wall, UTC)
    return moment.strftime("%Y-%m-%d"), moment.strftime("%Y-%m")


class RateLimiter:
    """Every key's limits, in this process."""

    def __init__(
        self,
        spent_before: SpentBefore | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        window_seconds: float = WINDOW_SECONDS,  # shorter only in tests
    ) -> None:
        self._states: dict[str, KeyState] = {}
        self._window = window_seconds
        self._spent_before = spent_before
        self._clock = clock
        self._wall = wall

    def _state(self, name: str, day: str, month: str) -> KeyState:
        state = self._states.get(name)
        if state is None:
            windows = SlidingWindow(self._window), SlidingWindow(self._window)
            state = self._states[name] = KeyState(*windows)
        for count, period in ((state.day, day), (state.month, month)):
            if count.period != period:
                count.at(period).used = self._spent(name, period)
        return state

    def _spent(self, name: str, period: str) -> int:
        return self._spent_before(name, period) if self._spent_before else 0

    def take(self, key: ApiKey, tokens: int) -> Grant:
        """The request's grant, with the rate-limit headers for its response; raises
        RateLimitError or QuotaExceededError when a limit refuses it."""
        now, (day, month) = self._clock(), periods(self._wall())
        state, limits = self._state(key.name, day, month), key.limits
        for budget, count, period in (
            (limits.tokens_per_day, state.day, "day"),
            (limits.tokens_per_month, state.month, "month"),
        ):
            if budget is not None and count.used + state.reserved + tokens > budget:
                raise over_budget(key, period, budget, count.used, state.reserved, tokens)
        if limits.max_in_flight is not None and state.in_flight >= limits.max_in_flight:
            raise over_in_flight(key)
        for limit, window, amount, kind in (
            (limits.requests_per_minute, state.requests, 1, "requests"),
            (limits.tokens_per_minute, state.tokens, tokens, "tokens"),
        ):
            if limit is None:
                continue
            wait = window.wait(now, amount, limit)
            if wait > 0:
                never = math.isinf(wait)
                raise over_rate(key, kind, window.used(now), amount, None if never else wait)
        state.in_flight += 1
        state.reserved += tokens
        asked = state.requests.take(now, 1) if limits.requests_per_minute is not None else None
        entry = state.tokens.take(now, tokens) if limits.tokens_per_minute is not None else None
        return LocalGrant(state, tokens, asked, entry, self._headers(key, state, now))

    def release(self, grant: Grant, used_tokens: int) -> None:
        assert isinstance(grant, LocalGrant)
        grant.release(used_tokens, *periods(self._wall()))

    def refund(self, grant: Grant) -> None:
        """A request that never ran: it counts against nothing, not even the request rate."""
        assert isinstance(grant, LocalGrant)
        if grant.request_entry is not None:
            grant.state.requests.settle(grant.request_entry, 0)
        self.release(grant, 0)

    def headers(self, key: ApiKey) -> dict[str, str]:
        """The key's rate-limit headers now."""
        now, (day, month) = self._clock(), periods(self._wall())
        return self._headers(key, self._state(key.name, day, month), now)

    @staticmethod
    def _headers(key: ApiKey, state: KeyState, now: float) -> dict[str, str]:
        return rate_headers(
            key,
            (state.requests.used(now), state.requests.reset_in(now)),
            (state.tokens.used(now), state.tokens.reset_in(now)),
        )
