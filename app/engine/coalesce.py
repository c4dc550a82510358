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
from collections.abc import AsyncGenerator, AsyncIterator, Sequence

from app.engine.generation import ChoiceDelta, GenerationStep


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
        # One cancellation unwinds `steps` in the drain task, closing the upstream connection
        # (which aborts the request there). It is waited for with asyncio.wait, which never
        # passes a cancellation of this task on: awaiting the task itself would, and under
        # sse-starlette's cancel scope (a client that left) every retry of it would cut that
        # cleanup short and leave the connection open, the upstream still generating.
        draining.cancel()
        await asyncio.wait({draining})


def merge_steps(steps: Sequence[GenerationStep]) -> GenerationStep:
    """Steps that arrived together, as one: each choice's text joined and its tokens summed."""
    if len(steps) == 1:
        return steps[0]
    by_choice: dict[int, list[ChoiceDelta]] = {}
    for step in steps:
        for delta in step.choices:
            by_choice.setdefault(delta.index, []).append(delta)
    first_ids = next((s.prompt_token_ids for s in steps if s.prompt_token_ids is not None), None)
    choices = [_joined(deltas) for deltas in by_choice.values()]
    return GenerationStep(steps[-1].prompt_tokens, choices, first_ids)


def _joined(deltas: list[ChoiceDelta]) -> ChoiceDelta:
    """One choice's deltas, in order, as one."""
    if len(deltas) == 1:
        return deltas[0]
    logprobs = None
    if any(delta.logprobs is not None for delta in deltas):
        logprobs = tuple(entry for delta in deltas for entry in delta.logprobs or ())
    return ChoiceDelta(
        index=deltas[0].index,
        text="".join(delta.text for delta in deltas),
        new_tokens=sum(delta.new_tokens for delta in deltas),
        # Only a choice's last delta finishes it, and carries its speculative figures.
        finish_reason=deltas[-1].finish_reason,
        draft_stats=deltas[-1].draft_stats,
        logprobs=logprobs,
        echo=deltas[0].echo,
        token_ids=tuple(token for delta in deltas for token in delta.token_ids),
    )
