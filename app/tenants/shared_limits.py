"""The keys' limits held in Redis, so that several gateway processes (Ray Serve ingress
replicas, containers behind one balancer) hold them for the deployment together.

The same limits as app/tenants/rate_limits.py, each check-and-take one Lua script (atomic in
Redis, timed by Redis's own clock, so the processes need not agree on the time). Minutes slide
by whole seconds: a request counts in the second Redis's clock took it, and leaves the window
60 s later (a limit holds within one second's slack). Requests in flight are held with a
deadline (`IN_FLIGHT_TTL`), so a process that dies holding some frees them in time. Budgets
count in Redis per UTC period, seeded from the process's usage ledger when Redis has no
count yet.

When Redis cannot be reached, `unreachable` says what happens: `open` serves the request
without limits (and logs it, once a minute at most), `closed` refuses it with a 503
(`rate_limits_unavailable`, Retry-After). Neither is a 500.
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass
from typing import Literal

import redis

from app.errors import EngineUnavailableError
from app.tenants.keys import ApiKey
from app.tenants.rate_limits import (
    WINDOW_SECONDS,
    Grant,
    SpentBefore,
    over_budget,
    over_in_flight,
    over_rate,
    periods,
    rate_headers,
)

logger = logging.getLogger("specgate.limits")

Unreachable = Literal["open", "closed"]
PREFIX = "specgate:limits:"
# The longest a request may hold an in-flight place in Redis before it is taken back.
IN_FLIGHT_TTL = 3600
PERIOD_TTL = 40 * 86400  # a month's count outlives the month
NONE = -1  # "no limit", in the scripts' arguments

TAKE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local window, tokens = tonumber(ARGV[1]), tonumber(ARGV[2])
local rpm, tpm, flight = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local day_budget, month_budget = tonumber(ARGV[6]), tonumber(ARGV[7])
local second = math.floor(now)
redis.call('SET', KEYS[5], ARGV[10], 'NX', 'EX', ARGV[12])
redis.call('SET', KEYS[6], ARGV[11], 'NX', 'EX', ARGV[12])

local function state(key)
  local all, total, entries = redis.call('HGETALL', key), 0, {}
  for i = 1, #all, 2 do
    local at, amount = tonumber(all[i]), tonumber(all[i + 1])
    if at <= now - window then
      redis.call('HDEL', key, all[i])
    else
      total = total + amount
      table.insert(entries, {at, amount})
    end
  end
  table.sort(entries, function(a, b) return a[1] < b[1] end)
  return total, entries
end

local function wait(total, entries, amount, limit)
  if amount > limit then return -1 end
  local over = total + amount - limit
  if over <= 0 then return 0 end
  for _, entry in ipairs(entries) do
    over = over - entry[2]
    if over <= 0 then return entry[1] + window - now end
  end
  return -1
end

for _, grant in ipairs(redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now)) do
  redis.call('HDEL', KEYS[4], grant)
end
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
local reserved = 0
for _, amount in ipairs(redis.call('HVALS', KEYS[4])) do reserved = reserved + tonumber(amount) end
local day_used = tonumber(redis.call('GET', KEYS[5]))
local month_used = tonumber(redis.call('GET', KEYS[6]))
if day_budget >= 0 and day_used + reserved + tokens > day_budget then
  return {'day', 0, day_used, reserved, 0, 0, 0, 0}
end
if month_budget >= 0 and month_used + reserved + tokens > month_budget then
  return {'month', 0, month_used, reserved, 0, 0, 0, 0}
end
if flight >= 0 and redis.call('ZCARD', KEYS[3]) >= flight then
  return {'flight', 0, 0, 0, 0, 0, 0, 0}
end
local requests, request_entries = state(KEYS[1])
local used_tokens, token_entries = state(KEYS[2])
if rpm >= 0 then
  local w = wait(requests, request_entries, 1, rpm)
  if w ~= 0 then return {'requests', math.ceil(w * 1000), requests, 0, 0, 0, 0, 0} end
end
if tpm >= 0 then
  local w = wait(used_tokens, token_entries, tokens, tpm)
  if w ~= 0 then return {'tokens', math.ceil(w * 1000), used_tokens, 0, 0, 0, 0, 0} end
end
redis.call('HINCRBY', KEYS[1], second, 1)
redis.call('HINCRBY', KEYS[2], second, tokens)
redis.call('EXPIRE', KEYS[1], window * 2)
redis.call('EXPIRE', KEYS[2], window * 2)
redis.call('ZADD', KEYS[3], now + tonumber(ARGV[9]), ARGV[8])
redis.call('HSET', KEYS[4], ARGV[8], tokens)
return {'ok', 0, 0, 0, requests + 1, used_tokens + tokens, math.ceil(window * 1000),
        second}
"""

RELEASE = """
if redis.call('ZREM', KEYS[3], ARGV[1]) == 0 then return 0 end
redis.call('HDEL', KEYS[4], ARGV[1])
local second, reserved, used = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
if redis.call('HEXISTS', KEYS[2], second) == 1 then
  redis.call('HINCRBY', KEYS[2], second, used - reserved)
end
if ARGV[5] == '1' then
  if redis.call('HEXISTS', KEYS[1], second) == 1 then redis.call('HINCRBY', KEYS[1], second, -1) end
else
  redis.call('INCRBY', KEYS[5], used)
  redis.call('INCRBY', KEYS[6], used)
end
return 1
"""

