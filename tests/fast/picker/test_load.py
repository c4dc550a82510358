"""What the picker reads of /metrics: vLLM's names and specgate's own (from the real app)."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from app.drafting.length_rule import expected_tokens
from app.picker.endpoints import Endpoint
from app.picker.load import EndpointLoad, LoadBook, parse_metrics, position_acceptance
from app.picker.scraper import Scraper
from tests.conftest import ClientFactory

VLLM = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
vllm:num_requests_running{engine="1",model_name="m"} 2.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 4.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.5
"""


def test_vllm_metrics() -> None:
    load = parse_metrics(VLLM, max_draft=5)
    assert load == EndpointLoad(running=5, waiting=4, kv_use=0.5)


def test_text_that_is_not_prometheus_is_refused() -> None:
    with pytest.raises(ValueError):
        parse_metrics("<html>not metrics</html>\n", max_draft=5)


@pytest.mark.parametrize("acceptance", [0.0, 0.3, 0.7, 0.95])
def test_position_acceptance_inverts_the_tokens_a_draft_yields(acceptance: float) -> None:
    assert position_acceptance(expected_tokens(acceptance, 5), 5) == pytest.approx(
        acceptance, abs=0.01
    )


async def test_specgate_metrics_from_the_real_app(make_client: ClientFactory) -> None:
    # Slow tokens, so requests are still running when /metrics is read.
    client, _ = await make_client(seconds_per_token=0.05)
    body = {"model": "SmolLM2-135M-Instruct", "prompt": "one two three", "max_tokens": 40}
    running = [asyncio.create_task(client.post("/v1/completions", json=body)) for _ in range(3)]
    async with asyncio.timeout(10):
        while (during := await _load(client)).running < 3:
            await asyncio.sleep(0.02)
    assert during.running == 3 and during.waiting == 0
    await asyncio.gather(*running)
    assert (await _load(client)).running == 0
    # The speculative engine's drafts, by class, as a per-position acceptance.
    short = {**body, "max_tokens": 8}
    drafted = await client.post("/v1/completions", json=short, headers={"X-Speculative": "on"})
    assert drafted.status_code == 200
    accepted = (await _load(client)).acceptance
    assert accepted and all(0.0 <= rate <= 0.99 for rate in accepted.values())


async def _load(client: httpx.AsyncClient) -> EndpointLoad:
    return parse_metrics((await client.get("/metrics")).text, max_draft=5)


def test_the_book_counts_picks_until_a_scrape_that_saw_them() -> None:
    book = LoadBook(["a"])
    assert book.load("a") is None and not book.ready("a")
    book.record("a", EndpointLoad(running=2), scrape_began=0.0)
    book.picked("a", 1.0)
    book.picked("a", 2.0)
    assert book.load("a") == EndpointLoad(running=4)
    book.record("a", EndpointLoad(running=3), scrape_began=1.5)  # saw the first pick only
    assert book.load("a") == EndpointLoad(running=4)
    book.failed("a")
    assert not book.ready("a")


async def test_the_scraper_marks_an_endpoint_down_and_up_again() -> None:
    answers = iter(
        [httpx.Response(200, text=VLLM), httpx.Response(500), httpx.Response(200, text=VLLM)]
    )

    def metrics(request: httpx.Request) -> httpx.Response:
        assert request.url == "http://10.0.0.1:8000/metrics"
        return next(answers)

    endpoint = Endpoint(address="10.0.0.1:8000", kind="vllm")
    book = LoadBook([endpoint.address])
    async with httpx.AsyncClient(transport=httpx.MockTransport(metrics)) as client:
        scraper = Scraper(lambda: [endpoint], book, client, interval_s=0.01)
        seen = []
        for _ in range(3):
            await scraper.scrape_all()
            seen.append(book.ready(endpoint.address))
    assert seen == [True, False, True]
    assert book.load(endpoint.address) == EndpointLoad(running=5, waiting=4, kv_use=0.5)


async def test_the_scraper_is_ready_after_one_round() -> None:
    endpoint = Endpoint(address="10.0.0.1:8000", kind="vllm")
    transport = httpx.MockTransport(lambda request: httpx.Response(200, text=VLLM))
    async with httpx.AsyncClient(transport=transport) as client:
        scraper = Scraper(lambda: [endpoint], LoadBook([endpoint.address]), client, interval_s=0.01)
        task = asyncio.create_task(scraper.run())
        await asyncio.wait_for(scraper.first_round.wait(), 5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
