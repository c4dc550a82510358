"""SSE framing over the fake engine."""

from __future__ import annotations

import json
from typing import Any

import httpx

from tests.conftest import MODEL, ClientFactory
from tests.metrics_text import sample
from tests.scripted_site import scripted_site

CHAT = "/v1/chat/completions"


async def sse_payloads(response: httpx.Response) -> list[str]:
    """The data fields, checking each event is exactly one `data:` line and a blank line."""
    text = (await response.aread()).decode()
    events = [event for event in text.split("\n\n") if event and not event.startswith(":")]
    assert text.endswith("\n\n")
    payloads = []
    for event in events:
        assert event.startswith("data: "), event
        assert "\n" not in event, event
        payloads.append(event.removeprefix("data: "))
    return payloads


def stream_body(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "alpha beta gamma"}],
        "max_tokens": 5,
        "stream": True,
    }
    body.update(overrides)
    return body


async def test_chat_stream_framing(client: httpx.AsyncClient) -> None:
    async with client.stream("POST", CHAT, json=stream_body()) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["x-specgate-route"] == "plain"
        payloads = await sse_payloads(response)
    assert payloads[-1] == "[DONE]"
    chunks = [json.loads(p) for p in payloads[:-1]]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert len({c["id"] for c in chunks}) == 1
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": " alpha"}
    assert all("role" not in c["choices"][0]["delta"] for c in chunks[1:])
    assert "".join(c["choices"][0]["delta"]["content"] for c in chunks) == (
        " alpha beta gamma alpha beta"
    )
    assert [c["choices"][0]["finish_reason"] for c in chunks] == [None] * 4 + ["length"]
    assert all("usage" not in c for c in chunks)
    # The end of the stream says which engine served it, and why.
    assert chunks[-1]["specgate"]["route"] == "plain"
    assert "specgate" not in chunks[0]


async def test_include_usage_adds_a_final_usage_chunk(client: httpx.AsyncClient) -> None:
    body = stream_body(stream_options={"include_usage": True})
    async with client.stream("POST", CHAT, json=body, headers={"X-Speculative": "on"}) as resp:
        chunks = [json.loads(p) for p in (await sse_payloads(resp))[:-1]]
    assert all(c["usage"] is None for c in chunks[:-1])
    final = chunks[-1]
    assert final["choices"] == []
    assert final["usage"]["prompt_tokens"] == 3
    assert final["usage"]["completion_tokens"] == 5
    assert final["usage"]["total_tokens"] == 8
    assert final["usage"]["speculative_decoding"]["draft_tokens"] == 10
    assert final["specgate"]["route"] == "speculative"


async def test_continuous_usage_stats_put_the_usage_so_far_on_every_chunk(
    client: httpx.AsyncClient,
) -> None:
    # vLLM's extension, on chat and completions alike; only with include_usage, as vLLM.
    both = {"include_usage": True, "continuous_usage_stats": True}
    for path, body in (
        (CHAT, stream_body(stream_options=both)),
        ("/v1/completions", {"model": MODEL, "prompt": "x y", "max_tokens": 5, "stream": True,
                             "stream_options": both}),
    ):  # fmt: skip
        async with client.stream("POST", path, json=body) as resp:
            chunks = [json.loads(p) for p in (await sse_payloads(resp))[:-1]]
        counts = [c["usage"]["completion_tokens"] for c in chunks]
        assert counts == sorted(counts) and counts[0] >= 1 and counts[-1] == 5, counts
        assert all(c["usage"]["total_tokens"] == c["usage"]["prompt_tokens"] + n
                   for c, n in zip(chunks, counts, strict=True))  # fmt: skip
        assert chunks[-1]["choices"] == []  # the final usage chunk still ends the stream
    alone = stream_body(stream_options={"continuous_usage_stats": True, "include_usage": False})
    async with client.stream("POST", CHAT, json=alone) as resp:
        chunks = [json.loads(p) for p in (await sse_payloads(resp))[:-1]]
    assert all("usage" not in c for c in chunks)


