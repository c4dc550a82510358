"""In-process stand-ins for vLLM's OpenAI server, behind an httpx.MockTransport.

Each `FakeUpstream` answers /health, /v1/models and both generation endpoints with the
chunks vLLM streams (a role chunk for chat, one chunk per token with continuous usage, the
finishing chunk, a usage chunk, [DONE]), and can be told to misbehave: refuse connections,
fail its health check, answer with an error status, break its stream after some events, or
hold a stream open until released.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx

PROMPT_TOKENS = 7


class FakeUpstream:
    def __init__(self, host: str, tokens: tuple[str, ...] = (" one", " two", " three")) -> None:
        self.host = host
        self.base_url = f"http://{host}:8000"
        self.tokens = tokens
        self.model = "upstream-model"
        self.reachable = True
        self.healthy = True
        self.status = 200
        self.error: dict[str, Any] = {"message": "bad request", "type": "BadRequestError",
                                      "param": None, "code": 400}  # fmt: skip
        self.break_after_events: int | None = None
        self.spec_metrics: dict[str, Any] | None = None
        self.hold: asyncio.Event | None = None
        self.bodies: list[dict[str, Any]] = []
        # As vLLM's --api-key: /v1 answers 401 without "Authorization: Bearer <key>".
        self.api_key: str | None = None
        self.open_streams = 0
        self.completed_streams = 0

    async def handle(self, request: httpx.Request) -> httpx.Response:
        if not self.reachable:
            raise httpx.ConnectError("connection refused", request=request)
        path = request.url.path
        if path == "/health":
            return httpx.Response(200 if self.healthy else 500)
        if self.api_key is not None and request.headers.get("authorization") != (
            f"Bearer {self.api_key}"
        ):
            return httpx.Response(401, json={"error": "Unauthorized"})
        if path == "/v1/models":
            card = {"id": self.model, "object": "model", "max_model_len": 2048}
            return httpx.Response(200, json={"object": "list", "data": [card]})
        if path in HELPERS:
            return HELPERS[path](self, request)
        body = json.loads(request.content)
        self.bodies.append(body)
        if self.status != 200:
            return httpx.Response(self.status, json={"error": self.error})
        events = self.events(body, chat=path == "/v1/chat/completions")
        return httpx.Response(
            200, headers={"content-type": "text/event-stream"}, stream=_EventStream(self, events)
        )

    def events(self, body: dict[str, Any], chat: bool) -> list[str]:
        n = body.get("n", 1)
        limit = body.get("max_tokens") or len(self.tokens)
        tokens = self.tokens[:limit]
        finish = "length" if limit < len(self.tokens) else "stop"
        chunks: list[dict[str, Any]] = []
        if chat:
            for index in range(n):
                role = {"index": index, "delta": {"role": "assistant", "content": ""}}
                chunks.append({"choices": [role], "usage": _usage(0)})
        for position, token in enumerate(tokens):
            for index in range(n):
                last = position == len(tokens) - 1
                choice: dict[str, Any] = {"index": index, "finish_reason": finish if last else None}
                if chat:
                    choice["delta"] = {"content": token}
                else:
                    choice["text"] = token
                chunks.append({"choices": [choice], "usage": _usage(position + 1)})
        final: dict[str, Any] = {"choices": [], "usage": _usage(n * len(tokens))}
        if self.spec_metrics is not None:
            final["metrics"] = {"speculative_decoding": self.spec_metrics}
        chunks.append(final)
        return [json.dumps(chunk) for chunk in chunks] + ["[DONE]"]


class _EventStream(httpx.AsyncByteStream):
    def __init__(self, upstream: FakeUpstream, events: list[str]) -> None:
        self.upstream = upstream
        self.events = events
        self.started = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        upstream = self.upstream
        self.started = True
        upstream.open_streams += 1
        for number, event in enumerate(self.events):
            if number == upstream.break_after_events:
                raise httpx.RemoteProtocolError("peer closed connection without a complete body")
            yield f"data: {event}\n\n".encode()
            if number == 0 and upstream.hold is not None:
                await upstream.hold.wait()
        upstream.completed_streams += 1

    async def aclose(self) -> None:
        if self.started:
            self.upstream.open_streams -= 1


def mock_transport(*upstreams: FakeUpstream) -> httpx.MockTransport:
    by_host = {upstream.host: upstream for upstream in upstreams}

    async def handle(request: httpx.Request) -> httpx.Response:
        return await by_host[request.url.host].handle(request)

    return httpx.MockTransport(handle)


def _usage(completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": PROMPT_TOKENS,
        "completion_tokens": completion_tokens,
        "total_tokens": PROMPT_TOKENS + completion_tokens,
    }


def _tokenize(upstream: FakeUpstream, request: httpx.Request) -> httpx.Response:
    upstream.bodies.append(json.loads(request.content))
    return httpx.Response(200, json={"count": 2, "max_model_len": 2048, "tokens": [11, 12]})


def _detokenize(upstream: FakeUpstream, request: httpx.Request) -> httpx.Response:
    tokens = json.loads(request.content)["tokens"]
    return httpx.Response(200, json={"prompt": "".join(upstream.tokens[: len(tokens)])})


def _no_tokenizer_info(upstream: FakeUpstream, request: httpx.Request) -> httpx.Response:
    # vLLM serves it only with --enable-tokenizer-info-endpoint.
    return httpx.Response(404, json={"detail": "Not Found"})


# vLLM's helper paths, beside /v1.
HELPERS = {
    "/tokenize": _tokenize,
    "/detokenize": _detokenize,
    "/tokenizer_info": _no_tokenizer_info,
}
