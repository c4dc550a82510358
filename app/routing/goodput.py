"""Each step's draft length for every request in one speculative engine, chosen by goodput.

With one engine serving every request, speculation is not on or off but a length k in
0..cap per request, and it can change at every step at no cost (no re-prefill, no move).
The engine's scheduler calls `choose_lengths` once per step, after the drafter has proposed
and before the step is scheduled; the same rule runs unchanged in the tests and in the
GPU-scale simulator, so this module imports nothing from vLLM and reads no clock.

The rule. A request whose drafts are accepted with probability a per position, verifying k
of them, yields (1 - a^(k+1)) / (1 - a) tokens in the step: the k+1-th draft adds a^(k+1).
The step costs T(sequences, tokens verified), a line learned from the engine's own step
times. The batch's goodput is its expected tokens N over T. One more draft token adds g to
N and the line's per-token slope c to T, so it raises N/T exactly when g / c > N / T. Since a
request's gains fall with k, adding the best remaining draft token while that holds reaches
the batch's best lengths. Every request's tokens weigh the same, so the rule also minimises
the summed time per token of the requests in the batch.

The acceptance a of each request is its own so far (recent steps weigh most), started from a
prior the gateway hands over at submission (its class's history). Drafts the rule leaves
out are still checked against the tokens the step produced, so a request that stopped
drafting keeps learning whether it should start again.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass

from app.routing.least_squares import RecursiveLeastSquares

# A prior acceptance counts as this many observed draft positions.
PRIOR_POSITIONS = 2.0
# Each step, earlier evidence about a request fades by this factor (about twenty steps
# remembered): answers change character part-way (a copy, then fresh prose).
EVIDENCE_DECAY = 0.95
# Step times fade too, about 500 steps remembered, so the line follows the machine.
STEP_FORGETTING = 0.998
STEP_PRIOR_WEIGHT = 20.0
# A draft token never costs less than this share of its prior price, however the fit drifts:
# a free token would make every proposal look worth verifying.
MIN_TOKEN_COST_SHARE = 0.1


@dataclass
class AcceptanceEstimate:
    """One request's per-position draft acceptance: a prior plus its own recent evidence."""

    prior: float
    prior_positions: float = PRIOR_POSITIONS
    hits: float = 0.0
    misses: float = 0.0

    @property
    def value(self) -> float:
        hits = self.prior * self.prior_positions + self.hits
        return hits / (self.prior_positions + self.hits + self.misses)

    def observe(self, hits: int, missed: bool) -> None:
        """One step's evidence: `hits` leading draft tokens matched, then a miss or not."""
        self.hits = self.hits * EVIDENCE_DECAY + hits
        self.misses = self.misses * EVIDENCE_DECAY + (1.0 if missed else 0.0)


def evidence(drafts: Sequence[int], produced: Sequence[int]) -> tuple[int, bool] | None:
    """(hits, missed) for a step: the drafts held for it against the tokens it produced.

    `drafts` are the tokens proposed for the step (verified or not), `produced` what the
    step emitted: the accepted drafts, then the model's own token. Each draft that matches
    the produced token at its position is a hit, until the first mismatch; past the produced
    tokens nothing is known. None when there is nothing to compare.
    """
    hits = 0
    for draft, token in zip(drafts, produced, strict=False):
        if draft != token:
            return hits, True
        hits += 1
    return (hits, False) if hits else None


def expected_tokens(acceptance: float, k: int) -> float:
    """Tokens a step yields for a request verifying k drafts: (1 - a^(k+1)) / (1 - a)."""
    return sum(acceptance**j for j in range(k + 1))


@dataclass(frozen=True)
class StepCostPrior:
    """Milliseconds per engine step: base, plus per sequence, plus per token computed."""

    base_ms: float
    per_sequence_ms: float
    per_token_ms: float


# Fitted from the step times of the embedded default (SmolLM2-135M, float32, eager, ngram
# K=5) in one engine on both cores of the 2-core CPU specgate is developed on (README,
# "One engine"); traffic replaces them within a few hundred steps.
CPU_STEP_PRIOR = StepCostPrior(base_ms=22.0, per_sequence_ms=3.0, per_token_ms=2.5)
# Llama-3.1-8B on one H200, from aiconfigurator's figures for vLLM (not measured here):
# a decode step costs 4.86 ms at batch 1 and 7.57 at batch 64; non-attention work priced
# per token verified puts a draft token near 0.012 ms.
GPU_STEP_PRIOR = StepCostPrior(base_ms=4.8, per_sequence_ms=0.03, per_token_ms=0.012)


class StepCost:
    """The engine's time per step as a line in (sequences, tokens), learned from its steps."""

    def __init__(self, prior: StepCostPrior) -> None:
        self.prior = prior
        self._fit = RecursiveLeastSquares(
            (prior.base_ms, prior.per_sequence_ms, prior.per_token_ms),
            STEP_PRIOR_WEIGHT,
            STEP_FORGETTING,
        )

    @property
    def samples(self) -> int:
        return self._fit.samples

    @property
    def per_token_ms(self) -> float:
        return max(self._fit.theta[2], MIN_TOKEN_COST_SHARE * self.prior.per_token_ms)

    def predict(self, sequences: int, tokens: int) -> float:
        floor = MIN_TOKEN_COST_SHARE * self.prior.base_ms
        return max(floor, self._fit.predict((1.0, float(sequences), float(tokens))))

    def observe(self, sequences: int, tokens: int, ms: float) -> None:
        self._fit.observe((1.0, float(sequences), float(tokens)), ms)

    def snapshot(self) -> dict[str, float | int]:
        base, per_sequence, per_token = self._fit.theta
        return {
            "base_ms": round(base, 3),
            "per_sequence_ms": round(per_sequence, 3),
            "per_token_ms": round(per_token, 4),
            "samples": self.samples,
        }


@dataclass(frozen=True)
class Candidate:
    """One request's drafting options for the coming step."""

    # Draft tokens on offer: what the drafter proposed, already cut to the request's cap.
    available: int
    acceptance: float
    # True: the rule picks 0..available; False: the client fixed the length (all available).
    adaptive: bool = True


def choose_lengths(candidates: Sequence[Candidate], sequences: int, cost: StepCost) -> list[int]:
    """Each candidate's draft length for the step that decodes `sequences` sequences.

    `sequences` counts every sequence in the step, candidates or not; each yields at least
    one token and adds one token to the step.
    """
    lengths = [0 if c.adaptive else c.available for c in candidates]
    tokens = sequences + sum(lengths)
    produced = float(sequences) + sum(
        expected_tokens(c.acceptance, k) - 1.0 for c, k in zip(candidates, lengths, strict=True)
    )
    per_token = cost.per_token_ms
    step_ms = cost.predict(sequences, tokens)
    # Max-heap of each adaptive request's next draft token's gain, a^(k+1).
    gains = [(-c.acceptance, i) for i, c in enumerate(candidates) if c.adaptive and c.available]
    heapq.heapify(gains)
    while gains:
        negative_gain, i = gains[0]
        gain = -negative_gain
        if gain * step_ms <= per_token * produced:
            break  # the best remaining draft token would lower the batch's tokens per ms
        heapq.heappop(gains)
        lengths[i] += 1
        produced += gain
        step_ms += per_token
        if lengths[i] < candidates[i].available:
            heapq.heappush(gains, (-(candidates[i].acceptance ** (lengths[i] + 1)), i))
    return lengths
