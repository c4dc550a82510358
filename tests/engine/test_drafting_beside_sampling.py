"""Drafted answers stay the plain ones while a sampled request shares their steps (issue 13)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from openai import AsyncOpenAI

from tests.engine.prompts import MODEL

# Copy tasks: ngram lookup drafts most of the answer from the prompt.
COPY_TEXT = (
    "Repeat the following text exactly, word for word.\n\nThe lighthouse keeper climbed the "
    "spiral stairs every evening at dusk. He trimmed the wick, polished the great lens, and "
    "wrote the weather in a leather logbook. Ships passed far out on the grey water, and none "
    "of them ever knew his name."
)
COPY_JSON = (
    "Copy this JSON object exactly.\n\n"
    '{"firstName": "Lina", "lastName": "Haddad", "phoneNumber": "555-0142", "city": "Porto", '
    '"isMember": true, "visits": 12}'
)
# Sampled, and long enough to share every step of the greedy request beside it.
POEM = "Write a long poem about the sea, the wind and the old harbour."


async def chat(client: AsyncOpenAI, content: str, speculative: str, **fields: Any) -> Any:
    return await client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": content}],
        extra_headers={"X-Speculative": speculative},
        **fields,
    )


async def beside_sampling(client: AsyncOpenAI, content: str, **fields: Any) -> Any:
    """A greedy drafting request, with a sampled one on the speculative engine at the same time."""
    sampled = chat(client, POEM, "on", temperature=1.0, max_tokens=160)
    greedy = chat(client, content, "on", temperature=0, **fields)
    _, completion = await asyncio.gather(sampled, greedy)
    return completion


def draft_tokens(completion: Any) -> int:
    spec = (completion.usage.model_extra or {}).get("speculative_decoding") or {}
    return int(spec.get("draft_tokens", 0))


async def test_a_greedy_drafting_answer_beside_a_sampled_request_is_the_plain_one(
    async_client: AsyncOpenAI,
) -> None:
    # vLLM 0.32's CPU rejection sampler divided every draft row's logits by uninitialised
    # memory whenever a sampled request shared the step: the copy came out as noise.
    plain = await chat(async_client, COPY_TEXT, "off", temperature=0, max_tokens=80)
    drafted = await beside_sampling(async_client, COPY_TEXT, max_tokens=80)
    assert draft_tokens(drafted) > 0
    assert drafted.choices[0].message.content == plain.choices[0].message.content


async def test_a_json_object_answer_beside_a_sampled_request_drafts_and_parses(
    async_client: AsyncOpenAI,
) -> None:
    # The same fault let tokens the grammar masks win, and the request ended with an error.
    fields: dict[str, Any] = {"response_format": {"type": "json_object"}, "max_tokens": 64}
    plain = await chat(async_client, COPY_JSON, "off", temperature=0, **fields)
    drafted = await beside_sampling(async_client, COPY_JSON, **fields)
    assert draft_tokens(drafted) > 0
    choice = drafted.choices[0]
    assert choice.finish_reason == "stop"
    assert isinstance(json.loads(choice.message.content or ""), dict)
    assert choice.message.content == plain.choices[0].message.content
