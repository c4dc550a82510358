"""tool_choice "auto" without a parser named: the template's own format picked, or specgate's
constrained envelope for a model with none (the fake engines have no template)."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from openai import AsyncOpenAI

from app.engine.fakes.scripted import FakeEngine
from app.engine.generation import GenerationRequest
from app.engine.vllm.tool_parser import parser_for_template
from app.main import auto_tool_choice, create_app
from app.settings import Settings
from app.tools.auto_tools import EnvelopeFormat, ModelFormat
from app.tools.tool_calls import Function
from app.tools.tool_envelope import EnvelopeParser, envelope_schema
from tests.conftest import MODEL
from tests.fast.test_tool_calls import CHAT, TIME, WEATHER, chat, streamed
from tests.scripted_site import ScriptedSite as Site
from tests.scripted_site import scripted_site

CALL = ['{"tool_', 'calls": [{"name": "get_weather", ', '"arguments": {"city": "Par', 'is"}}]}']
ANSWER = ['{\n  "con', 'tent": "It is \\"sun', 'ny\\" \\u00e0 Par', "is\\n\\ud83d", '\\ude00"}']
ANSWER_TEXT = 'It is "sunny" à Paris\n😀'
SETTINGS = Settings(routing_exploration=0)


@pytest.fixture
async def site() -> AsyncIterator[Site]:
    async with scripted_site(CALL, SETTINGS) as site:
        yield site


async def test_a_call_in_the_envelope_is_a_tool_call_whole_and_streamed(site: Site) -> None:
    body = chat(tools=[WEATHER, TIME])  # tool_choice left at its default
    choice = (await site.client.post(CHAT, json=body)).json()["choices"][0]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] is None
    (call,) = choice["message"]["tool_calls"]
    assert call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"]) == {"city": "Paris"}
    (request,) = site.requests()
    # Constrained to the envelope; the tools are described to the model, not templated.
    assert request.options.json_schema == envelope_schema(
        (Function.declared("get_weather", WEATHER["function"]["parameters"]), Function("get_time")),  # type: ignore[index]
        parallel=True,
    )
    assert request.tools is None
    system = request.prompt[0]
    assert system["role"] == "system" and '"name": "get_weather"' in system["content"]
    assert "The weather in a city." in system["content"]
    chunks = await streamed(site.client, body)
    pieces = [
        c for ch in chunks if ch["choices"] for c in ch["choices"][0]["delta"].get("tool_calls", [])
    ]
    assert [p["function"].get("name") for p in pieces] == ["get_weather"]
    assert json.loads(pieces[0]["function"]["arguments"]) == {"city": "Paris"}
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
    # Routed and learned as structured output.
    response = await site.client.post(CHAT, json=body)
    assert response.headers["x-specgate-class"] in ("structured", "fresh-json")


async def test_text_in_the_envelope_is_the_answer_whole_and_streamed(site: Site) -> None:
    site.output = ANSWER
    body = chat(tools=[WEATHER], tool_choice="auto")
    choice = (await site.client.post(CHAT, json=body)).json()["choices"][0]
    assert choice["message"]["content"] == ANSWER_TEXT and choice["finish_reason"] == "stop"
    assert "tool_calls" not in choice["message"]
    chunks = await streamed(site.client, body)
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == ANSWER_TEXT and chunks[-1]["choices"][0]["finish_reason"] == "stop"


async def test_the_turn_after_tool_results_is_text_and_sees_the_call(site: Site) -> None:
    site.output = ['{"content": "It is ', 'sunny."}']
    call = {"id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}  # fmt: skip
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "Sunny, 21 C"},
    ]
    choice = (await site.client.post(CHAT, json=chat(messages=messages, tools=[WEATHER]))).json()
    assert choice["choices"][0]["message"]["content"] == "It is sunny."
    (request,) = site.requests()
    # Only content: asked to choose again, a model without a call format calls again.
    schema = request.options.json_schema
    assert schema is not None and list(schema["properties"]) == ["content"]
    system, _, shown, result = request.prompt
    assert system["content"].startswith("Be brief.\n\nYou can call these functions:")
    assert json.loads(shown["content"]) == {
        "tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]
    }
    assert result == {"role": "tool", "content": "Sunny, 21 C", "tool_call_id": "call_1"}


async def test_one_call_when_parallel_calls_are_off(site: Site) -> None:
    await site.client.post(CHAT, json=chat(tools=[WEATHER], parallel_tool_calls=False))
    schema = site.requests()[0].options.json_schema
    assert schema is not None and schema["anyOf"][0]["properties"]["tool_calls"]["maxItems"] == 1


async def test_a_response_format_beside_the_envelope_is_refused_by_name(site: Site) -> None:
    body = chat(tools=[WEATHER], response_format={"type": "json_object"})
    response = await site.client.post(CHAT, json=body)
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "response_format"


async def test_auto_turned_off_is_refused_as_vllm_refuses_it() -> None:
    settings = Settings(routing_exploration=0, enable_auto_tool_choice=False)
    async with scripted_site(CALL, settings) as site:
        response = await site.client.post(CHAT, json=chat(tools=[WEATHER]))
        assert response.status_code == 400
        error = response.json()["error"]
        assert error["param"] == "tool_choice" and "enable-auto-tool-choice" in error["message"]
        response = await site.client.post(CHAT, json=chat(functions=[WEATHER["function"]]))
        assert response.json()["error"]["param"] == "function_call"


async def test_the_responses_api_serves_auto_with_the_envelope(site: Site) -> None:
    tool = {"type": "function", **WEATHER["function"]}  # type: ignore[dict-item]
    body = {"model": chat()["model"], "input": "Weather in Paris?", "tools": [tool]}
    output = (await site.client.post("/v1/responses", json=body)).json()["output"]
    assert [(item["type"], item["name"]) for item in output] == [("function_call", "get_weather")]
    site.output = ANSWER
    output = (await site.client.post("/v1/responses", json=body)).json()["output"]
    assert output[0]["content"][0]["text"] == ANSWER_TEXT


@pytest.mark.parametrize(
    ("template", "parser"),
    [
        # What each family's template writes around a call (abridged).
        ("{{- '<tool_call>\\n' + tool_call | tojson + '\\n</tool_call>' }}", "hermes"),
        ("<tool_call>\n<function={{ tool_call.name }}>", "qwen3_coder"),
        ("{{- '[TOOL_CALLS] [' }}", "mistral"),
        ("{{- '<|python_tag|>' + tool_call.name }}", "llama3_json"),
        (
            "Given the following functions, please respond with a JSON for a function call",
            "llama3_json",
        ),
        ("{{'<|im_start|>' + message['role'] + '\\n' + message['content']}}", None),
        (None, None),
    ],
)
def test_the_parser_is_picked_from_what_the_template_writes(
    template: str | None, parser: str | None
) -> None:
    assert parser_for_template(template) == parser


class _TemplatedEngine(FakeEngine):
    """A fake engine whose tokenizer carries a chat template, as a served model's does."""

    def __init__(self, route: Any, template: str, **fields: Any) -> None:
        super().__init__(route, **fields)
        tokenizer = SimpleNamespace(chat_template=template, get_vocab=dict)
        self.facts = replace(self.facts, tokenizer=tokenizer)


