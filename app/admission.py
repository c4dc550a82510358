"""Admission control for one engine: a bounded number running, a bounded queue, then 429.

Requests past `max_running` wait in a FIFO queue; past `max_queued` they are refused at
once, so an overloaded gateway answers in microseconds instead of hanging. A request that
waits longer than `queue_timeout` gets a 503. Both carry Retry-After.
"""

from __future__ import annotations

import asyncio

from app.engine.types import Route
from app.errors import OverloadedError, QueueTimeoutError

RETRY_AFTER_SECONDS = 1


class Admission:
    def __init__(
        self, route: Route, max_running: int, max_queued: int, queue_timeout: float
    ) -> None:
        self.route: Route = route
        self.max_running = max_running
        self.max_queued = max_queued
        self.queue_timeout = queue_timeout
        self.waiting = 0
        self._slots = asyncio.Semaphore(max_running)

    def queued(self) -> int:
        return self.waiting

    async def enter(self) -> None:
        """Take a running slot, waiting in the queue if needed; raise if there is no room."""
        if self._slots.locked() and self.waiting >= self.max_queued:
            raise OverloadedError(
                f"The {self.route} engine is at capacity ({self.max_running} running, "
                f"{self.max_queued} queued). Retry after {RETRY_AFTER_SECONDS} s.",
                retry_after=RETRY_AFTER_SECONDS,
            )
        self.waiting += 1
        try:
            await asyncio.wait_for(self._slots.acquire(), self.queue_timeout)
        except TimeoutError:
            raise QueueTimeoutError(
                f"The request waited {self.queue_timeout:g} s for the {self.route} engine.",
                retry_after=RETRY_AFTER_SECONDS,
            ) from None
        finally:
            self.waiting -= 1

    def leave(self) -> None:
        self._slots.release()
