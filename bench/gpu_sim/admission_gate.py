"""specgate's admission in front of the simulated engine: at most `max_running` requests in
the engine, a bounded queue, then refusals; in the gateway's own order and with its own
charges (app/tenants/fair_queue.py, app/tenants/books.py), or first come, first served, as
the gateway admitted before fair shares (issue 43).

The engine behind it keeps vLLM's own limits (bench/gpu_sim/engine.py); this is what the
gateway adds, as `--max-running-requests` and `--max-queued-requests` do.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from app.tenants.access import Access
from app.tenants.books import TenantBooks, TenantCharge, UsageFigures
from app.tenants.fair_queue import FairQueue
from app.tenants.keys import ApiKey
from bench.gpu_sim.workload import SimRequest


@dataclass
class AdmissionGate:
    max_running: int
    max_queued: int
    # False: one queue for every tenant, first come, first served (the gateway before).
    fair: bool = True
    weights: dict[str, float] = field(default_factory=dict)
    refused: list[SimRequest] = field(default_factory=list)
    running: int = 0

    def __post_init__(self) -> None:
        self.books = TenantBooks()
        self._queue: FairQueue[SimRequest] = FairQueue(self.books.fair_share)
        self._charges: dict[str, TenantCharge] = {}

    def arrive(self, request: SimRequest) -> list[SimRequest]:
        """A request reaches the gateway: the requests that enter the engine now."""
        if self.running < self.max_running and not len(self._queue):
            return [self._admit(request)]
        tenant = self._tenant(request)
        if len(self._queue) >= self.max_queued:
            evicted = self._queue.evict_for(tenant)
            if evicted is None:
                self.refused.append(request)
                return []
            self.refused.append(evicted)
        self._queue.push(tenant, request)
        return []

    def release(self, request: SimRequest) -> list[SimRequest]:
        """A request ended in the engine: settle its charge, and hand its slot on."""
        charge = self._charges.pop(request.request_id)
        used = UsageFigures(
            request.request_id, "completed", request.prompt_tokens, request.generated, None
        )
        self.books.finished(charge, used)
        self.running -= 1
        nxt = self._queue.pop()
        if nxt is None:
            return []
        tenant, waiting = nxt
        self.books.fair_share.served(tenant)
        return [self._admit(waiting)]

    def _tenant(self, request: SimRequest) -> str:
        return request.tenant if self.fair else ""

    def _admit(self, request: SimRequest) -> SimRequest:
        self.running += 1
        tenant = self._tenant(request)
        key = ApiKey(tenant, digest="", weight=self.weights.get(tenant, 1.0))
        # The client asks for the answer's length (max_tokens), as a benchmark's fixed
        # lengths do.
        charge = TenantCharge(Access(key), None, request.prompt_tokens, 1, request.output_tokens)
        self.books.admitted(charge)
        self._charges[request.request_id] = charge
        return request