# A hermes-format template (abridged), and a model that calls, then answers the tool's result.
HERMES_TEMPLATE = "{%- for tool_call in message.tool_calls %}{{ '<tool_call>' }}{% endfor %}"


def _calls_then_answers(request: GenerationRequest, index: int) -> list[str]:
    if request.prompt[-1]["role"] == "tool":  # type: ignore[index]
        return ["It is ", "sunny ", "in Paris."]
    return ["Let me look. ", *HERMES_CALL]


HERMES_CALL = ["<tool_", "call>", '{"name": "get_weather", ',
               '"arguments": {"city": "Paris"}}', "</tool_call>"]  # fmt: skip


def _only_calls_then_answers(request: GenerationRequest, index: int) -> list[str]:
    # pydantic-ai's streamed run ends on the first text, so its model calls without a preamble.
    said = _calls_then_answers(request, index)
    return said[1:] if said[1:] == HERMES_CALL else said


@asynccontextmanager
async def hermes_client(script: Any = _calls_then_answers) -> AsyncIterator[AsyncOpenAI]:
    engines = {
        route: _TemplatedEngine(route, HERMES_TEMPLATE, script=script)
        for route in ("speculative", "plain")
    }
    app = create_app(Settings(routing_exploration=0), engines)  # type: ignore[arg-type]
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://specgate") as http:
            yield AsyncOpenAI(base_url="http://specgate/v1", api_key="-", http_client=http)


