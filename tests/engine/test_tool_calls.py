"""Tool calls on the embedded model: constrained named and required calls always parse and
validate against their functions' parameters, through the real SDK and raw HTTP."""

from __future__ import annotations

import json
from typing import Any

import pytest
from jsonschema import validate
from openai import AsyncOpenAI, OpenAI

from tests.engine.prompts import MODEL
from tests.engine.server import ServerProcess
from tests.engine.wire import call, stream

CHAT = "/v1/chat/completions"
WEATHER_PARAMETERS = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 40},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
    },
    "required": ["city", "unit"],
    "additionalProperties": False,
}
TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather in a city.",
            "parameters": WEATHER_PARAMETERS,
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_time",
            "description": "Current time in a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string", "maxLength": 40}},
                "required": ["city"],
                "additionalProperties": False,
            },
        },
    },
]
PARAMETERS = {tool["function"]["name"]: tool["function"]["parameters"] for tool in TOOLS}
MESSAGES: list[Any] = [{"role": "user", "content": "What is the weather in Paris, in celsius?"}]
NAMED = {"type": "function", "function": {"name": "get_weather"}}


@pytest.mark.parametrize("route", ["on", "off"])
def test_a_named_call_parses_against_its_parameters(sync_client: OpenAI, route: str) -> None:
    completion = sync_client.chat.completions.create(
        model=MODEL,
        messages=MESSAGES,
        tools=TOOLS,
        tool_choice=NAMED,  # type: ignore[arg-type]
        max_tokens=64,
        temperature=0,
        extra_headers={"X-Speculative": route},
    )
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls", choice
    (tool_call,) = choice.message.tool_calls or []
    assert tool_call.function.name == "get_weather"  # type: ignore[union-attr]
    validate(json.loads(tool_call.function.arguments), WEATHER_PARAMETERS)  # type: ignore[union-attr]


async def test_required_calls_stream_through_the_sdk_helper(async_client: AsyncOpenAI) -> None:
    async with async_client.chat.completions.stream(
        model=MODEL,
        messages=MESSAGES,
        tools=TOOLS,
        tool_choice="required",
        parallel_tool_calls=False,
        max_tokens=96,
        temperature=0,
    ) as events:
        final = await events.get_final_completion()
    choice = final.choices[0]
    assert choice.finish_reason == "tool_calls", choice
    (tool_call,) = choice.message.tool_calls or []
    name = tool_call.function.name  # type: ignore[union-attr]
    validate(json.loads(tool_call.function.arguments), PARAMETERS[name])  # type: ignore[union-attr]


def test_tool_call_bodies_and_chunks_conform(server: ServerProcess) -> None:
    body = {"model": MODEL, "messages": MESSAGES, "tools": TOOLS, "max_tokens": 64,
            "temperature": 0, "tool_choice": NAMED}  # fmt: skip
    whole = call(server, CHAT, body)  # checked against OpenAI's schema
    arguments = whole["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"]
    chunks = stream(server, CHAT, body)  # each chunk checked too
    calls = [c for chunk in chunks if chunk["choices"]
             for c in chunk["choices"][0]["delta"].get("tool_calls", [])]  # fmt: skip
    streamed = "".join(c["function"]["arguments"] for c in calls)
    assert json.loads(streamed) == json.loads(arguments)
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
