"""Tool calls on /v1/chat/completions over the scripted fake engine: constrained named and
required calls, streamed as OpenAI streams them, the legacy functions, and the refusals."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from openai import AsyncOpenAI

from app.engine.fakes.scripted import FakeEngine
from app.main import create_app
from app.settings import Settings
from app.tools.tool_calls import Function, ToolCallMode, ToolCallStream, parse_calls
from tests.conftest import MODEL
from tests.openai_schema import CHAT as CHAT_RESPONSE
from tests.openai_schema import CHAT_CHUNK, violations
from tests.scripted_site import ScriptedSite as Site
from tests.scripted_site import scripted_site

CHAT = "/v1/chat/completions"
JSON = {"type": "json_object"}
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
TIME = {"type": "function", "function": {"name": "get_time"}}
# What the constrained model "writes", cut into tokens as a model would.
NAMED_OUTPUT = ['{"', "city", '": "', "Par", 'is"}']
REQUIRED_OUTPUT = [
    '[{"name": "get_weather", "param',
    'eters": {"city": "Pa',
    'ris"}}, {"name": "get_time", "parameters": {}}]',
]


@pytest.fixture
async def site() -> AsyncIterator[Site]:
    async with scripted_site(NAMED_OUTPUT) as site:
        yield site


def chat(**fields: Any) -> dict[str, Any]:
    messages = [{"role": "user", "content": "What is the weather in Paris?"}]
    return {"model": MODEL, "messages": messages, "max_tokens": 64, **fields}


def named(name: str = "get_weather") -> dict[str, Any]:
    return {"type": "function", "function": {"name": name}}


async def streamed(client: httpx.AsyncClient, body: dict[str, Any]) -> list[dict[str, Any]]:
    response = await client.post(CHAT, json={**body, "stream": True})
    assert response.status_code == 200, response.text
    lines = [line.removeprefix("data: ") for line in response.text.splitlines()]
    payloads = [line for line in lines if line and not line.startswith(":")]
    assert payloads[-1] == "[DONE]"
    chunks = [json.loads(payload) for payload in payloads[:-1]]
    for chunk in chunks:
        assert violations(chunk, CHAT_CHUNK) == [], chunk
    return chunks


async def test_a_named_function_is_constrained_to_its_parameters(site: Site) -> None:
    response = await site.client.post(CHAT, json=chat(tools=[WEATHER, TIME], tool_choice=named()))
    assert response.status_code == 200, response.text
    body = response.json()
    assert violations(body, CHAT_RESPONSE) == []
    choice = body["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] is None
    (call,) = choice["message"]["tool_calls"]
    assert call["type"] == "function" and call["id"].startswith("call_")
    assert call["function"] == {"name": "get_weather", "arguments": '{"city": "Paris"}'}
    (request,) = site.requests()
    assert request.options.json_schema == WEATHER["function"]["parameters"]  # type: ignore[index]
    assert request.tools is not None and len(request.tools) == 2
    # Tool-call arguments are structured output, and routed as such.
    assert response.headers["x-specgate-class"] in ("structured", "fresh-json")


async def test_a_named_call_streams_its_header_then_its_arguments(site: Site) -> None:
    chunks = await streamed(site.client, chat(tools=[WEATHER], tool_choice=named()))
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    first = deltas[0]["tool_calls"][0]
    assert first["index"] == 0 and first["id"].startswith("call_") and first["type"] == "function"
    assert first["function"]["name"] == "get_weather"
    assert deltas[0]["role"] == "assistant"
    later = [d["tool_calls"][0] for d in deltas[1:] if "tool_calls" in d]
    assert all("id" not in call and "name" not in call["function"] for call in later)
    arguments = first["function"]["arguments"] + "".join(c["function"]["arguments"] for c in later)
    assert json.loads(arguments) == {"city": "Paris"}
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


async def test_required_calls_come_whole_streamed_and_not(site: Site) -> None:
    site.output = REQUIRED_OUTPUT
    body = chat(tools=[WEATHER, TIME], tool_choice="required")
    message = (await site.client.post(CHAT, json=body)).json()["choices"][0]["message"]
    calls = [call["function"] for call in message["tool_calls"]]
    assert calls == [
        {"name": "get_weather", "arguments": '{"city": "Paris"}'},
        {"name": "get_time", "arguments": "{}"},
    ]
    schema = site.requests()[0].options.json_schema
    assert schema is not None and schema["type"] == "array" and "maxItems" not in schema
    chunks = await streamed(site.client, body)
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    streamed_calls = [call for delta in deltas for call in delta.get("tool_calls", [])]
    assert [(c["index"], c["function"]["name"]) for c in streamed_calls] == [
        (0, "get_weather"),
        (1, "get_time"),
    ]
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


async def test_one_call_at_most_without_parallel_tool_calls(site: Site) -> None:
    site.output = REQUIRED_OUTPUT[:1]
    body = chat(tools=[WEATHER, TIME], tool_choice="required", parallel_tool_calls=False)
    await site.client.post(CHAT, json=body)
    assert site.requests()[0].options.json_schema["maxItems"] == 1  # type: ignore[index]


async def test_the_openai_sdk_assembles_streamed_calls(site: Site) -> None:
    sdk = AsyncOpenAI(base_url="http://specgate/v1", api_key="-", http_client=site.client)
    async with sdk.chat.completions.stream(
        model=MODEL,
        messages=[{"role": "user", "content": "Weather in Paris?"}],
        tools=[WEATHER],  # type: ignore[list-item]
        tool_choice=named(),  # type: ignore[arg-type]
    ) as stream:
        final = await stream.get_final_completion()
    (call,) = final.choices[0].message.tool_calls or []
    assert call.function.name == "get_weather"  # type: ignore[union-attr]
    assert json.loads(call.function.arguments) == {"city": "Paris"}  # type: ignore[union-attr]
    assert final.choices[0].finish_reason == "tool_calls"


async def test_legacy_functions_come_back_as_a_function_call(site: Site) -> None:
    body = chat(functions=[WEATHER["function"]], function_call={"name": "get_weather"})
    choice = (await site.client.post(CHAT, json=body)).json()["choices"][0]
    assert choice["finish_reason"] == "function_call"
    assert choice["message"]["function_call"] == {
        "name": "get_weather",
        "arguments": '{"city": "Paris"}',
    }
    assert "tool_calls" not in choice["message"]


async def test_tool_turns_reach_the_chat_template(site: Site) -> None:
    call = {"id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}  # fmt: skip
    messages = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
    ]
    site.output = [" It", " is", " sunny", "."]
    body = {"model": MODEL, "messages": messages, "tools": [WEATHER], "tool_choice": "none"}
    response = await site.client.post(CHAT, json=body)
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["message"]["content"] == " It is sunny."
    prompt = site.requests()[0].prompt
    assert prompt[1]["tool_calls"] == [call]  # type: ignore[index]
    assert prompt[2]["tool_call_id"] == "call_1" and prompt[2]["content"] == "sunny"  # type: ignore[index]
    assert site.requests()[0].options.json_schema is None


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"tool_choice": "required"}, "tool_choice"),
        ({"tools": [WEATHER], "tool_choice": named("get_time")}, "tool_choice"),
        ({"tools": [WEATHER, WEATHER], "tool_choice": "required"}, "tools"),
        ({"tools": [{"type": "function", "function": {"name": "bad name"}}]}, "tools"),
        ({"tools": [WEATHER], "functions": [WEATHER["function"]]}, "functions"),
        ({"tools": [WEATHER], "tool_choice": "required", "response_format": JSON}, "response_"),
        ({"messages": [{"role": "tool", "content": "x"}]}, "messages"),
    ],
)
async def test_tool_requests_that_cannot_be_served_are_named(
    site: Site, fields: dict[str, Any], param: str
) -> None:
    response = await site.client.post(CHAT, json=chat(**fields))
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"].startswith(param), error


def test_a_cut_off_required_output_keeps_its_whole_calls() -> None:
    mode = ToolCallMode("required", (Function("a"), Function("b")))
    text = '[{"name": "a", "parameters": {"x": "}{"}}, {"name": "b", "param'
    assert [(c.name, c.arguments) for c in parse_calls(mode, text)] == [("a", '{"x": "}{"}')]
    stream = ToolCallStream(mode)
    pieces = [stream.feed(char) for char in text]
    assert [d.name for piece in pieces for d in piece] == ["a"]


HERMES_OUTPUT = ["Let", " me", " check", ". ", "<tool_", "call>", '{"name": "get_weather", ',
                 '"arguments": {"city": "Paris"}}', "</tool_call>"]  # fmt: skip
AUTO = Settings(routing_exploration=0, enable_auto_tool_choice=True, tool_call_parser="hermes")


@pytest.fixture
async def auto_site() -> AsyncIterator[Site]:
    async with scripted_site(HERMES_OUTPUT, AUTO) as site:
        yield site


async def test_auto_reads_calls_in_the_models_own_format(auto_site: Site) -> None:
    body = chat(tools=[WEATHER])  # "auto" by default
    response = await auto_site.client.post(CHAT, json=body)
    assert response.status_code == 200, response.text
    whole = response.json()
    assert violations(whole, CHAT_RESPONSE) == []
    choice = whole["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] == "Let me check. "
    (call,) = choice["message"]["tool_calls"]
    assert call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"]) == {"city": "Paris"}
    # Not constrained: the model chose to call.
    assert auto_site.requests()[0].options.json_schema is None
    # Routed as structured output all the same.
    assert response.headers["x-specgate-class"] in ("structured", "fresh-json")
    chunks = await streamed(auto_site.client, body)
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    assert "".join(d.get("content") or "" for d in deltas) == "Let me check. "
    pieces = [call for d in deltas for call in d.get("tool_calls", [])]
    assert pieces[0]["function"]["name"] == "get_weather" and pieces[0]["id"]
    arguments = "".join(p["function"].get("arguments", "") for p in pieces)
    assert json.loads(arguments) == {"city": "Paris"}
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


async def test_auto_without_a_call_is_text(auto_site: Site) -> None:
    auto_site.output = ["It", " is", " sunny", "."]
    body = chat(tools=[WEATHER], tool_choice="auto")
    choice = (await auto_site.client.post(CHAT, json=body)).json()["choices"][0]
    assert (choice["message"]["content"], choice["finish_reason"]) == ("It is sunny.", "stop")
    assert "tool_calls" not in choice["message"]
    chunks = await streamed(auto_site.client, body)
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == "It is sunny." and chunks[-1]["choices"][0]["finish_reason"] == "stop"


async def test_a_named_parser_must_be_one_of_vllms() -> None:
    settings = Settings(tool_call_parser="nope")
    engines = {route: FakeEngine(route) for route in ("speculative", "plain")}
    app = create_app(settings, engines)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="not one of vLLM's"):
        async with app.router.lifespan_context(app):
            pass
