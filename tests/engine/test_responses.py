"""/v1/responses on the embedded engines, through the real SDK and raw HTTP: every body and
event conforms to OpenAI's schema, function calls validate, stored responses chain."""

from __future__ import annotations

import json
from typing import Any

import httpx
from jsonschema import validate
from openai import AsyncOpenAI, OpenAI

from tests.engine.prompts import MODEL
from tests.engine.server import ServerProcess
from tests.engine.test_tool_calls import WEATHER_PARAMETERS
from tests.openai_schema import violations

WEATHER_TOOL: Any = {
    "type": "function",
    "name": "get_weather",
    "description": "Current weather in a city.",
    "parameters": WEATHER_PARAMETERS,
    "strict": True,
}


def test_a_response_streams_and_conforms(server: ServerProcess) -> None:
    body = {"model": MODEL, "input": "Write one sentence about the sea.", "max_output_tokens": 24,
            "temperature": 0}  # fmt: skip
    whole = httpx.post(f"{server.base_url}/v1/responses", json=body, timeout=300).json()
    assert violations(whole, "Response") == [], whole
    with httpx.stream(
        "POST", f"{server.base_url}/v1/responses", json={**body, "stream": True}, timeout=300
    ) as response:
        assert response.status_code == 200
        lines = [line for line in response.iter_lines() if line.startswith("data: ")]
    events = [json.loads(line.removeprefix("data: ")) for line in lines]
    for event in events:
        assert violations(event, "ResponseStreamEvent") == [], event
    deltas = [e["delta"] for e in events if e["type"] == "response.output_text.delta"]
    final = events[-1]["response"]
    assert events[-1]["type"] in ("response.completed", "response.incomplete")
    assert "".join(deltas) == final["output"][0]["content"][0]["text"]
    # Greedy: the streamed answer is the non-streamed one.
    assert final["output"][0]["content"][0]["text"] == whole["output"][0]["content"][0]["text"]


async def test_the_sdk_streams_retrieves_and_chains(async_client: AsyncOpenAI) -> None:
    async with async_client.responses.stream(
        model=MODEL, input="Name a colour.", max_output_tokens=16, temperature=0
    ) as stream:
        # The last event holds the final response: response.completed, or (as OpenAI sends
        # it when max_output_tokens cuts the answer) response.incomplete, which the SDK's
        # get_final_response() does not take.
        events = [event async for event in stream]
    final = events[-1].response  # type: ignore[union-attr]
    assert events[-1].type in ("response.completed", "response.incomplete")
    assert final.output_text
    fetched = await async_client.responses.retrieve(final.id)
    assert fetched.output_text == final.output_text
    follow = await async_client.responses.create(
        model=MODEL,
        input="Name another.",
        previous_response_id=final.id,
        max_output_tokens=16,
        temperature=0,
    )
    assert follow.previous_response_id == final.id and follow.output_text


def test_a_function_tool_and_its_output_turn(sync_client: OpenAI) -> None:
    called = sync_client.responses.create(
        model=MODEL,
        input="What is the weather in Paris, in celsius?",
        tools=[WEATHER_TOOL],
        tool_choice={"type": "function", "name": "get_weather"},
        max_output_tokens=64,
        temperature=0,
    )
    (call,) = called.output
    assert call.type == "function_call" and call.name == "get_weather"
    validate(json.loads(call.arguments), WEATHER_PARAMETERS)
    answer = sync_client.responses.create(
        model=MODEL,
        previous_response_id=called.id,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "18 C, sunny"}],
        tools=[WEATHER_TOOL],
        tool_choice="none",
        max_output_tokens=24,
        temperature=0,
    )
    assert answer.status in ("completed", "incomplete") and answer.output_text
