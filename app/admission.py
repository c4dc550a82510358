"""Admission control for one engine: a bounded number running, a bounded queue, then 429.

Requests past `max_running` wait; past `max_queued` they are refused at once, so an
overloaded gateway answers in microseconds instead of hanging. A request that waits longer
than `queue_timeout` gets a 503. Both carry Retry-After.

A freed slot goes to the waiting tenant served least so far by weight (app/tenants/
fair_share.py), within a tenant in arrival order; with one tenant the queue is first come,
first served. A full queue makes room for a tenant with fewer waiting than another: that
other's newest waiter gets the 429 instead, so a flood fills the queue with its own requests
but never shuts another tenant out.
"""

from __future__ import annotations

import asyncio
from collections import deque

from app.errors import OverloadedError, QueueTimeoutError
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
        # Each tenant's waiters in arrival order (a tenant with none has no entry); the
        # dict's order is the order tenants started waiting, which breaks ties.
        self._queues: dict[str, deque[asyncio.Future[None]]] = {}

    def queued(self) -> int:
        return sum(len(waiters) for waiters in self._queues.values())

    async def enter(self, tenant: str = "") -> None:
        """Take a running slot, waiting in the queue if needed; raise if there is no room."""
        if self.running < self.max_running and not self._queues:
            self.running += 1
            return
        if self.queued() >= self.max_queued and not self._made_room(tenant):
            raise self._full()
        turn = asyncio.get_running_loop().create_future()
        if tenant not in self._queues:
            self.fair_share.lift(tenant, list(self._queues))
            self._queues[tenant] = deque()
        self._queues[tenant].append(turn)
        try:
            async with asyncio.timeout(self.queue_timeout):
                await turn
        except BaseException as exc:
            if turn.done() and not turn.cancelled() and turn.exception() is None:
                self.leave()  # the slot arrived as we gave up: pass it on
            else:  # leave() may have dropped it already, as cancelled
                self._forget(tenant, turn)
            if isinstance(exc, TimeoutError):
                raise QueueTimeoutError(
                    f"The request waited {self.queue_timeout:g} s for the {self.route} engine.",
                    retry_after=RETRY_AFTER_SECONDS,
                ) from None
            raise

    def leave(self) -> None:
        while self._queues:
            tenant = self.fair_share.lowest(list(self._queues))
            turn = self._queues[tenant].popleft()
            if not self._queues[tenant]:
                del self._queues[tenant]
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
        if not self._queues:
            return False
        heaviest = max(self._queues, key=lambda t: len(self._queues[t]))
        mine = len(self._queues.get(tenant, ()))
        if heaviest == tenant or len(self._queues[heaviest]) <= mine + 1:
            return False
        evicted = self._queues[heaviest].pop()
        if not self._queues[heaviest]:
            del self._queues[heaviest]
        if not evicted.done():
            evicted.set_exception(self._full())
        return True

    def _forget(self, tenant: str, turn: asyncio.Future[None]) -> None:
        waiters = self._queues.get(tenant)
        if waiters is not None and turn in waiters:
            waiters.remove(turn)
            if not waiters:
                del self._queues[tenant]
