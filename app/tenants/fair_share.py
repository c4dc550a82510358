"""Each tenant's weighted count of the tokens served to it: the Virtual Token Counter of Sheng
et al., "Fairness in Serving Large Language Models" (OSDI 2024).

When the engine is full, the next request admitted is the backlogged tenant's whose counter is
lowest, which bounds the service gap between any two backlogged tenants. A tenant is charged
for its prompt when admitted (an estimate, corrected when the request ends) and for its
output and its drafted-and-rejected tokens when the request ends, each at its cost, over its
weight: drafting cannot buy a tenant a larger share. A tenant that had nothing waiting is
lifted, when it next waits, to the lowest counter of those waiting (or to the counter of the
tenant served last, when none is), so time spent idle is not banked as credit.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TokenCosts:
    """What a token of each kind costs, in prompt tokens. On this project's CPU a verified row
    costs about what a decoded token does (bench/RESULTS.md), and a prompt token, computed in
    a batch of the prompt's, much less."""

    prompt: float = 1.0
    output: float = 2.0
    rejected_draft: float = 2.0

    def of(self, prompt: int, output: int, rejected_drafts: int) -> float:
        return prompt * self.prompt + output * self.output + rejected_drafts * self.rejected_draft


class FairShare:
    """The counters, shared by every admission queue in the process (one device serves all)."""

    def __init__(self, costs: TokenCosts = TokenCosts()) -> None:
        self.costs = costs
        self._served: dict[str, float] = {}
        self._last_served = 0.0

    def counter(self, tenant: str) -> float:
        return self._served.get(tenant, 0.0)

    def charge(self, tenant: str, cost: float, weight: float) -> None:
        """Add `cost` (prompt-token units; negative to correct an estimate) over `weight`."""
        self._served[tenant] = self.counter(tenant) + cost / weight

    def lift(self, tenant: str, waiting: list[str]) -> None:
        """A tenant starts waiting: no lower than the lowest of those waiting already."""
        floor = min((self.counter(t) for t in waiting), default=self._last_served)
        self._served[tenant] = max(self.counter(tenant), floor)

    def served(self, tenant: str) -> None:
        """`tenant` was just given a slot from the queue."""
        self._last_served = self.counter(tenant)

    def lowest(self, tenants: list[str]) -> str:
        """The tenant to serve next; the first listed among equals."""
        return min(tenants, key=self.counter)
