"""The gateway's HTTP answers when both routes are remote pools of (fake) vLLM servers."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from typing import Any

import httpx
import pytest

from app.engine.remote import RemoteEngine
from app.main import create_app
from app.settings import Settings
from tests.conftest import MODEL
from tests.fake_upstream import FakeUpstream, mock_transport

CHAT = "/v1/chat/completions"


class Site:
    def __init__(self) -> None:
        self.speculative = FakeUpstream("spec-a")
        self.plain = FakeUpstream("plain-a")
        self.client: httpx.AsyncClient


@pytest.fixture
async def site() -> AsyncIterator[Site]:
    site = Site()
    settings = Settings(
        speculative_upstreams=site.speculative.base_url,  # type: ignore[arg-type]
        plain_upstreams=site.plain.base_url,  # type: ignore[arg-type]
        routing_exploration=0,
    )
    transport = mock_transport(site.speculative, site.plain)
    async with AsyncExitStack() as stack:
        engines = {}
        for route in ("speculative", "plain"):
            engine = await RemoteEngine.start(settings, route, transport)  # type: ignore[arg-type]
            stack.push_async_callback(engine.aclose)
            engines[route] = engine
        app = create_app(settings, engines)  # type: ignore[arg-type]
        await stack.enter_async_context(app.router.lifespan_context(app))
        site.client = await stack.enter_async_context(
            httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://specgate")
        )
        yield site


def chat(**overrides: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], **overrides}


def sse_payloads(text: str) -> list[str]:
    return [line.removeprefix("data: ") for line in text.splitlines() if line.startswith("data:")]


async def test_each_route_reaches_its_own_pool(site: Site) -> None:
    site.speculative.spec_metrics = {"num_spec_steps": 2, "num_draft_tokens": 10,
                                     "num_accepted_draft_tokens": 5}  # fmt: skip
    for header, upstream in (("on", site.speculative), ("off", site.plain)):
        response = await site.client.post(CHAT, json=chat(), headers={"X-Speculative": header})
        assert response.status_code == 200
        assert response.json()["choices"][0]["message"]["content"] == " one two three"
        assert len(upstream.bodies) == 1
    usage = response.json()["usage"]
    assert usage == {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}
    spec = (await site.client.post(CHAT, json=chat(), headers={"X-Speculative": "on"})).json()
    assert spec["usage"]["speculative_decoding"] == {
        "drafts": 2, "draft_tokens": 10, "accepted_tokens": 5, "acceptance_rate": 0.5,
    }  # fmt: skip


async def test_a_speculative_upstream_without_figures_reports_none(site: Site) -> None:
    response = await site.client.post(CHAT, json=chat(), headers={"X-Speculative": "on"})
    assert response.headers["x-specgate-route"] == "speculative"
    assert "speculative_decoding" not in response.json()["usage"]


async def test_an_upstream_failing_mid_stream_ends_the_stream_with_an_error(site: Site) -> None:
    site.plain.break_after_events = 2  # the role chunk and one token, then the connection drops
    response = await site.client.post(
        CHAT, json=chat(stream=True), headers={"X-Speculative": "off"}
    )
    assert response.status_code == 200
    payloads = sse_payloads(response.text)
    assert payloads[-1] == "[DONE]"
    error = json.loads(payloads[-2])["error"]
    assert error["type"] == "server_error" and "mid-stream" in error["message"]
    # The upstream is out of the pool now: the route answers 503 at once.
    again = await site.client.post(CHAT, json=chat(), headers={"X-Speculative": "off"})
    assert again.status_code == 503
    assert again.json()["error"]["type"] == "service_unavailable"
    health = await site.client.get("/health")
    assert health.status_code == 503
    assert health.json()["engines"]["speculative"] == "ok"
    assert "RemoteProtocolError" in health.json()["upstreams"]["plain"][site.plain.base_url]
    # The other route keeps serving.
    spec = await site.client.post(CHAT, json=chat(), headers={"X-Speculative": "on"})
    assert spec.status_code == 200


async def test_an_upstream_refusal_reaches_the_client_as_a_400(site: Site) -> None:
    site.plain.status = 400
    site.plain.error = {"message": "context too long", "param": "messages", "code": 400}
    response = await site.client.post(CHAT, json=chat(), headers={"X-Speculative": "off"})
    assert response.status_code == 400
    assert response.json()["error"] == {
        "message": "context too long",
        "type": "invalid_request_error",
        "param": "messages",
        "code": None,
    }


async def test_health_lists_every_upstream(site: Site) -> None:
    health = await site.client.get("/health")
    assert health.status_code == 200
    assert health.json()["upstreams"] == {
        "speculative": {site.speculative.base_url: "ok"},
        "plain": {site.plain.base_url: "ok"},
    }


async def test_logprobs_on_a_remote_route_are_refused_by_name(site: Site) -> None:
    response = await site.client.post(CHAT, json=chat(logprobs=True))
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "logprobs"
    echo = {"model": MODEL, "prompt": "a", "echo": True}
    response = await site.client.post("/v1/completions", json=echo)
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "echo"
