"""The wire shapes over the scripted fake engine: logprobs, text_offset, echo and stop
trimming, streamed and not, each body and chunk checked against OpenAI's schema."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from tests.conftest import MODEL
from tests.openai_schema import CHAT as CHAT_RESPONSE
from tests.openai_schema import CHAT_CHUNK, COMPLETION, COMPLETION_CHUNK, violations
from tests.scripted_site import scripted_site

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
TOKENS = [" The", " cat", " sat", ".", " END", " never"]


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with scripted_site(TOKENS) as site:
        yield site.client


async def chunks_of(client: httpx.AsyncClient, path: str, body: dict[str, Any]) -> list[Any]:
    response = await client.post(path, json={**body, "stream": True})
    assert response.status_code == 200, response.text
    lines = response.text.splitlines()
    payloads = [line.removeprefix("data: ") for line in lines if line.startswith("data:")]
    assert payloads[-1] == "[DONE]"
    return [json.loads(payload) for payload in payloads[:-1]]


async def test_completion_logprobs_and_offsets_agree_streamed_and_not(
    client: httpx.AsyncClient,
) -> None:
    body = {"model": MODEL, "prompt": "Once upon", "max_tokens": 4, "logprobs": 2}
    whole = (await client.post(COMPLETIONS, json=body)).json()
    assert violations(whole, COMPLETION) == []
    choice = whole["choices"][0]
    assert choice["text"] == " The cat sat."
    logprobs = choice["logprobs"]
    assert logprobs["tokens"] == TOKENS[:4]
    assert logprobs["text_offset"] == [0, 4, 8, 12]
    assert [len(top) for top in logprobs["top_logprobs"]] == [2, 2, 2, 2]
    assert logprobs["top_logprobs"][0][" The"] == logprobs["token_logprobs"][0]
    chunks = await chunks_of(client, COMPLETIONS, body)
    for chunk in chunks:
        assert violations(chunk, COMPLETION_CHUNK) == []
    streamed = [c["choices"][0] for c in chunks if c["choices"]]
    assert "".join(c["text"] for c in streamed) == choice["text"]
    assert [o for c in streamed for o in c["logprobs"]["text_offset"]] == [0, 4, 8, 12]


async def test_echo_puts_the_prompt_and_its_logprobs_first(client: httpx.AsyncClient) -> None:
    body = {"model": MODEL, "prompt": "Once upon", "max_tokens": 2, "logprobs": 1, "echo": True}
    whole = (await client.post(COMPLETIONS, json=body)).json()
    choice = whole["choices"][0]
    assert choice["text"] == "Once upon The cat"
    logprobs = choice["logprobs"]
    assert logprobs["tokens"] == ["Once", " upon", " The", " cat"]
    assert logprobs["text_offset"] == [0, 4, 9, 13]
    # Nothing predicts the prompt's first token.
    assert logprobs["token_logprobs"][0] is None and logprobs["top_logprobs"][0] is None
    chunks = await chunks_of(client, COMPLETIONS, body)
    assert "".join(c["choices"][0]["text"] for c in chunks if c["choices"]) == choice["text"]


@pytest.mark.parametrize("path", [CHAT, COMPLETIONS])
async def test_a_stop_string_is_trimmed_from_the_output(
    client: httpx.AsyncClient, path: str
) -> None:
    prompt: dict[str, Any] = (
        {"messages": [{"role": "user", "content": "hi"}]} if path == CHAT else {"prompt": "hi"}
    )
    body = {"model": MODEL, **prompt, "max_tokens": 10, "stop": ["t."]}
    whole = (await client.post(path, json=body)).json()
    choice = whole["choices"][0]
    text = choice["message"]["content"] if path == CHAT else choice["text"]
    assert (text, choice["finish_reason"]) == (" The cat sa", "stop")
    chunks = await chunks_of(client, path, body)
    key = "delta" if path == CHAT else None
    pieces = [
        (c["choices"][0][key].get("content", "") if key else c["choices"][0]["text"])
        for c in chunks
        if c["choices"]
    ]
    assert "".join(pieces) == text


async def test_a_script_that_ends_finishes_with_stop(client: httpx.AsyncClient) -> None:
    body = {"model": MODEL, "prompt": "hi", "max_tokens": 50}
    whole = (await client.post(COMPLETIONS, json=body)).json()
    assert whole["choices"][0]["text"] == "".join(TOKENS)
    assert whole["choices"][0]["finish_reason"] == "stop"


async def test_chat_logprobs_stream_and_conform(client: httpx.AsyncClient) -> None:
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 3,
        "logprobs": True,
        "top_logprobs": 2,
    }
    whole = (await client.post(CHAT, json=body)).json()
    assert violations(whole, CHAT_RESPONSE) == []
    content = whole["choices"][0]["logprobs"]["content"]
    assert [entry["token"] for entry in content] == TOKENS[:3]
    assert all(len(entry["top_logprobs"]) == 2 for entry in content)
    assert content[0]["bytes"] == list(b" The")
    chunks = await chunks_of(client, CHAT, {**body, "stream_options": {"include_usage": True}})
    for chunk in chunks:
        assert violations(chunk, CHAT_CHUNK) == []
    streamed = [e for c in chunks if c["choices"] for e in c["choices"][0]["logprobs"]["content"]]
    assert streamed == content
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 3
    assert all(c["usage"] is None for c in chunks[:-1])


def test_the_openai_document_is_the_vendored_one_unchanged(monkeypatch: pytest.MonkeyPatch) -> None:
    # A clone of the repository alone validates against OpenAI's document: nothing outside it.
    from tests import openai_schema

    monkeypatch.delenv("OPENAI_SPEC", raising=False)
    assert openai_schema.VENDORED.is_relative_to(openai_schema.REPO)
    document = json.loads(openai_schema._document())
    assert document["openapi"] == "3.1.0" and document["info"]["version"] == "2.3.0"
