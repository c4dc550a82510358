"""Steps that pile up while their reader is busy are merged; nothing is lost or reordered."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import anyio
import pytest

from app.engine.coalesce import coalesced, merge_steps
from app.engine.generation import ChoiceDelta, GenerationStep, TokenLogprob
from app.errors import EngineFailureError
from app.vocabulary import SpecDecodeStats


def step(text: str, index: int = 0, finish: str | None = None) -> GenerationStep:
    delta = ChoiceDelta(index, text, 1, finish, token_ids=(len(text),))  # type: ignore[arg-type]
    return GenerationStep(prompt_tokens=3, choices=[delta])


async def burst(steps: list[GenerationStep], closed: list[bool]) -> AsyncIterator[GenerationStep]:
    """All the steps at once, as a socket read that brought many events."""
    try:
        for item in steps:
            yield item
    finally:
        closed.append(True)


async def paced(
    steps: list[GenerationStep], gate: asyncio.Queue[None]
) -> AsyncIterator[GenerationStep]:
    """One step each time the test opens the gate."""
    for item in steps:
        await gate.get()
        yield item


def test_merging_joins_text_sums_tokens_and_keeps_the_finish_per_choice() -> None:
    spec = SpecDecodeStats(drafts=2, draft_tokens=10, accepted_tokens=4)
    last = ChoiceDelta(0, "c", 1, "stop", draft_stats=spec, logprobs=(TokenLogprob("c", -0.1),))
    steps = [
        GenerationStep(3, [ChoiceDelta(0, "a", 1, logprobs=(TokenLogprob("a", -1.0),))], (1, 2, 3)),
        GenerationStep(3, [ChoiceDelta(1, "x", 2, token_ids=(7, 8))]),
        GenerationStep(3, [last, ChoiceDelta(1, "y", 1, "length", token_ids=(9,))]),
    ]
    merged = merge_steps(steps)
    assert merged.prompt_token_ids == (1, 2, 3)
    first, second = merged.choices
    assert (first.index, first.text, first.new_tokens, first.finish_reason) == (0, "ac", 2, "stop")
    assert first.draft_stats == spec
    assert [lp.token for lp in first.logprobs or ()] == ["a", "c"]
    assert (second.index, second.text, second.new_tokens) == (1, "xy", 3)
    assert (second.finish_reason, second.token_ids) == ("length", (7, 8, 9))


async def test_a_burst_reaches_a_busy_reader_as_one_step() -> None:
    closed: list[bool] = []
    steps = [step(" a"), step(" b"), step(" c", finish="length")]
    out = [s async for s in coalesced(burst(steps, closed))]
    assert len(out) == 1
    assert out[0].choices[0].text == " a b c"
    assert out[0].choices[0].new_tokens == 3
    assert out[0].choices[0].finish_reason == "length"
    assert closed == [True]


async def test_a_reader_that_keeps_up_gets_every_step_on_its_own() -> None:
    gate: asyncio.Queue[None] = asyncio.Queue()
    steps = [step(" a"), step(" b"), step(" c")]
    reader = coalesced(paced(steps, gate))
    texts = []
    for _ in steps:
        gate.put_nowait(None)
        texts.append((await anext(reader)).choices[0].text)
    assert texts == [" a", " b", " c"]
    gate.put_nowait(None)
    with pytest.raises(StopAsyncIteration):
        await anext(reader)


async def test_an_error_comes_after_the_steps_before_it() -> None:
    async def failing() -> AsyncIterator[GenerationStep]:
        yield step(" a")
        yield step(" b")
        raise EngineFailureError("the upstream went away")

    reader = coalesced(failing())
    assert (await anext(reader)).choices[0].text == " a b"
    with pytest.raises(EngineFailureError, match="went away"):
        await anext(reader)


async def test_closing_early_closes_the_source() -> None:
    gate: asyncio.Queue[None] = asyncio.Queue()
    source_closed = asyncio.Event()

    async def endless() -> AsyncIterator[GenerationStep]:
        try:
            while True:
                await gate.get()
                yield step(" more")
        finally:
            source_closed.set()  # how an engine learns of the abort

    reader = coalesced(endless())
    gate.put_nowait(None)
    assert (await anext(reader)).choices[0].text == " more"
    await reader.aclose()
    assert source_closed.is_set()


async def test_a_reader_cancelled_again_and_again_lets_the_source_finish_closing() -> None:
    # sse-starlette cancels a stream whose client left with an anyio cancel scope, which
    # cancels every await in it, again and again. The source's own cleanup (closing the
    # upstream connection takes awaits) must still run to its end, or the upstream goes on
    # generating for nobody.
    cleaned = asyncio.Event()

    async def upstream() -> AsyncIterator[GenerationStep]:
        try:
            while True:
                yield step(" x")
                await asyncio.sleep(0.01)
        finally:
            await asyncio.sleep(0.05)
            await asyncio.sleep(0.05)
            cleaned.set()

    with anyio.CancelScope() as scope:
        reader = coalesced(upstream())
        await anext(reader)
        scope.cancel()
        await anext(reader)
    await asyncio.wait_for(cleaned.wait(), 2)
