"""Several prompts in one completions request: one engine request each, merged into one stream.

Prompt i's choice j becomes choice i * n + j, as OpenAI numbers them.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import replace

from app.engine.generation import GenerationRequest, GenerationStep
from app.engine.protocol import Engine


def generate_all(
    engine: Engine, requests: list[GenerationRequest]
) -> AsyncIterator[GenerationStep]:
    if len(requests) == 1:
        return _generate(engine, requests[0])
    return _merged(engine, requests)


def _generate(engine: Engine, request: GenerationRequest) -> AsyncIterator[GenerationStep]:
    options = request.options
    if options.n > 1 and options.temperature == 0:
        # Greedy choices are all the same; vLLM refuses n > 1 there, OpenAI repeats the one.
        once = replace(request, options=replace(options, n=1))
        return _repeated(engine.generate(once), options.n)
    return engine.generate(request)


async def _repeated(steps: AsyncIterator[GenerationStep], n: int) -> AsyncIterator[GenerationStep]:
    try:
        async for step in steps:
            # The drafting figures belong to the one real request: keep them on choice 0.
            choices = [
                replace(c, index=i, draft_stats=c.draft_stats if i == 0 else None)
                for c in step.choices
                for i in range(n)
            ]
            yield replace(step, choices=choices)
    finally:
        await steps.aclose()  # type: ignore[attr-defined]


async def _merged(
    engine: Engine, requests: list[GenerationRequest]
) -> AsyncIterator[GenerationStep]:
    streams = [_generate(engine, request) for request in requests]
    prompt_tokens = [0] * len(streams)

    def renumbered(position: int, step: GenerationStep) -> GenerationStep:
        prompt_tokens[position] = step.prompt_tokens
        n = requests[position].options.n
        return GenerationStep(
            prompt_tokens=sum(prompt_tokens),
            choices=[replace(c, index=position * n + c.index) for c in step.choices],
        )

    pending: dict[asyncio.Future[GenerationStep], int] = {}
    try:
        # Prime each request in turn: a bad prompt fails the whole request before any output.
        firsts = [await anext(stream) for stream in streams]
        for position, first in enumerate(firsts):
            yield renumbered(position, first)
        pending = {asyncio.ensure_future(anext(s)): i for i, s in enumerate(streams)}
        while pending:
            done, _ = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for future in done:
                position = pending.pop(future)
                try:
                    step = future.result()
                except StopAsyncIteration:
                    continue
                pending[asyncio.ensure_future(anext(streams[position]))] = position
                yield renumbered(position, step)
    finally:
        for future in pending:
            future.cancel()
        for future in pending:
            with contextlib.suppress(BaseException):
                await future
        for stream in streams:
            # Closing an unfinished stream aborts its request in the engine.
            await stream.aclose()  # type: ignore[attr-defined]
