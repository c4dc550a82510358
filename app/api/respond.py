"""The common tail of every generation endpoint: an SSE stream or one JSON body."""

from __future__ import annotations

import asyncio
import contextlib

from fastapi import Request
from fastapi.responses import Response

from app.api.event_stream import EventStream
from app.encoders.common import ResponseEncoder, route_headers
from app.generation import Run
from app.schemas.common import StreamOptions

# How often a non-streamed request checks that its client is still there.
DISCONNECT_POLL_SECONDS = 0.5
# nginx's status for "client closed the request"; nobody reads it, but logs do.
CLIENT_CLOSED_REQUEST = 499


async def respond(
    run: Run,
    request: Request,
    encoder: ResponseEncoder,
    *,
    stream: bool,
    stream_options: StreamOptions | None,
    shutdown_grace_seconds: float = 0.0,
) -> Response:
    headers = route_headers(run)
    if stream:
        include_usage = bool(stream_options and stream_options.include_usage)
        # As vLLM: usage on every chunk only with include_usage too.
        every_chunk = include_usage and bool(
            stream_options and stream_options.continuous_usage_stats
        )
        # "\n" line ends, as OpenAI sends them; some clients split events on "\n\n" only.
        return EventStream(
            encoder.sse(run, include_usage, every_chunk),
            run,
            # On SIGTERM, let the stream finish for this long before it is cut (and aborted).
            shutdown_grace_seconds,
            headers=headers,
            sep="\n",
        )
    if not await _collect_unless_disconnected(run, request):
        return Response(status_code=CLIENT_CLOSED_REQUEST)
    body = encoder.response(run).model_dump_json()
    return Response(body, media_type="application/json", headers=headers)


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
