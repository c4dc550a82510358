"""A remote pool (`RemoteEngine`) against in-process fake vLLM servers."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack

import pytest

from app.engine.generation import GenerationRequest, GenerationStep, SamplingOptions
from app.engine.remote.remote_engine import RemoteEngine
from app.engine.start import remote_config
from app.errors import EngineFailureError, EngineUnavailableError, InvalidRequestError
from app.settings import Settings
from tests.fake_upstream import FakeUpstream, mock_transport

EngineFactory = Callable[..., Awaitable[RemoteEngine]]


@pytest.fixture
async def make_engine() -> AsyncIterator[EngineFactory]:
    async with AsyncExitStack() as stack:

        async def factory(
            *upstreams: FakeUpstream, attempts: int = 2, interval: float = 3600
        ) -> RemoteEngine:
            settings = Settings(
                plain_upstreams=",".join(u.base_url for u in upstreams),  # type: ignore[arg-type]
                upstream_attempts=attempts,
                upstream_health_interval=interval,
            )
            engine = await RemoteEngine.start(
                remote_config(settings, "plain"), "plain", mock_transport(*upstreams)
            )
            stack.push_async_callback(engine.aclose)
            return engine

        yield factory


def request(prompt: str = "a b", max_tokens: int | None = None) -> GenerationRequest:
    return GenerationRequest("req", prompt, SamplingOptions(max_tokens=max_tokens))


async def collect(engine: RemoteEngine, req: GenerationRequest | None = None) -> str:
    steps = [step async for step in engine.generate(req or request())]
    return "".join(delta.text for step in steps for delta in step.choices)


async def test_a_request_streams_through_one_upstream(make_engine: EngineFactory) -> None:
    upstream = FakeUpstream("a")
    engine = await make_engine(upstream)
    steps: list[GenerationStep] = [step async for step in engine.generate(request())]
    assert "".join(d.text for s in steps for d in s.choices) == " one two three"
    assert sum(d.new_tokens for s in steps for d in s.choices) == 3
    assert steps[-1].choices[-1].finish_reason == "stop"
    assert upstream.bodies[0]["model"] == "upstream-model"  # discovered at /v1/models
    assert engine.unfinished_requests() == 0


async def test_requests_go_to_the_upstream_with_the_fewest_outstanding(
    make_engine: EngineFactory,
) -> None:
    a, b = FakeUpstream("a"), FakeUpstream("b")
    a.hold, b.hold = asyncio.Event(), asyncio.Event()
    engine = await make_engine(a, b)
    streams: list[AsyncGenerator[GenerationStep, None]] = []

    async def start_one() -> tuple[int, int]:
        """Open a stream and keep it open; say how many requests each upstream has had."""
        stream = engine.generate(request())
        await anext(stream)
        streams.append(stream)
        return len(a.bodies), len(b.bodies)

    async def finish(stream: AsyncGenerator[GenerationStep, None], upstream: FakeUpstream) -> None:
        assert upstream.hold is not None
        hold, upstream.hold = upstream.hold, asyncio.Event()  # later streams are held again
        hold.set()
        async for _ in stream:
            pass

    assert await start_one() == (1, 0)
    assert await start_one() == (1, 1)
    await finish(streams[1], b)  # outstanding: a 1, b 0
    # The fewest outstanding, not turns: b again, though a was picked longer ago.
    assert await start_one() == (1, 2)
    await finish(streams[0], a)  # outstanding: a 0, b 1
    assert await start_one() == (2, 2)
    # A tie (one each) goes to the upstream picked longest ago: b.
    assert await start_one() == (2, 3)
    assert engine.unfinished_requests() == 3
    for stream in streams:
        await stream.aclose()
    assert engine.unfinished_requests() == 0


async def test_a_refused_connection_is_retried_elsewhere_and_ejects_the_upstream(
    make_engine: EngineFactory,
) -> None:
    a, b = FakeUpstream("a"), FakeUpstream("b")
    engine = await make_engine(a, b)
    a.reachable = False  # dies after the start-up health check
    assert await collect(engine) == " one two three"
    assert len(b.bodies) == 1
    status = engine.upstream_status()
    assert status[b.base_url] == "ok"
    assert "ConnectError" in status[a.base_url]
    # Ejected: the next request goes straight to b.
    await collect(engine)
    assert len(b.bodies) == 2
    # A passing health check admits a back.
    a.reachable = True
    await engine.pool.check_all()
    assert engine.upstream_status()[a.base_url] == "ok"


async def test_a_5xx_before_the_first_byte_is_retried_without_ejecting(
    make_engine: EngineFactory,
) -> None:
    a, b = FakeUpstream("a"), FakeUpstream("b")
    a.status = 500
    a.error = {"message": "engine hiccup", "type": "InternalServerError", "code": 500}
    engine = await make_engine(a, b)
    assert await collect(engine) == " one two three"
    assert (len(a.bodies), len(b.bodies)) == (1, 1)
    assert engine.upstream_status()[a.base_url] == "ok"


async def test_a_stream_broken_before_its_first_byte_is_retried(
    make_engine: EngineFactory,
) -> None:
    a, b = FakeUpstream("a"), FakeUpstream("b")
    a.break_after_events = 0
    engine = await make_engine(a, b)
    assert await collect(engine) == " one two three"
    assert (len(a.bodies), len(b.bodies)) == (1, 1)


async def test_retries_stop_after_the_configured_attempts(make_engine: EngineFactory) -> None:
    upstreams = [FakeUpstream(name) for name in "abc"]
    for upstream in upstreams:
        upstream.status = 503
        upstream.error = {"message": "overloaded", "code": 503}
    engine = await make_engine(*upstreams, attempts=2)
    with pytest.raises(EngineFailureError, match="overloaded"):
        await collect(engine)
    assert sum(len(upstream.bodies) for upstream in upstreams) == 2
    assert engine.unfinished_requests() == 0


async def test_nothing_is_retried_after_the_first_byte(make_engine: EngineFactory) -> None:
    a, b = FakeUpstream("a"), FakeUpstream("b")
    a.break_after_events = 1  # the first token arrives, then the connection drops
    engine = await make_engine(a, b)
    received: list[str] = []
    with pytest.raises(EngineFailureError, match="mid-stream"):
        async for step in engine.generate(request()):
            received += [delta.text for delta in step.choices]
    assert received == [" one"]
    assert b.bodies == []
    assert "RemoteProtocolError" in engine.upstream_status()[a.base_url]


async def test_a_4xx_is_the_requests_fault_and_is_not_retried(make_engine: EngineFactory) -> None:
    a, b = FakeUpstream("a"), FakeUpstream("b")
    a.status = b.status = 400
    a.error = b.error = {"message": "max_tokens is too large", "param": "max_tokens", "code": 400}
    engine = await make_engine(a, b)
    with pytest.raises(InvalidRequestError) as refused:
        await collect(engine)
    assert (refused.value.message, refused.value.param) == ("max_tokens is too large", "max_tokens")
    assert len(a.bodies) + len(b.bodies) == 1
    assert engine.upstream_status() == {a.base_url: "ok", b.base_url: "ok"}


async def test_no_healthy_upstream_is_unavailable(make_engine: EngineFactory) -> None:
    a, b = FakeUpstream("a"), FakeUpstream("b")
    a.healthy, b.reachable = False, False
    engine = await make_engine(a, b)
    with pytest.raises(EngineUnavailableError) as unavailable:
        await collect(engine)
    assert unavailable.value.status_code == 503
    assert a.base_url in unavailable.value.message and b.base_url in unavailable.value.message
    with pytest.raises(EngineUnavailableError):
        await engine.check_health()
    assert a.bodies == b.bodies == []


async def test_the_health_checker_ejects_and_readmits_in_the_background(
    make_engine: EngineFactory,
) -> None:
    a = FakeUpstream("a")
    engine = await make_engine(a, interval=0.01)

    async def until(healthy: bool) -> None:
        while (engine.upstream_status()[a.base_url] == "ok") != healthy:
            await asyncio.sleep(0.01)

    a.healthy = False
    await asyncio.wait_for(until(False), 5)
    assert "500" in engine.upstream_status()[a.base_url]
    a.healthy = True
    await asyncio.wait_for(until(True), 5)
    await engine.check_health()


async def test_a_restarted_upstream_is_asked_for_its_model_again(
    make_engine: EngineFactory,
) -> None:
    a = FakeUpstream("a")
    engine = await make_engine(a)
    a.reachable = False
    await engine.pool.check_all()
    a.reachable, a.model = True, "renamed-model"
    await engine.pool.check_all()
    await collect(engine)
    assert a.bodies[-1]["model"] == "renamed-model"


async def test_closing_the_stream_early_closes_the_upstream_stream(
    make_engine: EngineFactory,
) -> None:
    a = FakeUpstream("a")
    a.hold = asyncio.Event()
    engine = await make_engine(a)
    stream = engine.generate(request())
    await anext(stream)
    assert a.open_streams == 1 and engine.unfinished_requests() == 1
    await stream.aclose()
    # The connection is gone: vLLM aborts a request whose client leaves.
    assert a.open_streams == 0 and a.completed_streams == 0
    assert engine.unfinished_requests() == 0


async def test_a_stream_cut_short_without_an_error_is_a_failure(
    make_engine: EngineFactory,
) -> None:
    a = FakeUpstream("a")
    engine = await make_engine(a)
    a.events = lambda body, chat: FakeUpstream("a").events(body, chat)[:2]  # type: ignore[method-assign]
    with pytest.raises(EngineFailureError, match="early"):
        await collect(engine)
    assert engine.upstream_status()[a.base_url] != "ok"


async def test_a_prediction_is_refused_by_name_and_never_sent(make_engine: EngineFactory) -> None:
    upstream = FakeUpstream("a")
    engine = await make_engine(upstream)
    predicted = GenerationRequest("req", "a b", SamplingOptions(), prediction="one two three")
    with pytest.raises(InvalidRequestError) as refused:
        await collect(engine, predicted)
    assert refused.value.param == "prediction"
    assert "remote upstreams" in refused.value.message
    assert upstream.bodies == []  # vLLM's server would have dropped it without a word
