"""Admission control for one engine: a bounded number running, a bounded queue, then 429.

Requests past `max_running` wait; past `max_queued` they are refused at once, so an
overloaded gateway answers in microseconds instead of hanging. A request that waits longer
than `queue_timeout` gets a 503. Both carry Retry-After.

A freed slot goes to the waiting tenant served least so far by weight, within a tenant in
arrival order; with one tenant the queue is first come, first served. A full queue makes room
for a tenant with fewer waiting than another: that other's newest waiter gets the 429
instead, so a flood fills the queue with its own requests but never shuts another tenant out
(app/tenants/fair_queue.py).
"""

from __future__ import annotations

import asyncio

from app.errors import OverloadedError, QueueTimeoutError
from app.tenants.fair_queue import FairQueue
from app.tenants.fair_share import FairShare
from app.vocabulary import Route

RETRY_AFTER_SECONDS = 1


class Admission:
    def __init__(
        self,
        route: Route,
        max_running: int,
        max_queued: int,
        queue_timeout: float,
        fair_share: FairShare | None = None,
    ) -> None:
        self.route: Route = route
        self.max_running = max_running
        self.max_queued = max_queued
        self.queue_timeout = queue_timeout
        self.fair_share = fair_share if fair_share is not None else FairShare()
        self.running = 0
        self._waiting: FairQueue[asyncio.Future[None]] = FairQueue(self.fair_share)

    def queued(self) -> int:
        return len(self._waiting)

    async def enter(self, tenant: str = "") -> None:
        """Take a running slot, waiting in the queue if needed; raise if there is no room."""
        if self.running < self.max_running and not self.queued():
            self.running += 1
            return
        if self.queued() >= self.max_queued and not self._made_room(tenant):
            raise self._full()
        turn = asyncio.get_running_loop().create_future()
        self._waiting.push(tenant, turn)
        try:
            async with asyncio.timeout(self.queue_timeout):
                await turn
        except BaseException as exc:
            if turn.done() and not turn.cancelled() and turn.exception() is None:
                self.leave()  # the slot arrived as we gave up: pass it on
            else:  # leave() may have dropped it already, as cancelled
                self._waiting.remove(tenant, turn)
            if isinstance(exc, TimeoutError):
                raise QueueTimeoutError(
                    f"The request waited {self.queue_timeout:g} s for the {self.route} engine.",
                    retry_after=RETRY_AFTER_SECONDS,
                ) from None
            raise

    def leave(self) -> None:
        while (next_waiter := self._waiting.pop()) is not None:
            tenant, turn = next_waiter
            if not turn.done():
                self.fair_share.served(tenant)
                turn.set_result(None)  # the slot changes hands; `running` stays the same
                return
        self.running -= 1

    def _full(self) -> OverloadedError:
        return OverloadedError(
            f"The {self.route} engine is at capacity ({self.max_running} running, "
            f"{self.max_queued} queued). Retry after {RETRY_AFTER_SECONDS} s.",
            retry_after=RETRY_AFTER_SECONDS,
        )

    def _made_room(self, tenant: str) -> bool:
        """Refuse the newest waiter of the tenant with the most waiting, if that is more than
        `tenant` would have with this request."""
        evicted = self._waiting.evict_for(tenant)
        if evicted is None:
            return False
        if not evicted.done():
            evicted.set_exception(self._full())
        return True
