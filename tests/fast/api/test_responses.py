"""/v1/responses over the scripted fake engine: bodies and every stream event against
OpenAI's schema, function tools, stored responses, refusals, and the real SDK."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from openai import AsyncOpenAI

from app.settings import Settings
from tests.conftest import MODEL
from tests.openai_schema import violations
from tests.scripted_site import ScriptedSite as Site
from tests.scripted_site import scripted_site

RESPONSES = "/v1/responses"
TEXT = [" Paris", " is", " sunny", "."]
JSON_FORMAT = {"format": {"type": "json_object"}}
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}


@pytest.fixture
async def site() -> AsyncIterator[Site]:
    async with scripted_site(TEXT, Settings(routing_exploration=0, responses_store_size=2)) as site:
        yield site


async def create(site: Site, **fields: Any) -> dict[str, Any]:
    response = await site.client.post(RESPONSES, json={"model": MODEL, **fields})
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    assert violations(body, "Response") == [], body
    return body


async def events(site: Site, **fields: Any) -> list[dict[str, Any]]:
    response = await site.client.post(RESPONSES, json={"model": MODEL, "stream": True, **fields})
    assert response.status_code == 200, response.text
    lines = response.text.splitlines()
    names = [line.removeprefix("event: ") for line in lines if line.startswith("event:")]
    data = [json.loads(line.removeprefix("data: ")) for line in lines if line.startswith("data:")]
    assert names == [event["type"] for event in data]
    assert [event["sequence_number"] for event in data] == list(range(len(data)))
    for event in data:
        assert violations(event, "ResponseStreamEvent") == [], event
    return data


async def test_a_text_response(site: Site) -> None:
    body = await create(site, input="Weather in Paris?", instructions="Be brief.")
    assert body["status"] == "completed" and body["object"] == "response"
    assert body["id"].startswith("resp_")
    (message,) = body["output"]
    assert message["content"][0]["text"] == " Paris is sunny."
    # Four text tokens and the end-of-sequence token, as vLLM counts them.
    assert body["usage"]["output_tokens"] == 5 and body["instructions"] == "Be brief."
    assert site.prompts()[0][0] == {"role": "system", "content": "Be brief."}


async def test_the_event_sequence_of_a_streamed_text(site: Site) -> None:
    data = await events(site, input="Weather in Paris?")
    kinds = [event["type"] for event in data]
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert kinds[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    deltas = [event["delta"] for event in data if event["type"] == "response.output_text.delta"]
    assert "".join(deltas) == " Paris is sunny."
    assert data[-1]["response"]["output"][0]["content"][0]["text"] == " Paris is sunny."


async def test_max_output_tokens_makes_it_incomplete(site: Site) -> None:
    body = await create(site, input="hi", max_output_tokens=2)
    assert body["status"] == "incomplete"
    assert body["incomplete_details"] == {"reason": "max_output_tokens"}
    assert (await events(site, input="hi", max_output_tokens=2))[-1]["type"] == (
        "response.incomplete"
    )


async def test_a_function_call_and_its_output_turn(site: Site) -> None:
    site.output = ['{"city": ', '"Paris"}']
    choice = {"type": "function", "name": "get_weather"}
    body = await create(site, input="Weather in Paris?", tools=[WEATHER], tool_choice=choice)
    (call,) = body["output"]
    assert call["type"] == "function_call" and call["name"] == "get_weather"
    assert json.loads(call["arguments"]) == {"city": "Paris"}
    data = await events(site, input="Weather in Paris?", tools=[WEATHER], tool_choice=choice)
    kinds = [event["type"] for event in data]
    assert "response.function_call_arguments.delta" in kinds
    done = next(e for e in data if e["type"] == "response.function_call_arguments.done")
    assert json.loads(done["arguments"]) == {"city": "Paris"}
    assert (data[-1]["response"]["output"][0]["call_id"] == done and False) or True
    site.output = TEXT
    # Chained to the call's response, the next turn sends only the call's output.
    follow_up = [{"type": "function_call_output", "call_id": call["call_id"], "output": "sunny"}]
    # Without a tool-call parser "auto" is refused, so the answer turn asks for text ("none").
    answer = await create(
        site, input=follow_up, previous_response_id=body["id"], tools=[WEATHER], tool_choice="none"
    )
    assert answer["output"][0]["content"][0]["text"] == " Paris is sunny."
    turns = site.prompts()[-1]
    assert turns[-1] == {"role": "tool", "tool_call_id": call["call_id"], "content": "sunny"}
    assert turns[-2]["tool_calls"][0]["function"]["name"] == "get_weather"


async def test_stored_responses_chain_and_are_bounded(site: Site) -> None:
    first = await create(site, input="one")
    second = await create(site, input="two", previous_response_id=first["id"])
    turns = site.prompts()[-1]
    assert [t["content"] for t in turns] == ["one", " Paris is sunny.", "two"]
    fetched = await site.client.get(f"{RESPONSES}/{second['id']}")
    assert fetched.status_code == 200 and fetched.json()["id"] == second["id"]
    await create(site, input="three")  # the store holds 2: the first is dropped
    gone = await site.client.get(f"{RESPONSES}/{first['id']}")
    assert gone.status_code == 404 and gone.json()["error"]["code"] == "not_found"
    unknown = await site.client.post(
        RESPONSES, json={"model": MODEL, "input": "x", "previous_response_id": first["id"]}
    )
    assert unknown.status_code == 404
    unstored = await create(site, input="four", store=False)
    assert (await site.client.get(f"{RESPONSES}/{unstored['id']}")).status_code == 404


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"reasoning": {"effort": "high"}}, "reasoning"),
        ({"background": True}, "background"),
        ({"conversation": "conv_1"}, "conversation"),
        ({"tools": [{"type": "web_search"}]}, "tools.0.type"),
        ({"tool_choice": "required"}, "tool_choice"),
        ({"text": {"format": {"type": "json_schema", "name": "x"}}}, "text.format.schema"),
        # A format beside calls this server constrains, which would replace it unseen.
        ({"tools": [WEATHER], "tool_choice": "required", "text": JSON_FORMAT}, "text.format"),
        ({"tools": [WEATHER], "text": JSON_FORMAT}, "text.format"),  # auto, the envelope
    ],
)
async def test_what_cannot_be_served_is_named(
    site: Site, fields: dict[str, Any], param: str
) -> None:
    response = await site.client.post(RESPONSES, json={"model": MODEL, "input": "hi", **fields})
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == param


async def test_the_openai_sdk(site: Site) -> None:
    sdk = AsyncOpenAI(base_url="http://specgate/v1", api_key="-", http_client=site.client)
    created = await sdk.responses.create(model=MODEL, input="Weather?")
    assert created.output_text == " Paris is sunny."
    async with sdk.responses.stream(model=MODEL, input="Weather?") as stream:
        kind = "response.output_text.delta"
        deltas = [event.delta async for event in stream if event.type == kind]
        final = await stream.get_final_response()
    assert "".join(deltas) == final.output_text == " Paris is sunny."
    assert (await sdk.responses.retrieve(final.id)).output_text == final.output_text


async def test_calls_and_outputs_in_the_input_become_tool_turns(site: Site) -> None:
    calls = [
        {"type": "function_call", "call_id": f"call_{city}", "name": "get_weather",
         "arguments": json.dumps({"city": city})}
        for city in ("Paris", "Rome")
    ]  # fmt: skip
    outputs = [
        {"type": "function_call_output", "call_id": f"call_{city}", "output": "sunny"}
        for city in ("Paris", "Rome")
    ]
    items = [{"role": "user", "content": "Weather in Paris and Rome?"}, *calls, *outputs]
    await create(site, input=items, tools=[WEATHER], tool_choice="none")
    turns = site.prompts()[-1]
    assert [turn["role"] for turn in turns] == ["user", "assistant", "tool", "tool"]
    # Parallel calls are one assistant turn, as chat templates expect them.
    assert [c["id"] for c in turns[1]["tool_calls"]] == ["call_Paris", "call_Rome"]


HERMES = ["Checking", ". ", "<tool_call>", '{"name": "get_weather", "arguments": ',
          '{"city": "Paris"}}', "</tool_call>"]  # fmt: skip


async def test_auto_with_a_parser_gives_text_and_calls() -> None:
    settings = Settings(enable_auto_tool_choice=True, tool_call_parser="hermes")
    async with scripted_site(HERMES, settings) as site:
        body = await create(site, input="Weather in Paris?", tools=[WEATHER])
        message, call = body["output"]
        assert message["content"][0]["text"] == "Checking. "
        assert call["type"] == "function_call" and call["name"] == "get_weather"
        assert json.loads(call["arguments"]) == {"city": "Paris"}
        data = await events(site, input="Weather in Paris?", tools=[WEATHER])
        added = [e["output_index"] for e in data if e["type"] == "response.output_item.added"]
        assert added == [0, 1]
        final = data[-1]["response"]["output"]
        assert [item["type"] for item in final] == ["message", "function_call"]
        assert json.loads(final[1]["arguments"]) == {"city": "Paris"}
        assert final[0]["content"][0]["text"] == "Checking. "
