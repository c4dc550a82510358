"""Admission control for one engine: a bounded number running, a bounded queue, then 429.

Requests past `max_running` wait in a FIFO queue; past `max_queued` they are refused at
once, so an overloaded gateway answers in microseconds instead of hanging. A request that
waits longer than `queue_timeout` gets a 503. Both carry Retry-After.
"""

from __future__ import annotations

import asyncio
from collections import deque

from app.errors import OverloadedError, QueueTimeoutError
from app.vocabulary import Route

RETRY_AFTER_SECONDS = 1


class Admission:
    def __init__(
        self, route: Route, max_running: int, max_queued: int, queue_timeout: float
    ) -> None:
        self.route: Route = route
        self.max_running = max_running
        self.max_queued = max_queued
        self.queue_timeout = queue_timeout
        self.running = 0
        # Waiters in arrival order; leave() hands a freed slot straight to the first.
        self._queue: deque[asyncio.Future[None]] = deque()

    def queued(self) -> int:
        return len(self._queue)

    async def enter(self) -> None:
        """Take a running slot, waiting in the queue if needed; raise if there is no room."""
        if self.running < self.max_running and not self._queue:
            self.running += 1
            return
        if len(self._queue) >= self.max_queued:
            raise OverloadedError(
                f"The {self.route} engine is at capacity ({self.max_running} running, "
                f"{self.max_queued} queued). Retry after {RETRY_AFTER_SECONDS} s.",
                retry_after=RETRY_AFTER_SECONDS,
            )
        turn = asyncio.get_running_loop().create_future()
        self._queue.append(turn)
        try:
            async with asyncio.timeout(self.queue_timeout):
                await turn
        except BaseException as exc:
            if turn.done() and not turn.cancelled():
                self.leave()  # the slot arrived as we gave up: pass it on
            elif turn in self._queue:  # leave() may have dropped it already, as cancelled
                self._queue.remove(turn)
            if isinstance(exc, TimeoutError):
                raise QueueTimeoutError(
                    f"The request waited {self.queue_timeout:g} s for the {self.route} engine.",
                    retry_after=RETRY_AFTER_SECONDS,
                ) from None
            raise

    def leave(self) -> None:
        while self._queue:
            turn = self._queue.popleft()
            if not turn.done():
                turn.set_result(None)  # the slot changes hands; `running` stays the same
                return
        self.running -= 1
