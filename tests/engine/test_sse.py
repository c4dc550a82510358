"""SSE framing and client disconnects, over a real socket with raw httpx."""

from __future__ import annotations

import json
import time

import httpx
import pytest

from tests.engine.prompts import CODE, MODEL
from tests.engine.server import ServerProcess


def test_raw_sse_framing(server: ServerProcess) -> None:
    body = {"model": MODEL, "messages": CODE, "max_tokens": 8, "temperature": 0, "stream": True}
    with httpx.stream(
        "POST", f"{server.base_url}/v1/chat/completions", json=body, timeout=120
    ) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["x-specgate-route"] in ("speculative", "plain")
        raw = response.read().decode()
    events = [e for e in raw.split("\n\n") if e and not e.startswith(":")]
    assert raw.endswith("data: [DONE]\n\n")
    assert all(e.startswith("data: ") and "\n" not in e for e in events)
    chunks = [json.loads(e.removeprefix("data: ")) for e in events[:-1]]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert chunks[-1]["specgate"]["route"] == response.headers["x-specgate-route"]


def aborted_plain_requests(server: ServerProcess, endpoint: str) -> float:
    labels = {"route": "plain", "workload_class": "open-ended", "outcome": "aborted"}
    return server.metric("specgate_requests_total", endpoint=endpoint, **labels)


def wait_for_abort(server: ServerProcess, endpoint: str, aborted_before: float) -> None:
    """The plain engine drops the request, and specgate counts it as aborted, within 15 s."""
    deadline = time.monotonic() + 15
    while (
        server.metric("specgate_engine_unfinished_requests", route="plain") != 0
        or aborted_plain_requests(server, endpoint) != aborted_before + 1
    ):
        assert time.monotonic() < deadline, "the engine kept generating for a departed client"
        time.sleep(0.2)


def test_a_client_disconnect_aborts_the_request_in_the_engine(server: ServerProcess) -> None:
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "Write a very long story about a ship."}],
        "max_tokens": 1500,
        # A sampled story may end within its first tokens, and the count below then reads 0
        # (it read 0 once, at 2bd07ef): the request must outlast the client whatever it draws.
        "ignore_eos": True,
        "stream": True,
    }
    aborted_before = aborted_plain_requests(server, "chat")
    with httpx.stream(
        "POST",
        f"{server.base_url}/v1/chat/completions",
        json=body,
        headers={"X-Speculative": "off"},
    ) as response:
        # Keep the iterator referenced: dropping it would close the connection right here.
        lines = response.iter_lines()
        received = [next(lines) for _ in range(6)]
        assert any(line.startswith("data: {") for line in received)
        assert server.metric("specgate_engine_unfinished_requests", route="plain") == 1
    # The connection is closed: the engine must drop the request long before 1500 tokens.
    wait_for_abort(server, "chat", aborted_before)


def test_a_client_giving_up_on_a_non_streamed_request_aborts_it(server: ServerProcess) -> None:
    aborted_before = aborted_plain_requests(server, "completions")
    # Counting at temperature 0 goes on well past the client's patience.
    body = {"model": MODEL, "prompt": "1, 2, 3, 4, 5, 6,", "max_tokens": 1500, "temperature": 0}
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(
            f"{server.base_url}/v1/completions",
            json=body,
            headers={"X-Speculative": "off"},
            timeout=httpx.Timeout(10, read=2),
        )
    wait_for_abort(server, "completions", aborted_before)
