"""Suffix drafting never changes an answer: greedy chat, completions, constrained tool calls
(specgate's envelope, the embedded model having no call format of its own) and json_schema
outputs are token for token those of a request that never drafts, asked first and again (the
second time drafting from the first answer); streams count every token once."""

from __future__ import annotations

import json
from typing import Any

import pytest
from openai import OpenAI

from tests.engine.prompts import CODE, MODEL
from tests.engine.server import ServerProcess
from tests.engine.test_tool_calls import MESSAGES, NAMED, TOOLS
from tests.engine_suffix.conftest import KEYS, client_for

PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 30}, "age": {"type": "integer"}},
    "required": ["name", "age"],
    "additionalProperties": False,
}
REQUESTS: dict[str, dict[str, Any]] = {
    "chat": {"messages": CODE, "max_tokens": 48},
    "named tool call": {"messages": MESSAGES, "tools": TOOLS, "tool_choice": NAMED},
    "required tool call": {"messages": MESSAGES, "tools": TOOLS, "tool_choice": "required"},
    "json_schema": {
        "messages": [{"role": "user", "content": "Invent a person: their name and age."}],
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "person", "schema": PERSON, "strict": True},
        },
        "max_tokens": 48,
    },
}


def chat(client: OpenAI, header: str, body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The answer as the client sees it (text, or the calls' names and arguments), and what
    drafting did."""
    completion = client.chat.completions.create(
        model=MODEL, temperature=0, extra_headers={"X-Speculative": header}, **body
    )
    message = completion.choices[0].message
    calls = [(call.function.name, call.function.arguments) for call in message.tool_calls or []]
    usage = (completion.usage.model_extra if completion.usage else None) or {}
    return json.dumps([message.content, calls]), usage.get("speculative_decoding") or {}


@pytest.mark.parametrize("kind", sorted(REQUESTS))
def test_greedy_answers_with_suffix_drafting_are_those_without(
    server: ServerProcess, kind: str
) -> None:
    client = client_for(server, KEYS[0])
    body = {**REQUESTS[kind], "extra_body": {"cache_salt": f"answers-{kind}"}}
    plain, _ = chat(client, "off", body)
    drafted, first = chat(client, "on", body)
    again, second = chat(client, "on", body)
    # auto: each step's length chosen from the drafter's confidence in every token.
    chosen, _ = chat(client, "auto", body)
    assert drafted == again == chosen == plain
    # Asked again, the answer is in the tree: drafting had something to check.
    assert second["accepted_tokens"] > 0, (first, second)


def test_a_streamed_completion_counts_every_token_once(server: ServerProcess) -> None:
    client = client_for(server, KEYS[0])
    kwargs: dict[str, Any] = {
        "model": MODEL,
        "prompt": "def fibonacci(n):",
        "max_tokens": 40,
        "temperature": 0,
        "logprobs": 0,
        "extra_body": {"ignore_eos": True, "cache_salt": "stream"},
        "extra_headers": {"X-Speculative": "on"},
    }
    whole = client.completions.create(**kwargs)
    usage_too = {"include_usage": True}
    stream = client.completions.create(**kwargs, stream=True, stream_options=usage_too)
    text, tokens, usage = [], 0, None
    for chunk in stream:
        for choice in chunk.choices:
            text.append(choice.text)
            tokens += len(choice.logprobs.tokens or []) if choice.logprobs else 0
        usage = chunk.usage or usage
    assert usage is not None and whole.usage is not None
    assert "".join(text) == whole.choices[0].text
    assert tokens == usage.completion_tokens == whole.usage.completion_tokens == 40
    spec = (usage.model_extra or {}).get("speculative_decoding") or {}
    assert spec.get("accepted_tokens", 0) > 0, spec  # the stream drafted from the first answer
