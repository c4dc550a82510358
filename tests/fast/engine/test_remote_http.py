"""The gateway's HTTP answers when both routes are remote pools of (fake) vLLM servers."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import httpx
import pytest

from app.engine.fakes.scripted import FakeEngine
from app.engine.remote.remote_engine import RemoteEngine
from app.engine.start import remote_config
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
    async with remote_client(settings, mock_transport(site.speculative, site.plain)) as client:
        site.client = client
        yield site


@asynccontextmanager
async def remote_client(
    settings: Settings, transport: httpx.MockTransport
) -> AsyncIterator[httpx.AsyncClient]:
    """A client of an app whose two routes are remote pools behind `transport`."""
    async with AsyncExitStack() as stack:
        engines = {}
        for route in ("speculative", "plain"):
            engine = await RemoteEngine.start(remote_config(settings, route), route, transport)  # type: ignore[arg-type]
            stack.push_async_callback(engine.aclose)
            engines[route] = engine
        app = create_app(settings, engines)  # type: ignore[arg-type]
        await stack.enter_async_context(app.router.lifespan_context(app))
        yield await stack.enter_async_context(
            httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://specgate")
        )


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


async def test_a_prediction_on_remote_routes_is_refused_by_name_and_never_sent(site: Site) -> None:
    predicted = chat(prediction={"type": "content", "content": "one two three"})
    for headers in ({}, {"X-Speculative": "on"}):
        response = await site.client.post(CHAT, json=predicted, headers=headers)
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error["param"] == "prediction", error
        assert "prediction: not supported by remote upstreams" in error["message"], error
    # vLLM's servers would have dropped the field without a word.
    assert site.speculative.bodies == [] and site.plain.bodies == []


@pytest.fixture
async def mixed_site() -> AsyncIterator[tuple[httpx.AsyncClient, FakeEngine, FakeUpstream]]:
    """The plain route from a remote pool, the speculative one from an embedded engine."""
    plain = FakeUpstream("plain-a")
    settings = Settings(plain_upstreams=plain.base_url, routing_exploration=0)  # type: ignore[arg-type]
    async with AsyncExitStack() as stack:
        remote = await RemoteEngine.start(
            remote_config(settings, "plain"), "plain", mock_transport(plain)
        )  # type: ignore[arg-type]
        stack.push_async_callback(remote.aclose)
        embedded = FakeEngine("speculative")
        app = create_app(settings, {"speculative": embedded, "plain": remote})  # type: ignore[dict-item]
        await stack.enter_async_context(app.router.lifespan_context(app))
        client = await stack.enter_async_context(
            httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://specgate")
        )
        yield client, embedded, plain


async def test_a_request_goes_to_the_route_that_can_serve_it(
    mixed_site: tuple[httpx.AsyncClient, FakeEngine, FakeUpstream],
) -> None:
    client, embedded, plain = mixed_site
    # Open-ended chat goes plain when nothing stands in the way...
    assert (await client.post(CHAT, json=chat())).headers["x-specgate-route"] == "plain"
    # ...but the remote plain route cannot read logprobs back; the embedded engine can.
    response = await client.post(CHAT, json=chat(logprobs=True, top_logprobs=2))
    assert response.status_code == 200, response.text
    assert response.headers["x-specgate-route"] == "speculative"
    assert response.headers["x-specgate-reason"] == "logprobs: not supported by remote upstreams"
    assert len(plain.bodies) == 1 and len(embedded.requests) == 1
    # Pinned to the route that cannot serve it: a 400 that says where it can be served.
    pinned = await client.post(CHAT, json=chat(logprobs=True), headers={"X-Speculative": "off"})
    assert pinned.status_code == 400
    error = pinned.json()["error"]
    assert error["code"] == "unsupported_on_route" and error["param"] == "X-Speculative"
    assert "logprobs" in error["message"] and "X-Speculative: auto" in error["message"]
    # Neither route can serve logprobs with min_p: the remote refuses one, drafting the other.
    both = await client.post(CHAT, json=chat(logprobs=True, min_p=0.1, temperature=0.7))
    assert both.status_code == 400
    assert both.json()["error"]["param"] == "logprobs"


async def test_a_prediction_goes_to_the_embedded_route_past_a_remote_one(
    mixed_site: tuple[httpx.AsyncClient, FakeEngine, FakeUpstream],
) -> None:
    client, embedded, plain = mixed_site
    predicted = chat(prediction={"type": "content", "content": " one two three"}, temperature=0.9)
    response = await client.post(CHAT, json=predicted)
    assert response.status_code == 200, response.text
    assert response.headers["x-specgate-route"] == "speculative"
    assert [r.prediction for r in embedded.requests] == [" one two three"]
    # Pinned to the remote route: a 400 that names the prediction and where it is served.
    pinned = await client.post(CHAT, json=predicted, headers={"X-Speculative": "off"})
    assert pinned.status_code == 400, pinned.text
    error = pinned.json()["error"]
    assert error["code"] == "unsupported_on_route" and error["param"] == "X-Speculative"
    assert "prediction" in error["message"] and "X-Speculative: auto" in error["message"]
    assert plain.bodies == []


async def test_upstream_keys_per_pool_never_logged(
    tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("DEBUG")
    speculative, plain = FakeUpstream("spec-k"), FakeUpstream("plain-k")
    speculative.api_key, plain.api_key = "spec-secret", "plain-secret"
    key_file = tmp_path / "plain.key"
    key_file.write_text("\nplain-secret\n")
    settings = Settings(
        speculative_upstreams=speculative.base_url,  # type: ignore[arg-type]
        plain_upstreams=plain.base_url,  # type: ignore[arg-type]
        speculative_upstream_api_key="spec-secret",  # type: ignore[arg-type]
        plain_upstream_api_key_file=key_file,
        routing_exploration=0,
    )
    async with remote_client(settings, mock_transport(speculative, plain)) as client:
        for header in ("on", "off"):
            response = await client.post(CHAT, json=chat(), headers={"X-Speculative": header})
            assert response.status_code == 200, response.text
    assert len(speculative.bodies) == 1 and len(plain.bodies) == 1
    assert "secret" not in caplog.text and "secret" not in repr(settings)


async def test_a_wrong_upstream_key_says_so_in_health() -> None:
    upstream = FakeUpstream("plain-k")
    upstream.api_key = "right"
    settings = Settings(
        plain_upstreams=upstream.base_url,  # type: ignore[arg-type]
        plain_upstream_api_key="wrong",  # type: ignore[arg-type]
        routing_exploration=0,
    )
    engine = await RemoteEngine.start(
        remote_config(settings, "plain"), "plain", mock_transport(upstream)
    )  # type: ignore[arg-type]
    try:
        assert not engine.is_alive()
        assert "401" in engine.upstream_status()[upstream.base_url]
    finally:
        await engine.aclose()


async def test_the_tokenizer_helpers_are_forwarded_to_an_upstream(site: Site) -> None:
    answer = await site.client.post("/tokenize", json={"model": MODEL, "prompt": "one two"})
    assert answer.json()["tokens"] == [11, 12]
    forwarded = [*site.speculative.bodies, *site.plain.bodies]
    assert {"prompt": "one two", "continue_final_message": False,
            "return_token_strs": False} in forwarded  # fmt: skip
    answer = await site.client.post("/detokenize", json={"tokens": [11, 12]})
    assert answer.json() == {"prompt": " one two"}
    # An upstream without the endpoint: a 404 that names it, not a 500.
    missing = await site.client.get("/tokenizer_info")
    assert missing.status_code == 404 and "/tokenizer_info" in missing.json()["error"]["message"]
