"""Two gateway processes over one real Redis hold one key's limit together; with Redis
stopped, the process set to `open` serves and the one set to `closed` answers 503 (issue 43).

Each gateway is specgate's whole HTTP layer over fake engines (bench/fake_engine_server.py),
in a process of its own, configured through its environment as a deployment would be.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from bench.servers import ServerProcess, module_spec
from tests.conftest import MODEL
from tests.redis_server import RedisServer, running_redis

KEYS = '[[key]]\nname = "alpha"\nkey = "sk-alpha"\nrequests_per_minute = 6\n'
LIMIT = 6


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    with running_redis(tmp_path) as found:
        yield found


def gateway(tmp_path: Path, name: str, redis_url: str, unreachable: str) -> ServerProcess:
    (tmp_path / "keys.toml").write_text(KEYS)
    env = {
        "SPECGATE_API_KEY_FILE": str(tmp_path / "keys.toml"),
        "SPECGATE_LIMITS_REDIS": redis_url,
        "SPECGATE_LIMITS_REDIS_UNREACHABLE": unreachable,
        "SPECGATE_USAGE_LEDGER_PATH": str(tmp_path / f"{name}.sqlite3"),
    }
    spec = module_spec("bench.fake_engine_server", [], name=name, env=env)
    server = ServerProcess(spec, tmp_path / f"{name}.log")
    server.wait_ready(60)
    return server


def ask(server: ServerProcess) -> httpx.Response:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    return httpx.post(
        f"{server.base_url}/v1/chat/completions",
        json=body,
        headers={"Authorization": "Bearer sk-alpha"},
        timeout=30,
    )


def test_two_gateways_hold_one_limit_and_say_what_happens_without_redis(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    open_ = gateway(tmp_path, "gateway-open", redis_server.url, "open")
    closed = gateway(tmp_path, "gateway-closed", redis_server.url, "closed")
    try:
        answers = [ask(open_ if i % 2 else closed) for i in range(2 * LIMIT)]
        statuses = [a.status_code for a in answers]
        assert statuses.count(200) == LIMIT and statuses.count(429) == LIMIT, statuses
        assert statuses[:LIMIT] == [200] * LIMIT  # the first six, whichever process took them
        refused = answers[-1]
        assert refused.json()["error"]["code"] == "rate_limit_exceeded"
        assert 0 < int(refused.headers["retry-after"]) <= 60
        assert refused.headers["x-ratelimit-remaining-requests"] == "0"

        redis_server.stop()
        served = ask(open_)  # open: served without limits, and without their headers
        assert served.status_code == 200 and "x-ratelimit-limit-requests" not in served.headers
        unavailable = ask(closed)  # closed: refused, never a 500
        assert unavailable.status_code == 503
        assert unavailable.json()["error"]["code"] == "rate_limits_unavailable"
        assert unavailable.headers["retry-after"] == "1"
    finally:
        open_.stop()
        closed.stop()
