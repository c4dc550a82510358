"""Mid-stream moves between the engines: greedy text, usage and logprobs survive them."""

from __future__ import annotations

from typing import Any

import pytest
from openai import OpenAI

from tests.engine.prompts import JSON_CONTINUATION, MODEL

STORY = "Once upon a time, in a small village by the sea, there lived"
MOVE = {"X-Specgate-Move-After": "12"}
# A schema whose every answer runs past the move point.
LONG_JSON = {
    "type": "json_schema",
    "json_schema": {
        "name": "numbers",
        "schema": {
            "type": "object",
            "properties": {
                "numbers": {
                    "type": "array", "items": {"type": "integer"}, "minItems": 12, "maxItems": 12
                }
            },
            "required": ["numbers"],
        },
    },
}  # fmt: skip


def stream_completion(client: OpenAI, prompt: str, headers: dict[str, str], **fields: Any) -> Any:
    """Text, logprob tokens, usage and the specgate object of one streamed completion."""
    chunks = list(
        client.completions.create(
            model=MODEL,
            prompt=prompt,
            max_tokens=48,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
            extra_headers=headers,
            **fields,
        )
    )
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    tokens = [
        token for c in chunks if c.choices and c.choices[0].logprobs
        for token in c.choices[0].logprobs.tokens or []
    ]  # fmt: skip
    final = chunks[-1]
    return text, tokens, final.usage, final.model_extra["specgate"]


@pytest.mark.parametrize(
    ("prompt", "start", "first"),
    [
        (JSON_CONTINUATION, "on", "speculative"),
        (STORY, "off", "plain"),
        (JSON_CONTINUATION, "auto", None),
    ],
)
def test_a_moved_greedy_answer_is_the_unmoved_one(
    sync_client: OpenAI, prompt: str, start: str, first: str | None
) -> None:
    headers = {**MOVE, "X-Speculative": start}
    text, tokens, usage, info = stream_completion(sync_client, prompt, headers, logprobs=1)
    segments = info["segments"]
    assert len(segments) == 2, info
    assert segments[0]["route"] == info["route"] != segments[1]["route"]
    assert first is None or info["route"] == first
    assert "X-Specgate-Move-After" in segments[1]["reason"]
    for header in ("off", "on"):
        same, same_tokens, same_usage, unmoved = stream_completion(
            sync_client, prompt, {"X-Speculative": header}, logprobs=1
        )
        assert unmoved.get("segments") is None  # a pinned request moves only when asked
        assert text == same
        assert tokens == same_tokens  # logprobs continue across the move, one per token
    # Usage stays exact: the original prompt, every token once.
    assert usage.prompt_tokens == same_usage.prompt_tokens
    assert usage.completion_tokens == same_usage.completion_tokens == len(tokens)
    assert sum(s["tokens"] for s in segments) == usage.completion_tokens
    # The speculative segment's drafting is reported, whichever end of the move it was.
    drafting = usage.model_extra["speculative_decoding"]
    assert drafting["drafts"] > 0


def test_a_moved_request_is_counted(sync_client: OpenAI, server: Any) -> None:
    import httpx

    stream_completion(sync_client, STORY, {**MOVE, "X-Speculative": "off"})
    metrics = httpx.get(f"{server.base_url}/metrics").text
    assert (
        'specgate_mid_stream_switches_total{cause="forced",direction="plain_to_speculative"}'
        in (metrics)
    )


@pytest.mark.parametrize(
    ("fields", "why"),
    [
        ({"n": 2, "temperature": 0.7}, "n > 1"),
        ({"echo": True}, "echo"),
        ({"seed": 7, "temperature": 0.7}, "a seed"),
        # On completions a vLLM extension, honoured as on chat.
        ({"response_format": LONG_JSON}, "structured output"),
        ({"stop": ["\n\n"]}, "stop strings"),
        ({"frequency_penalty": 0.5}, "penalty"),
    ],
)
def test_requests_that_cannot_move_stay(
    sync_client: OpenAI, fields: dict[str, Any], why: str
) -> None:
    body: dict[str, Any] = {"max_tokens": 24, "temperature": 0, **fields}
    # extra_body: response_format is not among the SDK's completions arguments.
    completion = sync_client.completions.create(
        model=MODEL, prompt=STORY, extra_headers=MOVE, extra_body=body
    )
    info = completion.model_extra["specgate"]  # type: ignore[index]
    assert info.get("segments") is None, (why, info)
    assert completion.usage is not None and completion.usage.completion_tokens > 12
