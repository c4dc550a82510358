"""Steps merged while their reader is behind, so a slow reader gets fewer, larger events.

vLLM's output collector does this for embedded engines: when the reader of a request falls
behind, the engine's outputs pile up and merge into one. A remote stream needs the same, or
the gateway spends its time on one event per token: httpx hands over one HTTP chunk (one
upstream event) at a time even when a socket read brought dozens. `coalesced` drains the
upstream in a task of its own and hands the reader everything that piled up since its last
look, merged: one step, one SSE event, one socket write.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Sequence

from app.engine.types import ChoiceDelta, GenerationStep


async def coalesced(steps: AsyncIterator[GenerationStep]) -> AsyncGenerator[GenerationStep, None]:
    """`steps`, with the ones that arrive while the reader is busy merged into one.

    Errors arrive after the steps before them. Closing this early closes `steps`, which is
    how an engine learns that its request was aborted.
    """
    pending: list[GenerationStep] = []
    arrived = asyncio.Event()
    ended = False
    failure: Exception | None = None

    async def drain() -> None:
        nonlocal ended, failure
        try:
            async for step in steps:
                pending.append(step)
                arrived.set()
        except Exception as exc:  # handed to the reader, in order
            failure = exc
        finally:
            ended = True
            arrived.set()

    draining = asyncio.create_task(drain())
    try:
        while True:
            if not pending and not ended:
                await arrived.wait()
                arrived.clear()
            if pending:
                batch = pending[:]
                pending.clear()
                yield merge_steps(batch)
            elif ended:
                if failure is not None:
                    raise failure
                return
    finally:
        draining.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await draining
        aclose = getattr(steps, "aclose", None)
        if aclose is not None:
            await aclose()


def merge_steps(steps: Sequence[GenerationStep]) -> GenerationStep:
    """Steps that arrived together, as one: each choice's text joined and its tokens summed.

    What a stream does when its reader falls behind (vLLM's output collector merges the
    same way): one event per batch of tokens instead of one per token.
    """
    if len(steps) == 1:
        return steps[0]
    merged: dict[int, ChoiceDelta] = {}
    for step in steps:
        for delta in step.choices:
            earlier = merged.get(delta.index)
            merged[delta.index] = delta if earlier is None else _joined(earlier, delta)
    first_ids = next((s.prompt_token_ids for s in steps if s.prompt_token_ids is not None), None)
    return GenerationStep(steps[-1].prompt_tokens, list(merged.values()), first_ids)


def _joined(earlier: ChoiceDelta, later: ChoiceDelta) -> ChoiceDelta:
    logprobs = None
    if earlier.logprobs is not None or later.logprobs is not None:
        logprobs = (*(earlier.logprobs or ()), *(later.logprobs or ()))
    return ChoiceDelta(
        index=earlier.index,
        text=earlier.text + later.text,
        new_tokens=earlier.new_tokens + later.new_tokens,
        finish_reason=later.finish_reason or earlier.finish_reason,
        spec=later.spec or earlier.spec,
        logprobs=logprobs,
        echo=earlier.echo or later.echo,
        token_ids=earlier.token_ids + later.token_ids,
    )
