"""Engine steps -> OpenAI chunks -> SSE events, ending with `data: [DONE]`.

By the time a stream starts the request has been validated and its first step produced
(see `Run.start`). A failure after that can no longer change the status code, so it goes
out as a `data: {"error": ...}` event, followed by [DONE].
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

from pydantic import BaseModel

from app.engine.types import ChoiceDelta
from app.errors import SpecgateError, error_body
from app.formatting import public_finish, route_info, usage
from app.generation import Run
from app.logprobs import chat_logprobs, completion_logprobs, with_echo
from app.schemas.chat import ChatChunkChoice, ChatCompletionChunk, ChatDelta
from app.schemas.common import dump
from app.schemas.completions import Completion, CompletionChoice

logger = logging.getLogger("specgate.streaming")

DONE = "[DONE]"

# Turns one choice's delta into a chunk; `first` is true for the choice's first chunk.
ChunkMaker = Callable[[ChoiceDelta, bool], BaseModel]
# Makes an empty-choices chunk to carry the usage block.
UsageChunkMaker = Callable[[], BaseModel]


def chat_chunk_makers(
    completion_id: str, created: int, model: str
) -> tuple[ChunkMaker, UsageChunkMaker]:
    def chunk(delta: ChoiceDelta, first: bool) -> BaseModel:
        return ChatCompletionChunk(
            id=completion_id,
            created=created,
            model=model,
            choices=[
                ChatChunkChoice(
                    index=delta.index,
                    # OpenAI announces the role once, in each choice's first chunk.
                    delta=ChatDelta(role="assistant" if first else None, content=delta.text),
                    logprobs=chat_logprobs(delta.logprobs),
                    finish_reason=public_finish(delta.finish_reason),
                )
            ],
        )

    def usage_chunk() -> BaseModel:
        return ChatCompletionChunk(id=completion_id, created=created, model=model, choices=[])

    return chunk, usage_chunk


def completion_chunk_makers(
    completion_id: str, created: int, model: str, *, with_logprobs: bool
) -> tuple[ChunkMaker, UsageChunkMaker]:
    # Where each choice's next token starts in its text, for logprobs' text_offset.
    offsets: dict[int, int] = {}

    def chunk(delta: ChoiceDelta, first: bool) -> BaseModel:
        text, entries = with_echo(delta.echo, delta.text, delta.logprobs)
        logprobs = None
        if with_logprobs:
            logprobs = completion_logprobs(entries, offsets.get(delta.index, 0))
            offsets[delta.index] = offsets.get(delta.index, 0) + sum(len(e.token) for e in entries)
        return Completion(
            id=completion_id,
            created=created,
            model=model,
            choices=[
                CompletionChoice(
                    index=delta.index,
                    text=text,
                    logprobs=logprobs,
                    finish_reason=public_finish(delta.finish_reason),
                )
            ],
        )

    def usage_chunk() -> BaseModel:
        return Completion(id=completion_id, created=created, model=model, choices=[])

    return chunk, usage_chunk


async def sse_events(
    run: Run, make_chunk: ChunkMaker, make_usage_chunk: UsageChunkMaker, include_usage: bool
) -> AsyncIterator[dict[str, str]]:
    """The SSE events of one streamed response. Closing it early aborts the request."""
    started: set[int] = set()
    try:
        async for step in run.steps():
            chunks: list[dict[str, Any]] = []
            for delta in step.choices:
                if not delta.text and delta.finish_reason is None and delta.index in started:
                    continue
                chunks.append(
                    _chunk_dict(make_chunk(delta, delta.index not in started), include_usage)
                )
                started.add(delta.index)
            if run.finished and chunks:
                # The last content chunk says who served the request, for clients without usage.
                chunks[-1]["specgate"] = dump(route_info(run))
            for chunk in chunks:
                yield _event(chunk)
        if include_usage:
            final = dump(make_usage_chunk())
            final["usage"] = dump(usage(run))
            final["specgate"] = dump(route_info(run))
            yield _event(final)
    except SpecgateError as exc:
        yield _event(exc.body())
    except Exception:
        logger.exception("stream failed")
        yield _event(error_body("internal error while streaming", "server_error"))
    finally:
        await run.close()
    yield {"data": DONE}


def _chunk_dict(chunk: BaseModel, include_usage: bool) -> dict[str, Any]:
    data = dump(chunk)
    data.pop("specgate", None)
    for choice in data["choices"]:
        if "delta" in choice:
            # OpenAI leaves out delta fields that did not change (the role after the first).
            choice["delta"] = {k: v for k, v in choice["delta"].items() if v is not None}
    if include_usage:
        data["usage"] = None  # OpenAI: every chunk carries usage: null until the last one
    else:
        data.pop("usage", None)
    return data


def _event(data: dict[str, Any]) -> dict[str, str]:
    return {"data": json.dumps(data, separators=(",", ":"))}
