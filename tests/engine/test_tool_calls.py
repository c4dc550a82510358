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


# tool_choice left at its default ("auto"): the embedded model's template shows no call format,
# so specgate's envelope serves it. Greedy, so the model's choice is reproducible. With parallel
# calls allowed (OpenAI's default) the 135M model lists a few, repeats included: room for them.
QUESTION: list[Any] = [{"role": "user", "content": "What is the weather in Paris?"}]
SUNNY = "Sunny, 21 celsius"


def _check_calls(message: Any) -> None:
    calls = message.tool_calls or []
    assert calls and calls[0].function.name == "get_weather", message
    for tool_call in calls:
        function = tool_call.function
        validate(json.loads(function.arguments), PARAMETERS[function.name])


def _answer_turn(message: Any) -> list[Any]:
    """The conversation after the assistant's calls, each answered by the tool."""
    calls = [call.model_dump(exclude_none=True) for call in message.tool_calls]
    answers = [{"role": "tool", "tool_call_id": call["id"], "content": SUNNY} for call in calls]
    return [*QUESTION, {"role": "assistant", "content": None, "tool_calls": calls}, *answers]


@pytest.mark.parametrize("route", ["on", "off"])
def test_an_agent_loop_with_the_default_tool_choice(sync_client: OpenAI, route: str) -> None:
    ask = {"model": MODEL, "tools": TOOLS, "max_tokens": 200, "temperature": 0,
           "extra_headers": {"X-Speculative": route}}  # fmt: skip
    first = sync_client.chat.completions.create(messages=QUESTION, **ask).choices[0]
    assert first.finish_reason == "tool_calls", first
    _check_calls(first.message)
    second = sync_client.chat.completions.create(messages=_answer_turn(first.message), **ask)
    answer = second.choices[0]
    assert answer.finish_reason in ("stop", "length") and not answer.message.tool_calls
    assert answer.message.content and not answer.message.content.startswith("{")


async def test_the_same_loop_streamed(async_client: AsyncOpenAI) -> None:
    ask: dict[str, Any] = {"model": MODEL, "tools": TOOLS, "max_tokens": 200, "temperature": 0}
    async with async_client.chat.completions.stream(messages=QUESTION, **ask) as events:
        first = (await events.get_final_completion()).choices[0]
    assert first.finish_reason == "tool_calls", first
    _check_calls(first.message)
    async with async_client.chat.completions.stream(
        messages=_answer_turn(first.message), **ask
    ) as events:
        texts = [e.delta async for e in events if e.type == "content.delta"]
        answer = (await events.get_final_completion()).choices[0]
    assert "".join(texts) == answer.message.content and answer.message.content
    assert not answer.message.tool_calls


def test_a_pydantic_ai_agent_calls_the_tool_and_answers(server: ServerProcess) -> None:
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    provider = OpenAIProvider(base_url=f"{server.base_url}/v1", api_key="unused")
    agent = Agent(
        OpenAIChatModel(MODEL, provider=provider),
        model_settings={"temperature": 0, "max_tokens": 200},
    )
    asked: list[str] = []

    @agent.tool_plain
    def get_weather(city: str) -> str:
        """Current weather in a city."""
        asked.append(city)
        return SUNNY

    result = agent.run_sync("What is the weather in Paris?")
    assert asked, result.all_messages()
    # The run ended on text, after the tool's answer.
    assert isinstance(result.output, str) and result.output
    streamed: list[str] = []

    async def stream() -> str:
        async with agent.run_stream("What is the weather in Paris?") as run:
            async for text in run.stream_text(delta=True):
                streamed.append(text)
            return await run.get_output()

    import asyncio

    before = len(asked)
    output = asyncio.run(stream())
    # The 135M model lists the call a few times over: each one ran.
    assert len(asked) > before and set(asked) == {"Paris"}
    assert "".join(streamed) == output and output


def test_the_start_log_says_how_auto_is_served(server: ServerProcess) -> None:
    # SmolLM2's template renders no tools and writes no call format.
    log = server.log_path.read_text(errors="replace")
    assert 'tool_choice "auto": the chat template shows no call format vLLM parses' in log
