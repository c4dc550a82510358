"""A bounded fuzz of both generation endpoints against the real server: the engines must stand.

Per endpoint: the edge values of the fields that reach an engine (tests/fuzz_bodies.py), then
EXAMPLES_PER_PATH drawn requests, each servable body cut to a few tokens (a CPU makes about
13 a second per engine), IN_FLIGHT at a time. The answers keep the property of
tests/fast/api/test_fuzz.py; afterwards /health is 200 and neither engine, nor the gateway,
holds a request.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from hypothesis import Phase, example, given

from tests.engine.conftest import MAX_QUEUED, MAX_RUNNING
from tests.engine.prompts import CODE, MODEL
from tests.engine.server import ServerProcess
from tests.engine.wire import call, refused
from tests.fuzz_bodies import (
    ENGINE_FIELDS,
    PATHS,
    Attempt,
    Tally,
    attempts,
    check_answer,
    edge_attempts,
    fuzz_settings,
)

EXAMPLES_PER_PATH = 75
# Requests open at once: the tests' server runs two a route and queues two more
# (tests/engine/conftest.py), so none is refused for load.
IN_FLIGHT = MAX_RUNNING + MAX_QUEUED
# Far above any answer of a few tokens: a request still open then is hung.
TIMEOUT_SECONDS = 120


@pytest.mark.parametrize("path", PATHS)
def test_fuzzed_requests_leave_the_engines_standing(server: ServerProcess, path: str) -> None:
    # Drawn first, then sent IN_FLIGHT at a time: both engines work at once, as they do for
    # many clients. No shrinking: against real engines it takes minutes; the attempt is
    # reported as drawn, and tests/fast/api/test_fuzz.py shrinks whatever the fakes share.
    drawn: list[Attempt] = []

    @fuzz_settings(EXAMPLES_PER_PATH, phases=[Phase.explicit, Phase.generate])
    @given(attempt=attempts(path, cheap=True))
    def draw(attempt: Attempt) -> None:
        drawn.append(attempt)

    edges = edge_attempts(path, ENGINE_FIELDS, cheap=True)
    for attempt in edges:
        draw = example(attempt=attempt)(draw)
    draw()

    tally = Tally()
    started = time.monotonic()
    with (
        httpx.Client(base_url=server.base_url, timeout=TIMEOUT_SECONDS) as client,
        ThreadPoolExecutor(IN_FLIGHT) as pool,
    ):

        def send(attempt: Attempt) -> httpx.Response:
            return client.post(attempt.path, content=attempt.content, headers=attempt.headers)

        answered = list(zip(drawn, pool.map(send, drawn), strict=True))
    seconds = time.monotonic() - started
    for attempt, response in answered:
        tally.add(attempt, response.status_code)
        try:
            check_answer(
                attempt,
                response.status_code,
                response.headers.get("content-type", ""),
                response.content,
            )
        except AssertionError as failure:
            raise AssertionError(f"{attempt!r}\n{failure}") from failure
    print(tally.report(f"real engines, {path}", seconds))

    assert tally.total >= len(edges) + EXAMPLES_PER_PATH
    assert tally.statuses[200] > 0
    assert httpx.get(f"{server.base_url}/health", timeout=10).status_code == 200
    for route in ("speculative", "plain"):
        assert server.metric("specgate_engine_unfinished_requests", route=route) == 0
        assert server.metric("specgate_requests_in_flight", route=route) == 0


@pytest.mark.parametrize(
    "schema",
    [{"type": "array", "minItems": 10**6}, {"anyOf": [{"$ref": "#"}]}],
    ids=["huge minItems", "self-reference"],
)
def test_a_schema_the_engine_cannot_follow_is_400(server: ServerProcess, schema: object) -> None:
    # Each was a 500 until the fuzzer above found them: the first failed to compile in the
    # engine core (vLLM's "auto" backend), the second admits no output at all.
    body = {
        "model": MODEL,
        "messages": CODE,
        "max_tokens": 3,
        "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}},
    }
    assert "schema" in refused(server, "/v1/chat/completions", body)["message"]


def test_top_k_leaves_the_speculative_engine_standing(server: ServerProcess) -> None:
    # Code goes to the speculative engine, whose core sampling with top_k alone killed.
    body = {"model": MODEL, "messages": CODE, "max_tokens": 4, "top_k": 40}
    assert call(server, "/v1/chat/completions", body)["specgate"]["route"] == "plain"
    assert httpx.get(f"{server.base_url}/health", timeout=10).status_code == 200
