"""The SSE response of one run: sse-starlette's, cheaper per event and cut cleanly on shutdown."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import anyio
from sse_starlette import EventSourceResponse
from starlette.types import Message, Receive, Scope, Send

from app.errors import ShuttingDownError
from app.generation import Run

# After the shutdown grace, how long a cut stream has to send its error event and [DONE].
FAREWELL_SECONDS = 1.0


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
        self, content: AsyncIterator[bytes | dict[str, str]], run: Run, grace: float, **options: Any
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
