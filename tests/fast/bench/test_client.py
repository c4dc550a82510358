"""The benchmark client reads server-sent events as SSE frames them, so a text holding a
character that str.splitlines takes for a line end (vLLM sends them unescaped) is measured
whole, not lost to a JSONDecodeError."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import httpx

from bench.client import Arm, Prompt, measure

TEXTS = [" one\u2028two", " three\u2029four", " five\x85six"]


def events() -> bytes:
    chunks = [
        {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]}
        for text in TEXTS
    ]
    chunks[-1]["choices"][0]["finish_reason"] = "length"
    usage = {"prompt_tokens": 4, "completion_tokens": 3, "total_tokens": 7}
    chunks.append({"choices": [], "usage": usage})
    # Raw UTF-8, as pydantic's JSON (vLLM's server) writes it.
    body = "".join(f"data: {json.dumps(c, ensure_ascii=False)}\n\n" for c in chunks)
    return (body + "data: [DONE]\n\n").encode()


async def in_pieces(data: bytes, size: int) -> AsyncIterator[bytes]:
    for start in range(0, len(data), size):  # pieces that split characters and lines
        yield data[start : start + size]


async def test_a_unicode_line_end_in_a_text_does_not_break_the_measurement() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=in_pieces(events(), 7))

    arm = Arm("vllm-plain", "vllm", None)
    prompt = Prompt("p", "creative", "chat", {"messages": [{"role": "user", "content": "hi"}]})
    transport = httpx.MockTransport(answer)
    async with httpx.AsyncClient(transport=transport, base_url="http://bench") as client:
        sample = await measure(client, arm, prompt, {"model": "m", **prompt.fields}, 1, 0)
    assert sample.error is None and sample.ok
    assert sample.completion_tokens == 3
    assert sample.content_chunks == len(TEXTS)
    assert sample.finish_reason == "length"
