"""The gateway's engine over Ray Serve replicas (app/serve_ray/handle.py), with a stand-in
deployment handle: retried before the first token, an error after, the gateway's own errors
passed through, the replica's request cancelled when the stream closes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from ray.exceptions import ActorDiedError

from app.engine.generation import ChoiceDelta, GenerationRequest, GenerationStep, SamplingOptions
from app.errors import EngineFailureError, EngineUnavailableError, InvalidRequestError
from app.serve_ray import handle as serve_handle
from app.serve_ray.handle import HandleEngine
from app.serve_ray.replica import ReplicaFacts

FACTS = ReplicaFacts(256, True, True, True, False)


def step(text: str) -> GenerationStep:
    return GenerationStep(1, [ChoiceDelta(0, text, 1)])


class Stream:
    """One streamed call: yields `steps`, then raises `error` if set."""

    def __init__(self, steps: list[GenerationStep], error: BaseException | None) -> None:
        self._steps, self._error = steps, error
        self.cancelled = False

    def __aiter__(self) -> AsyncIterator[GenerationStep]:
        return self._run()

    async def _run(self) -> AsyncIterator[GenerationStep]:
        for found in self._steps:
            yield found
        if self._error is not None:
            raise self._error

    def cancel(self) -> None:
        self.cancelled = True


class Handle:
    """A deployment handle whose streamed `generate` calls play `plays` in turn."""

    app_name = "specgate"
    deployment_name = "engine"

    def __init__(self, plays: list[tuple[list[GenerationStep], BaseException | None]]) -> None:
        self._plays = plays
        self.streams: list[Stream] = []
        self.generate = self

    def options(self, stream: bool = False) -> Handle:
        return self

    def remote(self, request: GenerationRequest) -> Stream:
        made = Stream(*self._plays[len(self.streams)])
        self.streams.append(made)
        return made


def request() -> GenerationRequest:
    return GenerationRequest("r1", "hello", SamplingOptions())


@pytest.fixture(autouse=True)
def no_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(serve_handle, "RETRY_BACKOFF_S", 0.0)


async def collect(engine: HandleEngine) -> list[str]:
    return [s.choices[0].text async for s in engine.generate(request())]


async def test_a_replica_that_dies_before_its_first_token_leaves_the_request_to_another() -> None:
    handle = Handle([([], ActorDiedError()), ([step("a"), step("b")], None)])
    engine = HandleEngine(handle, FACTS, attempts=3)
    assert await collect(engine) == ["a", "b"]
    assert len(handle.streams) == 2
    assert all(s.cancelled for s in handle.streams)
    assert engine.unfinished_requests() == 0


async def test_a_replica_that_dies_part_way_ends_the_stream_with_an_error() -> None:
    handle = Handle([([step("a")], ActorDiedError()), ([step("never")], None)])
    engine = HandleEngine(handle, FACTS, attempts=3)
    got: list[str] = []
    with pytest.raises(EngineFailureError):
        async for found in engine.generate(request()):
            got.append(found.choices[0].text)
    assert got == ["a"] and len(handle.streams) == 1  # never sent twice


async def test_when_every_try_fails_the_engine_is_unavailable() -> None:
    handle = Handle([([], ActorDiedError()), ([], ActorDiedError())])
    engine = HandleEngine(handle, FACTS, attempts=2)
    with pytest.raises(EngineUnavailableError):
        await collect(engine)


async def test_the_gateways_own_errors_pass_through_unretried() -> None:
    bad = InvalidRequestError("too long", param="max_tokens", code="context_length_exceeded")
    handle = Handle([([], bad), ([step("x")], None)])
    engine = HandleEngine(handle, FACTS, attempts=3)
    with pytest.raises(InvalidRequestError) as raised:
        await collect(engine)
    assert raised.value.param == "max_tokens" and len(handle.streams) == 1


async def test_closing_the_stream_early_cancels_the_replicas_request() -> None:
    handle = Handle([([step("a"), step("b"), step("c")], None)])
    engine = HandleEngine(handle, FACTS, attempts=3)
    stream = engine.generate(request())
    first = await anext(stream)  # type: ignore[call-overload]
    assert first.choices[0].text == "a"
    await stream.aclose()  # type: ignore[attr-defined]
    assert handle.streams[0].cancelled
    assert engine.unfinished_requests() == 0


def test_refusals_follow_the_replicas_facts() -> None:
    engine = HandleEngine(Handle([]), FACTS, attempts=1)
    drafting = engine.servable(SamplingOptions(min_p=0.1))
    assert drafting is not None and "min_p" in drafting.fields
    assert engine.servable(SamplingOptions(min_p=0.1), draft_length=0) is None
    plain: Any = ReplicaFacts(256, True, False, True, False)
    assert HandleEngine(Handle([]), plain, 1).servable(SamplingOptions(min_p=0.1)) is None
