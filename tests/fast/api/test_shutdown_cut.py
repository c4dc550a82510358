"""Streams still open at the end of the shutdown grace end with an error event, not a cut.

sse-starlette learns of a shutdown from uvicorn (or `AppStatus.should_exit`, set here), lets
each stream go on for the grace, and would then cancel it mid-answer. specgate cuts the run
first and ends the stream as a failed engine does: an error event, then [DONE] on chat and
completions; an `error` event on /v1/responses.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from sse_starlette.sse import AppStatus

from app.settings import Settings
from tests.conftest import MODEL, ClientFactory
from tests.openai_schema import ERROR, violations

GRACE_SECONDS = 0.3
MESSAGES = [{"role": "user", "content": "count the sheep one by one"}]


async def _shut_down_after(seconds: float, monkeypatch: pytest.MonkeyPatch) -> None:
    await asyncio.sleep(seconds)
    monkeypatch.setattr(AppStatus, "should_exit", True)


def _data(body: str) -> list[str]:
    return [line[len("data: ") :] for line in body.splitlines() if line.startswith("data: ")]


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions"])
async def test_a_stream_open_at_the_end_of_the_grace_ends_with_an_error_and_done(
    make_client: ClientFactory, monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    settings = Settings(routing_exploration=0, shutdown_grace_seconds=GRACE_SECONDS)
    client, engines = await make_client(settings, seconds_per_token=0.02, max_model_len=4096)
    body: dict[str, object] = {"model": MODEL, "max_tokens": 3000, "stream": True}
    body.update({"messages": MESSAGES} if "chat" in path else {"prompt": "count the sheep"})
    shutdown = asyncio.create_task(_shut_down_after(0.2, monkeypatch))
    response = await client.post(path, json=body, headers={"X-Speculative": "off"})
    await shutdown
    events = _data(response.text)
    assert events[-1] == "[DONE]", events[-3:]
    error = json.loads(events[-2])
    assert error["error"]["code"] == "server_shutting_down", error
    assert violations(error, ERROR) == []
    # It streamed for a while first, and the engine's request was aborted, not left running.
    assert len(events) > 5
    assert not engines["plain"].active


async def test_a_responses_stream_open_at_the_end_of_the_grace_ends_with_an_error_event(
    make_client: ClientFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = Settings(routing_exploration=0, shutdown_grace_seconds=GRACE_SECONDS)
    client, engines = await make_client(settings, seconds_per_token=0.02, max_model_len=4096)
    body = {"model": MODEL, "input": "count the sheep", "max_output_tokens": 3000, "stream": True}
    shutdown = asyncio.create_task(_shut_down_after(0.2, monkeypatch))
    response = await client.post("/v1/responses", json=body, headers={"X-Speculative": "off"})
    await shutdown
    last = json.loads(_data(response.text)[-1])
    assert last["type"] == "error", last
    assert last["code"] == "server_shutting_down"
    assert not engines["plain"].active


async def test_a_stream_that_ends_within_the_grace_ends_normally(
    make_client: ClientFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = Settings(routing_exploration=0, shutdown_grace_seconds=2.0)
    client, _ = await make_client(settings, seconds_per_token=0.02, max_model_len=4096)
    body = {"model": MODEL, "messages": MESSAGES, "max_tokens": 40, "stream": True}
    shutdown = asyncio.create_task(_shut_down_after(0.2, monkeypatch))
    response = await client.post("/v1/chat/completions", json=body)
    await shutdown
    events = _data(response.text)
    assert events[-1] == "[DONE]"
    assert json.loads(events[-2])["choices"][0]["finish_reason"] == "length"
