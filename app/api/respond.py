"""The common tail of every generation endpoint: a run answered as one JSON body or as SSE.

By the time either starts, the request has been validated and its first step produced (see
`Run.start`). A failure after that can no longer change a stream's status code, so it goes
out as a `data: {"error": ...}` event (followed by [DONE] where the endpoint sends one).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import anyio
from fastapi import Request
from fastapi.responses import Response
from pydantic import BaseModel
from sse_starlette import EventSourceResponse
from starlette.types import Message, Receive, Scope, Send

from app.encoders.common import ChunkEncoder, EventEncoder, route_headers, route_info, usage
from app.errors import ShuttingDownError, SpecgateError, error_body
from app.request_run import Run
from app.schemas.common import StreamOptions

logger = logging.getLogger("specgate.streaming")

# How often a non-streamed request checks that its client is still there.
DISCONNECT_POLL_SECONDS = 0.5
# nginx's status for "client closed the request"; nobody reads it, but logs do.
CLIENT_CLOSED_REQUEST = 499
# After the shutdown grace, how long a cut stream has to send its error event and [DONE].
FAREWELL_SECONDS = 1.0


# Line ends to Python's str.splitlines (so to httpx's aiter_lines, and to requests'
# iter_lines when it decodes) that JSON leaves unescaped. In a text a model writes, one cuts the
# event in two for a client that reads the stream line by line: a JSONDecodeError inside a
# sampled story's content string, 1 request in 880 of bench.load_phases. They can only stand
# inside JSON strings, where their escapes mean the same.
_JSON_LINE_END_ESCAPES = str.maketrans(
    {"\x85": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"}
)


def data_event(data: str) -> bytes:
    """One SSE event with a single-line `data` field ("\n" line ends, as OpenAI sends), which
    stays one line however a client splits lines."""
    return b"data: " + data.translate(_JSON_LINE_END_ESCAPES).encode() + b"\n\n"


DONE_EVENT = data_event("[DONE]")


async def respond(
    run: Run,
    request: Request,
    encoder: ChunkEncoder | EventEncoder,
    *,
    stream: bool,
    stream_options: StreamOptions | None,
    shutdown_grace_seconds: float = 0.0,
) -> Response:
    headers = route_headers(run)
    if stream:
        events: AsyncIterator[bytes] | AsyncIterator[dict[str, str]]
        if isinstance(encoder, EventEncoder):
            events = encoder.events(run)
        else:
            include_usage = bool(stream_options and stream_options.include_usage)
            # As vLLM: usage on every chunk only with include_usage too.
            every_chunk = include_usage and bool(
                stream_options and stream_options.continuous_usage_stats
            )
            events = chunk_events(run, encoder, include_usage, every_chunk)
        # "\n" line ends, as OpenAI sends them; some clients split events on "\n\n" only.
        # On SIGTERM the stream may finish for the grace before it is cut (and aborted).
        return EventStream(events, run, shutdown_grace_seconds, headers=headers, sep="\n")
    if not await _collect_unless_disconnected(run, request):
        return Response(status_code=CLIENT_CLOSED_REQUEST)
    body = encoder.response(run).model_dump_json()
    return Response(body, media_type="application/json", headers=headers)


async def chunk_events(
    run: Run, encoder: ChunkEncoder, include_usage: bool, every_chunk: bool = False
) -> AsyncIterator[bytes]:
    """A chunked stream's events, ending with [DONE]; `every_chunk`: each chunk carries the
    usage so far (vLLM's continuous_usage_stats). Closing it early aborts the request.

    Events are framed here, as bytes, rather than by sse-starlette from dicts: this is the
    per-token path, and a JSON dump never holds a line break, so the framing is one join.
    """
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
                yield _chunk_event(chunk, include_usage)
        if include_usage:
            yield _chunk_event(encoder.usage_chunk(run), include_usage)
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


def _chunk_event(chunk: BaseModel, include_usage: bool) -> bytes:
    # OpenAI: with include_usage every chunk carries "usage": null until the last one, which
    # has the figures; without it, no chunk has the field.
    return data_event(chunk.model_dump_json(exclude=None if include_usage else {"usage"}))


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


class EventStream(EventSourceResponse):
    """sse-starlette's response for one run's events, with two changes.

    - No cancel scope around each send when sends have no timeout (ours have none): on the
      per-token path that scope cost a fifth of the HTTP layer's time (py-spy, the embedded
      path of `bench/relay.py`).
    - On shutdown the stream may go on for `grace` seconds; if it has not ended by then, the
      run is cut and the stream ends with an error event (and [DONE] where the endpoint
      sends one) before sse-starlette cancels it, FAREWELL_SECONDS later.
    """

    def __init__(
        self,
        content: AsyncIterator[bytes] | AsyncIterator[dict[str, str]],
        run: Run,
        grace: float,
        **options: Any,
    ) -> None:
        self._shutdown = anyio.Event()
        super().__init__(
            content,
            shutdown_event=self._shutdown,
            shutdown_grace_period=grace + FAREWELL_SECONDS,
            **options,
        )
        self._run = run
        self._grace = grace

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        cutter = asyncio.ensure_future(self._cut_at_grace_end())
        try:
            await super().__call__(scope, receive, send)
        finally:
            cutter.cancel()

    async def _cut_at_grace_end(self) -> None:
        await self._shutdown.wait()
        await asyncio.sleep(self._grace)
        self._run.cut(
            ShuttingDownError(
                f"the server is shutting down: the stream was cut after the "
                f"{self._grace:g} s shutdown grace"
            )
        )

    async def _send_with_timeout(self, send: Send, message: Message) -> None:
        if self.send_timeout is not None:
            await super()._send_with_timeout(send, message)
            return
        try:
            await send(message)
        except BaseException:
            self._send_interrupted = True  # as the method it replaces: the stream is cut
            raise
