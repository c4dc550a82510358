"""A run's chunks as SSE events, ending with `data: [DONE]`.

By the time a stream starts the request has been validated and its first step produced
(see `Run.start`). A failure after that can no longer change the status code, so it goes
out as a `data: {"error": ...}` event, followed by [DONE].

Events are framed here, as bytes, rather than by sse-starlette from dicts: this is the
per-token path, and a JSON dump never holds a line break, so the framing is one join.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from typing import Any

from pydantic import BaseModel

from app.encoders.common import ChunkEncoder, route_info, usage
from app.errors import SpecgateError, error_body
from app.generation import Run

logger = logging.getLogger("specgate.streaming")

DONE = "[DONE]"


def data_event(data: str) -> bytes:
    """One SSE event with a single-line `data` field ("\n" line ends, as OpenAI sends)."""
    return b"data: " + data.encode() + b"\n\n"


DONE_EVENT = data_event(DONE)


async def sse_events(
    run: Run, encoder: ChunkEncoder, include_usage: bool, every_chunk: bool = False
) -> AsyncIterator[bytes]:
    """The SSE events of one streamed response; `every_chunk`: each chunk carries the usage
    so far (vLLM's continuous_usage_stats). Closing it early aborts the request."""
    started: set[int] = set()
    try:
        async for step in run.steps():
            chunks: list[Any] = []
            for delta in step.choices:
                # A step whose tokens' text is held back (part of a UTF-8 character, or of a
                # possible stop string) still sends their logprobs: every token counted in the
                # usage is listed.
                empty = not delta.text and not delta.logprobs and delta.finish_reason is None
                if empty and delta.index in started:
                    continue
                chunk = encoder.chunk(delta, delta.index not in started, run)
                started.add(delta.index)
                if chunk is not None:
                    chunks.append(chunk)
            if run.finished and chunks:
                # The last content chunk says who served the request, for clients without usage.
                chunks[-1].specgate = route_info(run)
            so_far = usage(run) if every_chunk and chunks else None
            for chunk in chunks:
                if so_far is not None:
                    chunk.usage = so_far
                yield _event(chunk, include_usage)
        if include_usage:
            yield _event(encoder.usage_chunk(run), include_usage)
    except SpecgateError as exc:
        yield _error_event(exc.body())
    except Exception:
        logger.exception("stream failed")
        yield _error_event(error_body("internal error while streaming", "server_error"))
    finally:
        await run.close()
    yield DONE_EVENT


def _error_event(body: dict[str, Any]) -> bytes:
    return data_event(json.dumps(body, separators=(",", ":")))


def _event(chunk: BaseModel, include_usage: bool) -> bytes:
    # OpenAI: with include_usage every chunk carries "usage": null until the last one, which
    # has the figures; without it, no chunk has the field.
    return data_event(chunk.model_dump_json(exclude=None if include_usage else {"usage"}))
