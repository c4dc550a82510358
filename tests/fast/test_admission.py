"""Admission control and the dead-engine fallback, over the fake engines."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from app.admission import Admission
from app.errors import OverloadedError, QueueTimeoutError
from app.settings import Settings
from tests.conftest import MODEL, ClientFactory
from tests.openai_schema import ERROR, violations

CHAT = "/v1/chat/completions"
BODY = {"model": MODEL, "messages": [{"role": "user", "content": "a b c"}], "max_tokens": 8}


async def test_past_the_queue_requests_are_refused_at_once() -> None:
    admission = Admission("plain", max_running=1, max_queued=1, queue_timeout=10)
    await admission.enter()
    queued = asyncio.create_task(admission.enter())
    await asyncio.sleep(0)
    assert admission.queued() == 1
    with pytest.raises(OverloadedError) as refused:
        await admission.enter()
    assert refused.value.headers() == {"Retry-After": "1"}
    admission.leave()
    await asyncio.wait_for(queued, 1)  # the queued request got the freed slot
    assert admission.queued() == 0


async def test_a_waiter_that_gives_up_frees_its_place() -> None:
    admission = Admission("plain", max_running=1, max_queued=2, queue_timeout=10)
    await admission.enter()
    gone = asyncio.create_task(admission.enter())
    second = asyncio.create_task(admission.enter())
    await asyncio.sleep(0)
    gone.cancel()  # its client went away while queued
    admission.leave()  # the freed slot skips it and goes to the next in line
    await asyncio.wait_for(second, 1)
    assert gone.cancelled() and admission.queued() == 0 and admission.running == 1
    admission.leave()
    assert admission.running == 0


async def test_a_request_queued_too_long_gets_a_503() -> None:
    admission = Admission("plain", max_running=1, max_queued=4, queue_timeout=0.05)
    await admission.enter()
    with pytest.raises(QueueTimeoutError):
        await admission.enter()
    assert admission.queued() == 0


async def test_overload_is_a_429_with_retry_after(make_client: ClientFactory) -> None:
    settings = Settings(routing_exploration=0, max_running_requests=1, max_queued_requests=0)
    client, engines = await make_client(settings, seconds_per_token=0.02)
    headers = {"X-Speculative": "off"}

    async def late() -> httpx.Response:
        await asyncio.sleep(0.05)  # while the first holds the only slot
        return await client.post(CHAT, json=BODY, headers=headers)

    first, second = await asyncio.gather(client.post(CHAT, json=BODY, headers=headers), late())
    assert first.status_code == 200
    assert second.status_code == 429
    assert second.headers["retry-after"] == "1"
    assert violations(second.json(), ERROR) == []
    # The other engine has its own limits.
    other = await client.post(CHAT, json=BODY, headers={"X-Speculative": "on"})
    assert other.status_code == 200
    metrics = (await client.get("/metrics")).text
    assert 'specgate_rejected_requests_total{reason="at_capacity",route="plain"} 1.0' in metrics
    # Nothing leaked: the slot is free again.
    assert (await client.post(CHAT, json=BODY, headers=headers)).status_code == 200
    assert engines["plain"].unfinished_requests() == 0


async def test_a_dead_engine_shows_in_health_and_auto_traffic_falls_back(
    make_client: ClientFactory,
) -> None:
    client, engines = await make_client()
    engines["plain"].alive = False
    health = await client.get("/health")
    assert health.status_code == 503
    assert health.json()["engines"] == {
        "speculative": "ok",
        "plain": "the plain engine has stopped",
    }
    # Open-ended text would go to the plain engine; it falls back to the survivor.
    response = await client.post(CHAT, json=BODY)
    assert response.status_code == 200
    assert response.headers["x-specgate-route"] == "speculative"
    assert response.headers["x-specgate-reason"] == "fallback: the plain engine is down"
    # A client that pinned the dead engine gets a clean 503.
    pinned = await client.post(CHAT, json=BODY, headers={"X-Speculative": "off"})
    assert pinned.status_code == 503
    assert violations(pinned.json(), ERROR) == []
    # The speculative engine's own traffic is untouched.
    forced = await client.post(CHAT, json=BODY, headers={"X-Speculative": "on"})
    assert forced.status_code == 200


@pytest.mark.parametrize("log_requests", [False, True])
async def test_prompts_and_outputs_are_logged_only_when_asked(
    make_client: ClientFactory, caplog: pytest.LogCaptureFixture, log_requests: bool
) -> None:
    client, _ = await make_client(Settings(routing_exploration=0, log_requests=log_requests))
    body = {**BODY, "messages": [{"role": "user", "content": "secret-marker-41"}]}
    with caplog.at_level("DEBUG"):
        assert (await client.post(CHAT, json=body)).status_code == 200
    assert ("secret-marker-41" in caplog.text) is log_requests