@pytest.mark.parametrize("stream", [False, True])
async def test_an_sdk_loop_through_a_parser_picked_from_the_template(stream: bool) -> None:
    async with hermes_client() as client:
        question: list[Any] = [{"role": "user", "content": "What is the weather in Paris?"}]
        ask: dict[str, Any] = {"model": MODEL, "tools": [WEATHER], "max_tokens": 64}
        if stream:
            async with client.chat.completions.stream(messages=question, **ask) as events:
                first = (await events.get_final_completion()).choices[0]
        else:
            first = (await client.chat.completions.create(messages=question, **ask)).choices[0]
        assert first.finish_reason == "tool_calls" and first.message.content == "Let me look. "
        (call,) = first.message.tool_calls or []
        assert json.loads(call.function.arguments) == {"city": "Paris"}  # type: ignore[union-attr]
        answer = {"role": "tool", "tool_call_id": call.id, "content": "Sunny, 21 C"}
        turn = [*question, first.message.model_dump(exclude_none=True), answer]
        second = (await client.chat.completions.create(messages=turn, **ask)).choices[0]
        assert (second.message.content, second.finish_reason) == ("It is sunny in Paris.", "stop")


async def test_a_pydantic_ai_agent_through_a_parser_picked_from_the_template() -> None:
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    async with hermes_client(_only_calls_then_answers) as client:
        model = OpenAIChatModel(MODEL, provider=OpenAIProvider(openai_client=client))
        agent = Agent(model)
        asked: list[str] = []

        @agent.tool_plain
        def get_weather(city: str) -> str:
            """The weather in a city."""
            asked.append(city)
            return "Sunny, 21 C"

        result = await agent.run("What is the weather in Paris?")
        assert asked == ["Paris"] and result.output == "It is sunny in Paris."
        async with agent.run_stream("What is the weather in Paris?") as run:
            streamed = [text async for text in run.stream_text(delta=True)]
        assert asked == ["Paris", "Paris"] and "".join(streamed) == "It is sunny in Paris."


def test_the_start_picks_and_logs_the_format(caplog: pytest.LogCaptureFixture) -> None:
    hermes = "{{ '<tool_call>' }}"
    engines = {route: _TemplatedEngine(route, hermes) for route in ("speculative", "plain")}
    with caplog.at_level(logging.INFO, logger="specgate"):
        chosen = auto_tool_choice(Settings(), engines)  # type: ignore[arg-type]
    assert isinstance(chosen, ModelFormat)
    assert "vLLM's hermes parser (picked from the chat template)" in caplog.text
    plain = {route: _TemplatedEngine(route, "{{ messages }}") for route in ("speculative",)}
    assert isinstance(auto_tool_choice(Settings(), plain), EnvelopeFormat)  # type: ignore[arg-type]
    named = auto_tool_choice(Settings(tool_call_parser="llama3_json"), plain)  # type: ignore[arg-type]
    assert isinstance(named, ModelFormat) and "llama3_json" in named.description


def test_a_cut_off_envelope_keeps_what_it_has() -> None:
    parser = EnvelopeParser()
    assert parser.parse('{"content": "Half an ans') == ("Half an ans", [])
    text = '{"tool_calls": [{"name": "a", "arguments": {}}, {"name": "b", "argu'
    content, calls = EnvelopeParser().parse(text)
    assert content is None and [call.name for call in calls] == ["a"]
    # Streamed one character at a time, escapes and surrogate pairs included.
    parser = EnvelopeParser()
    whole = "".join(parser.feed(char)[0] or "" for char in "".join(ANSWER))
    assert whole == ANSWER_TEXT
