"""An engine's step-cost line as seen from its outputs, for a replica's routing report.

The engine's own scheduler learns the exact line
(app/engine/vllm/core/draft_length_scheduler.py), but it lives in the engine-core process
and keeps it there. A replica sees what the engine hands back: every
step, each running request gets its new tokens at about the same moment. So outputs that
arrive within a short window are one step; while requests were running throughout, the time
from one step to the next is that step's cost, for its sequences and the tokens it produced.
Produced tokens stand in for computed ones (drafts that missed are not seen), so the line
prices a drafting step by what it yielded: a fair measure for ranking replicas, which is all
it is used for. Pure: the caller passes the clock.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.drafting.length_rule import StepCost, StepCostPrior

# Outputs this close together belong to one engine step.
BURST_WINDOW_S = 0.002
# A gap this long means the engine waited for work, not that a step took that long.
LONGEST_STEP_S = 5.0


@dataclass
class _Burst:
    started: float
    sequences: int = 0
    tokens: int = 0
    drafting: bool = False


class StepWatch:
    def __init__(self, prior: StepCostPrior) -> None:
        self.step_cost = StepCost(prior)
        self._burst: _Burst | None = None
        self._previous: float | None = None

    def output(self, now: float, new_tokens: int, drafting: bool) -> None:
        """One request's output at `now`: `new_tokens` tokens, from a request that drafts."""
        burst = self._burst
        if burst is None or now - burst.started > BURST_WINDOW_S:
            self._close()
            burst = self._burst = _Burst(now)
        burst.sequences += 1
        burst.tokens += new_tokens
        burst.drafting = burst.drafting or drafting

    def idle(self) -> None:
        """No request is running: the next gap is a wait, not a step."""
        self._burst, self._previous = None, None

    def _close(self) -> None:
        burst = self._burst
        if burst is None:
            return
        if self._previous is not None and 0 < burst.started - self._previous <= LONGEST_STEP_S:
            ms = 1000.0 * (burst.started - self._previous)
            self.step_cost.observe(burst.sequences, burst.tokens, burst.drafting, ms)
        self._previous = burst.started
