"""Property-based fuzzing of both generation endpoints over the fake engines, in process.

Per endpoint: every value of tests/fuzz_bodies.FIELD_EDGES on a valid body (explicit
examples), then EXAMPLES_PER_PATH drawn requests. One app serves them all, as a long-running
server would; afterwards its engines must be idle and healthy. Deterministic (derandomized),
with no example database.
"""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest
from hypothesis import example, given

from tests.conftest import ClientFactory
from tests.fuzz_bodies import (
    PATHS,
    Attempt,
    Tally,
    attempts,
    check_answer,
    edge_attempts,
    fuzz_settings,
)
from tests.metrics_text import sample

EXAMPLES_PER_PATH = 1000
# A request that has not answered by then is hung; the fake needs milliseconds.
HANG_SECONDS = 60


@pytest.mark.parametrize("path", PATHS)
async def test_fuzzed_requests_never_get_a_server_error(
    make_client: ClientFactory, path: str
) -> None:
    client, engines = await make_client()
    loop = asyncio.get_running_loop()
    tally = Tally()

    async def send(attempt: Attempt) -> httpx.Response:
        return await client.post(attempt.path, content=attempt.content, headers=attempt.headers)

    # Hypothesis runs its examples synchronously, so it runs in a worker thread and hands
    # each request to this test's event loop, where the app and its engines live.
    @fuzz_settings(EXAMPLES_PER_PATH)
    @given(attempt=attempts(path))
    def fuzz(attempt: Attempt) -> None:
        future = asyncio.run_coroutine_threadsafe(send(attempt), loop)
        try:
            response = future.result(HANG_SECONDS)
        except TimeoutError:
            future.cancel()
            raise AssertionError(f"no answer in {HANG_SECONDS} s") from None
        tally.add(attempt, response.status_code)
        check_answer(
            attempt,
            response.status_code,
            response.headers.get("content-type", ""),
            response.content,
        )

    edges = edge_attempts(path)
    for attempt in edges:
        fuzz = example(attempt=attempt)(fuzz)
    started = time.monotonic()
    await asyncio.to_thread(fuzz)
    print(tally.report(f"fake engines, {path}", time.monotonic() - started))

    # Hypothesis may stop early once it has seen all it can generate; it should not here.
    assert tally.total >= len(edges) + EXAMPLES_PER_PATH
    assert tally.statuses[200] > 0 and sum(tally.statuses.values()) > tally.statuses[200]
    # Every request, served or refused, has left the engines and the gateway's books.
    assert all(engine.unfinished_requests() == 0 for engine in engines.values())
    metrics = (await client.get("/metrics")).text
    for route in engines:
        assert sample(metrics, "specgate_requests_in_flight", route=route) == 0
    assert (await client.get("/health")).status_code == 200