async def test_completion_stream(client: httpx.AsyncClient) -> None:
    body = {"model": MODEL, "prompt": "x y", "max_tokens": 3, "stream": True}
    async with client.stream("POST", "/v1/completions", json=body) as response:
        payloads = await sse_payloads(response)
    chunks = [json.loads(p) for p in payloads[:-1]]
    assert all(c["object"] == "text_completion" for c in chunks)
    assert "".join(c["choices"][0]["text"] for c in chunks) == " x y x"


async def test_errors_before_the_stream_are_http_errors(client: httpx.AsyncClient) -> None:
    async with client.stream("POST", CHAT, json=stream_body(max_tokens=1000)) as response:
        assert response.status_code == 400
        error = json.loads(await response.aread())["error"]
    assert error["code"] == "context_length_exceeded"


async def test_an_engine_failure_mid_stream_is_an_error_event_then_done(
    make_client: ClientFactory,
) -> None:
    client, engines = await make_client()
    body = stream_body(messages=[{"role": "user", "content": "a <fail-midstream> b"}])
    async with client.stream("POST", CHAT, json=body) as response:
        assert response.status_code == 200
        payloads = await sse_payloads(response)
    assert payloads[-1] == "[DONE]"
    error = json.loads(payloads[-2])["error"]
    assert error["type"] == "server_error"
    assert error["code"] == "engine_error"
    assert engines["plain"].unfinished_requests() == 0
    metrics = (await client.get("/metrics")).text
    labels = {"route": "plain", "workload_class": "open-ended", "endpoint": "chat"}
    assert sample(metrics, "specgate_requests_total", **labels, outcome="error") == 1


async def test_n_choices_stream_each_index(client: httpx.AsyncClient) -> None:
    async with client.stream("POST", CHAT, json=stream_body(n=2, max_tokens=2)) as response:
        chunks = [json.loads(p) for p in (await sse_payloads(response))[:-1]]
    by_index: dict[int, str] = {}
    for chunk in chunks:
        for choice in chunk["choices"]:
            by_index[choice["index"]] = by_index.get(choice["index"], "") + (
                choice["delta"].get("content") or ""
            )
    assert by_index == {0: " alpha beta", 1: " beta gamma"}


async def test_tokens_whose_text_is_held_back_still_stream_their_logprobs(
    client: httpx.AsyncClient,
) -> None:
    # " y x" may start the stop string, so those tokens' text waits for " z" to rule it out;
    # their logprobs still go out, one per token the usage counts.
    body = {
        "model": MODEL,
        "prompt": "x y z",
        "max_tokens": 6,
        "stream": True,
        "logprobs": 0,
        "stop": [" y x q"],
        "stream_options": {"include_usage": True},
    }
    async with client.stream("POST", "/v1/completions", json=body) as response:
        payloads = await sse_payloads(response)
    chunks = [json.loads(p) for p in payloads[:-1]]
    tokens = [t for c in chunks for choice in c["choices"] for t in choice["logprobs"]["tokens"]]
    assert "".join(c["choices"][0]["text"] for c in chunks if c["choices"]) == " x y z x y z"
    assert len(tokens) == chunks[-1]["usage"]["completion_tokens"] == 6


async def test_unicode_line_ends_in_content_do_not_split_an_event() -> None:
    # U+2028, U+2029 and U+0085 are line ends to str.splitlines (and to httpx's aiter_lines),
    # which JSON leaves unescaped; a client reading lines must still get whole events.
    said = [" one\u2028two", " three\u2029four", " five\x85six"]
    async with scripted_site(said) as site:
        body = stream_body(max_tokens=3)
        async with site.client.stream("POST", CHAT, json=body) as response:
            assert response.status_code == 200
            lines = [line async for line in response.aiter_lines()]
    payloads = [line.removeprefix("data: ") for line in lines if line.startswith("data: ")]
    assert payloads[-1] == "[DONE]"
    chunks = [json.loads(p) for p in payloads[:-1]]
    assert "".join(c["choices"][0]["delta"]["content"] for c in chunks) == "".join(said)
