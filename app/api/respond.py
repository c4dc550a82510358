"""The common tail of both generation endpoints: an SSE stream or one JSON body."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from fastapi import Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel
from sse_starlette import EventSourceResponse

from app.generation import Run
from app.schemas.common import StreamOptions, dump
from app.streaming import ChunkMaker, UsageChunkMaker, sse_events

# How often a non-streamed request checks that its client is still there.
DISCONNECT_POLL_SECONDS = 0.5
# nginx's status for "client closed the request"; nobody reads it, but logs do.
CLIENT_CLOSED_REQUEST = 499


async def respond(
    run: Run,
    request: Request,
    *,
    stream: bool,
    stream_options: StreamOptions | None,
    chunk_makers: tuple[ChunkMaker, UsageChunkMaker],
    build_response: Callable[[Run], BaseModel],
    headers: dict[str, str],
    shutdown_grace_seconds: float = 0.0,
) -> Response:
    if stream:
        include_usage = bool(stream_options and stream_options.include_usage)
        chunk, usage_chunk = chunk_makers
        # "\n" line ends, as OpenAI sends them; some clients split events on "\n\n" only.
        return EventSourceResponse(
            sse_events(run, chunk, usage_chunk, include_usage),
            headers=headers,
            sep="\n",
            # On SIGTERM, let the stream finish for this long before it is cut (and aborted).
            shutdown_grace_period=shutdown_grace_seconds,
        )
    if not await _collect_unless_disconnected(run, request):
        return Response(status_code=CLIENT_CLOSED_REQUEST)
    return JSONResponse(dump(build_response(run)), headers=headers)


async def _collect_unless_disconnected(run: Run, request: Request) -> bool:
    """Generate to the end; False if the client left first (the request is then aborted)."""
    collecting = asyncio.ensure_future(run.collect())
    try:
        while True:
            done, _ = await asyncio.wait({collecting}, timeout=DISCONNECT_POLL_SECONDS)
            if done:
                collecting.result()  # re-raises a generation error
                return True
            if await request.is_disconnected():
                return False
    finally:
        if not collecting.done():
            # Cancelling the collection closes the run, which aborts it in the engine.
            collecting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await collecting
