"""Key limits over HTTP (fake engines): OpenAI's 429 bodies and headers, the x-ratelimit-*
headers on every response, and the real `openai` SDK's own retries getting every request
through a requests-per-window limit."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI
from openai import AsyncOpenAI

from app.tenants.rate_limits import RateLimiter
from tests.conftest import MODEL
from tests.fast.tenants.keyed_app import as_key, keyed_app
from tests.openai_schema import ERROR, violations

KEYS = """
[[key]]
name = "alpha"
key = "sk-alpha"
requests_per_minute = 3
tokens_per_minute = 1000

[[key]]
name = "beta"
key = "sk-beta"
tokens_per_day = 100

[[key]]
name = "open"
key = "sk-open"
"""
WINDOW = 1.5  # seconds: the minute, shortened for the test


@pytest.fixture
async def app(tmp_path: Path) -> AsyncIterator[FastAPI]:
    async with keyed_app(tmp_path, KEYS) as app:
        app.state.gateway.dispatcher.tenants.limiter = RateLimiter(window_seconds=WINDOW)
        yield app


def chat(max_tokens: int = 5) -> dict[str, object]:
    return {
        "model": MODEL,
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": max_tokens,
    }


async def test_over_the_request_rate_a_429_as_openai_words_it_with_its_headers(
    app: FastAPI,
) -> None:
    async with as_key(app, "sk-alpha") as alpha:
        answers = [await alpha.post("/v1/chat/completions", json=chat()) for _ in range(3)]
        assert [a.status_code for a in answers] == [200, 200, 200]
        assert [a.headers["x-ratelimit-remaining-requests"] for a in answers] == ["2", "1", "0"]
        assert answers[0].headers["x-ratelimit-limit-requests"] == "3"
        assert answers[0].headers["x-ratelimit-limit-tokens"] == "1000"
        assert answers[0].headers["x-ratelimit-reset-requests"].endswith(("ms", "s"))
        # Tokens: each reserved its prompt's estimate and max_tokens, and gave back the rest.
        assert int(answers[0].headers["x-ratelimit-remaining-tokens"]) < 1000
        refused = await alpha.post("/v1/chat/completions", json=chat())
        assert refused.status_code == 429
        body = refused.json()
        assert not violations(body, ERROR)
        assert body["error"]["code"] == "rate_limit_exceeded"
        assert body["error"]["type"] == "requests"
        assert "RPM" in body["error"]["message"] and "alpha" in body["error"]["message"]
        assert 1 <= int(refused.headers["retry-after"]) <= 2
        assert 0 < int(refused.headers["retry-after-ms"]) <= WINDOW * 1000
        assert refused.headers["x-ratelimit-remaining-requests"] == "0"
        # Streams carry the headers too, and one over the token rate is refused as tokens.
        await asyncio.sleep(WINDOW)
        stream = await alpha.post("/v1/chat/completions", json={**chat(), "stream": True})
        assert stream.status_code == 200 and "x-ratelimit-remaining-tokens" in stream.headers
        too_many = await alpha.post("/v1/chat/completions", json=chat(max_tokens=2000))
        assert too_many.status_code == 429 and too_many.json()["error"]["type"] == "tokens"
        assert too_many.headers["x-should-retry"] == "false"  # no wait makes 2000 fit in 1000


async def test_a_spent_budget_is_insufficient_quota_and_not_retried(app: FastAPI) -> None:
    async with as_key(app, "sk-beta") as beta:
        assert (
            await beta.post("/v1/chat/completions", json=chat(max_tokens=40))
        ).status_code == 200
        spent = await beta.post("/v1/chat/completions", json=chat(max_tokens=95))
        assert spent.status_code == 429
        assert spent.json()["error"]["code"] == "insufficient_quota"
        assert spent.json()["error"]["type"] == "insufficient_quota"
        assert spent.headers["x-should-retry"] == "false" and "retry-after" not in spent.headers
        # A key without limits is never refused, and gets no rate-limit headers.
    async with as_key(app, "sk-open") as other:
        answer = await other.post("/v1/chat/completions", json=chat(max_tokens=95))
        assert answer.status_code == 200 and "x-ratelimit-limit-requests" not in answer.headers


async def test_the_sdk_s_default_retries_get_twice_the_limit_through(app: FastAPI) -> None:
    http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app))
    sdk = AsyncOpenAI(base_url="http://specgate/v1", api_key="sk-alpha", http_client=http)
    async with http:
        # 6 requests against 3 per window, all at once: 3 pass, 3 wait for the window as
        # Retry-After tells them, and pass on a retry (the SDK retries a 429 twice).
        answers = await asyncio.gather(
            *(
                sdk.chat.completions.with_raw_response.create(
                    model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=5
                )
                for _ in range(6)
            )
        )
    assert all(raw.parse().choices[0].message.content for raw in answers)
    retried = [raw for raw in answers if raw.retries_taken > 0]
    assert len(retried) == 3