STATE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local window, found = tonumber(ARGV[1]), {}
for i = 1, 2 do
  local all, total, newest = redis.call('HGETALL', KEYS[i]), 0, nil
  for j = 1, #all, 2 do
    local at = tonumber(all[j])
    if at > now - window then
      total = total + tonumber(all[j + 1])
      if not newest or at > newest then newest = at end
    end
  end
  table.insert(found, total)
  table.insert(found, newest and math.ceil((newest + window - now) * 1000) or 0)
end
return found
"""


@dataclass
class SharedGrant(Grant):
    keys: list[str]
    grant_id: str
    second: int
    reserved: int
    headers: dict[str, str]
    # Taken while Redis was unreachable and limits were left open: nothing to give back.
    unlimited: bool = False


class SharedRateLimiter:
    def __init__(
        self,
        url: str,
        unreachable: Unreachable = "open",
        spent_before: SpentBefore | None = None,
        window_seconds: float = WINDOW_SECONDS,  # shorter only in tests
        timeout_seconds: float = 0.5,
    ) -> None:
        self.client = redis.Redis.from_url(
            url, socket_timeout=timeout_seconds, socket_connect_timeout=timeout_seconds
        )
        self.unreachable = unreachable
        self._spent_before = spent_before
        # The ledger's count per (key name, period), read once: Redis keeps the count after.
        self._seeds: dict[tuple[str, str], int] = {}
        self._window = window_seconds
        self._take = self.client.register_script(TAKE)
        self._release = self.client.register_script(RELEASE)
        self._state = self.client.register_script(STATE)
        self._warned = 0.0

    def _keys(self, name: str, day: str, month: str) -> list[str]:
        base = f"{PREFIX}{name}:"
        return [f"{base}{part}" for part in ("requests", "tokens", "flight", "reserved")] + [
            f"{base}used:{day}",
            f"{base}used:{month}",
        ]

    def take(self, key: ApiKey, tokens: int) -> Grant:
        day, month = periods(time.time())
        keys = self._keys(key.name, day, month)
        limits = key.limits
        grant_id = uuid.uuid4().hex
        try:
            found = self._take(
                keys=keys,
                args=[
                    self._window,
                    tokens,
                    *(
                        NONE if limit is None else limit
                        for limit in (
                            limits.requests_per_minute,
                            limits.tokens_per_minute,
                            limits.max_in_flight,
                            limits.tokens_per_day,
                            limits.tokens_per_month,
                        )
                    ),
                    grant_id,
                    IN_FLIGHT_TTL,
                    self._seed(key.name, day) if limits.tokens_per_day is not None else 0,
                    self._seed(key.name, month) if limits.tokens_per_month is not None else 0,
                    PERIOD_TTL,
                ],
            )
        except redis.RedisError as exc:
            return self._without_redis(exc)
        outcome = found[0].decode() if isinstance(found[0], bytes) else str(found[0])
        wait_ms, used, reserved = int(found[1]), int(found[2]), int(found[3])
        if outcome in ("day", "month"):
            budget = limits.tokens_per_day if outcome == "day" else limits.tokens_per_month
            assert budget is not None
            raise over_budget(key, outcome, budget, used, reserved, tokens)
        if outcome == "flight":
            raise over_in_flight(key)
        if outcome in ("requests", "tokens"):
            amount = 1 if outcome == "requests" else tokens
            raise over_rate(key, outcome, used, amount, None if wait_ms < 0 else wait_ms / 1000)
        requests_now, tokens_now, reset_ms, second = (int(v) for v in found[4:8])
        reset = reset_ms / 1000
        headers = rate_headers(key, (requests_now, reset), (tokens_now, reset))
        return SharedGrant(keys, grant_id, second, tokens, headers)

    def _seed(self, name: str, period: str) -> int:
        """What this process's ledger says the key used in the period, for a Redis without a
        count yet."""
        if self._spent_before is None:
            return 0
        if (name, period) not in self._seeds:
            self._seeds[(name, period)] = self._spent_before(name, period)
        return self._seeds[(name, period)]

    def release(self, grant: Grant, used_tokens: int) -> None:
        self._give_back(grant, used_tokens, refund=False)

    def refund(self, grant: Grant) -> None:
        self._give_back(grant, 0, refund=True)

    def _give_back(self, grant: Grant, used_tokens: int, refund: bool) -> None:
        assert isinstance(grant, SharedGrant)
        if grant.unlimited:
            return
        try:
            self._release(
                keys=grant.keys,
                args=[grant.grant_id, grant.second, grant.reserved, used_tokens, int(refund)],
            )
        except redis.RedisError as exc:
            # Its in-flight place is taken back at its deadline; its tokens stay reserved in
            # the minute it was taken, and uncounted in the budgets.
            self._warn(f"a request's limits could not be given back in Redis: {exc}")

    def headers(self, key: ApiKey) -> dict[str, str]:
        keys = self._keys(key.name, *periods(time.time()))[:2]
        try:
            requests_now, reset_r, tokens_now, reset_t = (
                int(v) for v in self._state(keys=keys, args=[self._window])
            )
        except redis.RedisError:
            return {}
        return rate_headers(key, (requests_now, reset_r / 1000), (tokens_now, reset_t / 1000))

    def _without_redis(self, exc: Exception) -> Grant:
        if self.unreachable == "closed":
            raise EngineUnavailableError(
                "The rate limits cannot be checked (their Redis is unreachable). Retry after 1 s.",
                code="rate_limits_unavailable",
                retry_after=1,
            )
        self._warn(f"Redis is unreachable, requests are served without limits: {exc}")
        return SharedGrant([], "", 0, 0, {}, unlimited=True)

    def _warn(self, message: str) -> None:
        now = time.monotonic()
        if now - self._warned >= 60 or not self._warned:
            self._warned = now
            logger.warning("%s", message)
