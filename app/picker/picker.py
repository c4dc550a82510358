"""The picker's one decision per request: which endpoint, its fallbacks, and the draft length.

It keeps what the rule needs beyond the scrapes, as the Ray Serve router does: the prompt
prefixes it sent to each endpoint (app/placement/prefix_table.py) and the drafter-history keys.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Collection, Sequence

from app.drafting.length_rule import StepCostPrior
from app.picker.choose import (
    Pick,
    Refusal,
    ordered,
    report_of,
    saturated,
    speculative_header,
    wants_of,
    would_draft,
)
from app.picker.endpoints import Endpoint
from app.picker.load import LoadBook
from app.picker.request import RequestFacts
from app.picker.settings import DEFAULT_QUEUE_LIMIT
from app.placement.prefix_table import PrefixTable, prompt_chunks, prompt_tokens
from app.placement.replica_rank import draft_length

# History keys remembered per endpoint: a suffix drafter's tenants and classes it holds.
HISTORIES_PER_ENDPOINT = 1024


class Picker:
    def __init__(
        self,
        endpoints: Sequence[Endpoint],
        book: LoadBook,
        line: StepCostPrior,
        queue_limit: int = DEFAULT_QUEUE_LIMIT,
        max_temperature: float | None = None,
        fallbacks: int = 0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.endpoints: dict[str, Endpoint] = {}
        self.book = book
        self.line = line
        self.queue_limit = queue_limit
        self.max_temperature = max_temperature
        self.fallbacks = fallbacks
        self._clock = clock
        self._prefixes = PrefixTable()
        self._histories: dict[str, OrderedDict[str, None]] = {}
        self.set_endpoints(endpoints)

    def set_endpoints(self, endpoints: Sequence[Endpoint]) -> None:
        """The endpoints to pick from now (the Kubernetes source changes them as pods come
        and go): a new one is not ready before its first scrape, and a gone one takes its
        cache with it (a pod that comes back at the same address starts empty)."""
        self.endpoints = {endpoint.address: endpoint for endpoint in endpoints}
        self.book.keep_only(self.endpoints)
        self._prefixes.keep_only(self.endpoints)
        self._histories = {a: self._histories.get(a, OrderedDict()) for a in self.endpoints}

    def pick(self, facts: RequestFacts, subset: Collection[str] | None = None) -> Pick | Refusal:
        """`subset`: the addresses Envoy allows (the protocol's subset hint), None for all."""
        allowed = [e for a, e in self.endpoints.items() if subset is None or a in subset]
        loads = {e.address: self.book.load(e.address) for e in allowed}
        ready = {address: load for address, load in loads.items() if load is not None}
        if not ready:
            if subset is None:
                return Refusal(503, "no endpoint is ready", "no_ready_endpoint")
            return Refusal(
                503,
                f"none of the {len(subset)} addresses of the subset hint is ready",
                "no_ready_endpoint",
            )
        open_ = {a: load for a, load in ready.items() if not saturated(load, self.queue_limit)}
        if not open_:
            return Refusal(
                429,
                f"every endpoint has {self.queue_limit} or more requests waiting",
                "endpoints_saturated",
            )
        chunks, chunk_tokens = prompt_chunks(facts.prompt)
        cached = {a: self._prefixes.cached_tokens(a, chunks, chunk_tokens) for a in open_}
        tokens = prompt_tokens(facts.prompt) if facts.prompt else 0
        drafts = would_draft(facts, self.max_temperature)
        wants = {a: wants_of(facts, self.endpoints[a], drafts, tokens, cached) for a in open_}
        reports = {
            a: report_of(self.endpoints[a], load, self.line, frozenset(self._histories[a]))
            for a, load in open_.items()
        }
        always = [a for a in open_ if self.endpoints[a].pool == "drafting"]
        order = ordered(list(reports.values()), wants, always)
        chosen = order[0]
        length = draft_length(reports[chosen], wants[chosen])
        self._sent(chosen, chunks, wants[chosen].history)
        return Pick(
            tuple(order[: 1 + self.fallbacks]),
            speculative_header(self.endpoints[chosen], facts, length),
            None if facts.workload_class is None else facts.workload_class.value,
        )

    def _sent(self, address: str, chunks: list[str], history: str | None) -> None:
        self.book.picked(address, self._clock())
        self._prefixes.sent(address, chunks)
        if history is not None:
            held = self._histories[address]
            held[history] = None
            held.move_to_end(history)
            if len(held) > HISTORIES_PER_ENDPOINT:
                held.popitem(last=False)
