"""The common tail of both generation endpoints: an SSE stream or one JSON body."""

from __future__ import annotations

from collections.abc import Callable

from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel
from sse_starlette import EventSourceResponse

from app.generation import Run
from app.schemas.common import StreamOptions, dump
from app.streaming import ChunkMaker, UsageChunkMaker, sse_events


async def respond(
    run: Run,
    *,
    stream: bool,
    stream_options: StreamOptions | None,
    chunk_makers: tuple[ChunkMaker, UsageChunkMaker],
    build_response: Callable[[Run], BaseModel],
    headers: dict[str, str],
) -> Response:
    if stream:
        include_usage = bool(stream_options and stream_options.include_usage)
        chunk, usage_chunk = chunk_makers
        # "\n" line ends, as OpenAI sends them; some clients split events on "\n\n" only.
        return EventSourceResponse(
            sse_events(run, chunk, usage_chunk, include_usage), headers=headers, sep="\n"
        )
    await run.collect()
    return JSONResponse(dump(build_response(run)), headers=headers)
