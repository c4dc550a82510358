"""Who waits, and who goes next: the waiters of each tenant, in arrival order.

A freed slot goes to the waiting tenant served least so far by weight (fair_share.py),
within a tenant to its oldest waiter; with one tenant the queue is first come, first served.
A full queue makes room for a tenant with fewer waiting than another: that other's newest
waiter is refused instead, so a flood fills the queue with its own requests but never shuts
another tenant out.

Pure and synchronous, so one discipline serves everywhere it is needed: the gateway's
admission (app/admission.py) holds asyncio futures in it, the GPU-scale simulation's gate
(bench/gpu_sim/admission_gate.py) simulated requests.
"""

from __future__ import annotations

from collections import deque
from typing import Generic, TypeVar

from app.tenants.fair_share import FairShare

Waiter = TypeVar("Waiter")


class FairQueue(Generic[Waiter]):
    def __init__(self, fair_share: FairShare) -> None:
        self.fair_share = fair_share
        # Each tenant's waiters in arrival order (a tenant with none has no entry); the
        # dict's order is the order tenants started waiting, which breaks ties.
        self._queues: dict[str, deque[Waiter]] = {}

    def __len__(self) -> int:
        return sum(len(waiters) for waiters in self._queues.values())

    def push(self, tenant: str, waiter: Waiter) -> None:
        """`waiter` waits behind its tenant's others; a tenant that had none waiting starts
        no lower than the lowest counter of those waiting (idle time is not banked)."""
        if tenant not in self._queues:
            self.fair_share.lift(tenant, list(self._queues))
            self._queues[tenant] = deque()
        self._queues[tenant].append(waiter)

    def pop(self) -> tuple[str, Waiter] | None:
        """The next waiter and its tenant, taken out of the queue; None when none waits. The
        caller tells the counters (FairShare.served) once the slot is really given."""
        if not self._queues:
            return None
        tenant = self.fair_share.lowest(list(self._queues))
        waiter = self._queues[tenant].popleft()
        if not self._queues[tenant]:
            del self._queues[tenant]
        return tenant, waiter

    def evict_for(self, tenant: str) -> Waiter | None:
        """Make room for one more of `tenant`'s: take out the newest waiter of the tenant
        with the most waiting, if that is more than `tenant` would have; None otherwise."""
        if not self._queues:
            return None
        heaviest = max(self._queues, key=lambda t: len(self._queues[t]))
        mine = len(self._queues.get(tenant, ()))
        if heaviest == tenant or len(self._queues[heaviest]) <= mine + 1:
            return None
        evicted = self._queues[heaviest].pop()
        if not self._queues[heaviest]:
            del self._queues[heaviest]
        return evicted

    def remove(self, tenant: str, waiter: Waiter) -> None:
        """A waiter that gave up (or was refused) leaves the queue, if it is still in it."""
        waiters = self._queues.get(tenant)
        if waiters is not None and waiter in waiters:
            waiters.remove(waiter)
            if not waiters:
                del self._queues[tenant]
