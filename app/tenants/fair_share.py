"""Each tenant's weighted count of the tokens served to it: the Virtual Token Counter of Sheng
et al., "Fairness in Serving Large Language Models" (OSDI 2024).

When the engine is full, the next request admitted is the backlogged tenant's whose counter is
lowest, which bounds the service gap between any two backlogged tenants. A tenant is charged
when its request is admitted for the prompt and the output it is expected to write (the
smaller of its max_tokens and its tenant's recent answers' length), and when the request ends
the charge becomes what it used: prompt, output and drafted-and-rejected tokens, each at its
cost, over its weight, so drafting cannot buy a tenant a larger share. (Charged for output
only at the end, a flood's requests in flight, up to a whole batch of them, were missing from
its counter for as long as they ran, and the other tenant took most of the next slots: B's
share 0.53-0.59 in the flood benchmark, issue 43.) A tenant that had nothing waiting is lifted,
when it next waits, to the lowest counter of those waiting (or to the counter of the tenant
served last, when none is), so time spent idle is not banked as credit.
"""

from __future__ import annotations

from dataclasses import dataclass

# What one answer is expected to be, in tokens, before its tenant has finished any (and
# within its max_tokens).
FIRST_EXPECTED_OUTPUT = 256
# How much of the running mean of a tenant's answer lengths each new answer keeps.
OUTPUT_MEMORY = 0.8


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
        self._mean_output: dict[str, float] = {}  # tokens per sequence, recent answers

    def counter(self, tenant: str) -> float:
        return self._served.get(tenant, 0.0)

    def charge(self, tenant: str, cost: float, weight: float) -> None:
        """Add `cost` (prompt-token units; negative to correct an estimate) over `weight`."""
        self._served[tenant] = self.counter(tenant) + cost / weight

    def expected_output(self, tenant: str, max_tokens: int | None) -> float:
        """Tokens one sequence of `tenant`'s is expected to write, at most `max_tokens`."""
        mean = self._mean_output.get(tenant, float(FIRST_EXPECTED_OUTPUT))
        return mean if max_tokens is None else min(mean, float(max_tokens))

    def answered(self, tenant: str, tokens_per_sequence: float) -> None:
        """One of `tenant`'s requests ended, having written this many tokens a sequence."""
        mean = self._mean_output.get(tenant)
        self._mean_output[tenant] = (
            tokens_per_sequence
            if mean is None
            else OUTPUT_MEMORY * mean + (1 - OUTPUT_MEMORY) * tokens_per_sequence
        )

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
