"""Each step's draft length for every request in one speculative engine, chosen for the
batch's time per token.

With one engine serving every request, speculation is not on or off but a length k in
0..cap per request, and it can change at every step at no cost (no re-prefill, no move).
The engine's scheduler calls `choose_lengths` once per step, after the drafter has proposed
and before the step is scheduled; the same rule runs unchanged in the tests and in the
GPU-scale simulator, so this module imports nothing from vLLM and reads no clock.

The rule. A request whose drafts are accepted with probability a per position, verifying k
of them, yields E(k) = (1 - a^(k+1)) / (1 - a) tokens in the step: the k+1-th draft adds
a^(k+1). The step costs T, a line learned from the engine's own step times in the sequences,
the tokens verified, and the sequences again when anything drafts (the speculative path
costs every sequence in such a step, drafting or not). The rule minimises the step's time
per token the batch produces, T / sum(E_i). For each number of draft tokens in the step the
best choice is the largest gains a_i^(k+1), and the rule takes the number whose ratio is
least, drafting nothing included (a step without drafts skips the speculative path's price).

Why the batch's time per token, and not each request's summed (T * sum(1 / E_i), the rule
until issue 30): the summed measure charges one draft token to every request in the step,
so in a crowded step it drafts almost nothing, though a request whose drafts land finishes
sooner and leaves the batch, and every later step is cheaper for the others. On the 2-core
CPU, where a verified token costs about what a decoded one does (the GEMMs are compute-bound
from a few rows on), the summed measure drafted one token a step for a few requests in a
burst of 24; this one drafts several for those whose drafts land. Under changing load
(bench/RESULTS.md, issue 30) it took `auto` from 0.99 to 0.88 of never drafting on the mean
end to end (burst 1.06 to 0.92), two interleaved repeats. (This measure had lost before,
1.8x never drafting in a burst, while a drafting step paid vLLM's rejection-sampler noise
for every request and numba's thread pool: docs/engines.md.)

The acceptance a of each request is its own so far (recent steps weigh most), started from a
prior the gateway hands over at submission (its class's history). A drafter that says how
sure it is of each token (suffix trees: how often each token followed the matched text)
gives each position its own chance instead, calibrated against what steps accept
(app/drafting/confidence.py); the k+1-th draft then adds the product of the first k+1.
Drafts the rule leaves out are still checked against the tokens the step produced, so a
request that stopped drafting keeps learning whether it should start again.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from app.drafting.least_squares import RecursiveLeastSquares

# A prior acceptance counts as this many observed draft positions.
PRIOR_POSITIONS = 2.0
# Each step, earlier evidence about a request fades by this factor (about twenty steps
# remembered): answers change character part-way (a copy, then fresh prose).
EVIDENCE_DECAY = 0.95
# Step times fade too, about 500 steps remembered, so the line follows the machine.
STEP_FORGETTING = 0.998
STEP_PRIOR_WEIGHT = 20.0
# The priors count as STEP_PRIOR_WEIGHT steps of this shape (sequences, tokens, sequences
# drafting), so each term holds as firmly as the others whatever its units. (One weight for
# every coefficient in raw units let the per-token terms swing on a fresh engine's first,
# prefill-heavy steps: in the GPU simulation the line priced drafting out of the first few
# hundred steps at 32 in flight.)
TYPICAL_STEP = (4.0, 16.0, 4.0)
# A term no step exercises (prompt-free, drafting-free traffic) may grow this many times
# its prior's uncertainty, enough to be learned quickly once steps show it.
STEP_WINDUP = 10.0
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
    """Milliseconds per engine step: base, per sequence, per token computed (prompt, decoded
    or verified), and per sequence again in a step where any request drafts (the speculative
    path: every sequence's logits go through the rejection sampler, not only the drafting
    ones').

    Prompt tokens share the per-token term, though on a GPU they cost more than a verified
    token below about 128 tokens a step (the GPU simulation: 0.022 ms against 0.004 at 32
    in flight, which left drafts there 6 % short of the oracle's latency). A term of their
    own closed that gap in the simulation, but on the CPU's real step traces it left the
    verified-token price without an anchor: in a burst, decoded tokens follow the sequences
    so closely that the fit put -0.65 ms on each, and the engine drafted for a poem.
    """

    base_ms: float
    per_sequence_ms: float
    per_token_ms: float
    per_sequence_drafting_ms: float


# Fitted (least squares over 2,073 steps) to the step times of the embedded default
# (SmolLM2-135M, float32, eager, ngram K=5) in one engine on both cores of the 2-core CPU
# specgate is developed on: the tune split's changing-load replay with `auto` (1,623 steps, 552
# drafting) and one burst of 24 with `auto` and with `off` (450). A step in which anything
# drafts costs every sequence about 1 ms more: 1.9 in the burst alone, -0.2 in the quiet
# replay, where few sequences share a drafting step. (It was about 3 ms while the rejection
# sampler drew noise for the whole batch: app/engine/vllm/worker/drafting_patches.py.)
# Traffic replaces them within a few hundred steps.
CPU_STEP_PRIOR = StepCostPrior(
    base_ms=34.1, per_sequence_ms=0.84, per_token_ms=1.38, per_sequence_drafting_ms=0.94
)
# Llama-3.1-8B on one H200, from aiconfigurator's figures for vLLM (not measured here):
# a decode step's kernels cost 4.86 ms at batch 1 and 7.57 at batch 64, and vLLM's host
# work adds about 1.2 ms a step when scheduling is synchronous (as for n-gram drafting;
# SpecDecode-Bench's fit to vLLM 0.10.1 on an H100); non-attention work priced per token
# verified puts a draft token near 0.012 ms (0.004 below about 128 tokens a step, 0.02
# above: the GPU simulation's learned lines, bench/results/gpu_sim/). The speculative
# path's price per sequence is a guess (the rejection sampler's work per row), not a
# measurement.
GPU_STEP_PRIOR = StepCostPrior(
    base_ms=6.0,
    per_sequence_ms=0.03,
    per_token_ms=0.012,
    per_sequence_drafting_ms=0.005,
)


class StepTime(Protocol):
    """What a step of this shape costs, in ms: a learned line (StepCost), or in the GPU
    simulator's oracle the simulated engine's own price."""

    def predict(self, sequences: int, tokens: int, drafting: bool = False) -> float: ...


class StepCost:
    """The engine's time per step as a line in (sequences, tokens, sequences if drafting),
    learned from its own steps, or held at the prior when `fixed`.

    A fixed line is the operator's (--draft-step-cost): lengths then follow each request's
    acceptance and the batch alone, never how busy the machine happened to be while the
    line was learned (a test of the rule on a loaded machine drafted for a poem).
    """

    def __init__(self, prior: StepCostPrior, fixed: bool = False) -> None:
        self.prior = prior
        self.fixed = fixed
        self._steps = 0
        self._fit = RecursiveLeastSquares(
            (
                prior.base_ms,
                prior.per_sequence_ms,
                prior.per_token_ms,
                prior.per_sequence_drafting_ms,
            ),
            [STEP_PRIOR_WEIGHT * scale**2 for scale in (1.0, *TYPICAL_STEP)],
            STEP_FORGETTING,
            STEP_WINDUP,
        )

    @property
    def samples(self) -> int:
        """Steps observed (a fixed line counts them without learning from them)."""
        return self._steps

    @property
    def per_token_ms(self) -> float:
        return max(self._fit.theta[2], MIN_TOKEN_COST_SHARE * self.prior.per_token_ms)

    def _per_sequence(self) -> tuple[float, float]:
        """(per sequence, per sequence again if drafting), neither below zero.

        Where nearly every step drafts, the two terms are one to the fit, and it may trade
        them against each other (in the GPU simulation: -5.8 and +5.8 ms). A negative price
        per sequence moves to the drafting term, so a step that drafts keeps its fitted
        price and one that does not is never made cheaper by its sequences; a negative
        drafting term counts as none.
        """
        per_sequence, drafting = self._fit.theta[1], self._fit.theta[3]
        if per_sequence < 0:
            per_sequence, drafting = 0.0, drafting + per_sequence
        return per_sequence, max(0.0, drafting)

    def drafting_ms(self, sequences: int) -> float:
        """What a step of `sequences` costs more when any of them drafts, tokens aside."""
        return self._per_sequence()[1] * sequences

    def predict(self, sequences: int, tokens: int, drafting: bool = False) -> float:
        base, per_sequence = self._fit.theta[0], self._per_sequence()[0]
        step = base + per_sequence * sequences + self.per_token_ms * tokens
        floor = MIN_TOKEN_COST_SHARE * self.prior.base_ms
        return max(floor, step) + (self.drafting_ms(sequences) if drafting else 0.0)

    def observe(self, sequences: int, tokens: int, drafting: bool, ms: float) -> None:
        self._steps += 1
        if not self.fixed:
            self._fit.observe(_features(sequences, tokens, drafting), ms)

    def snapshot(self) -> dict[str, float | int]:
        base, per_sequence, per_token, per_sequence_drafting = self._fit.theta
        return {
            "base_ms": round(base, 3),
            "per_sequence_ms": round(per_sequence, 3),
            "per_token_ms": round(per_token, 4),
            "per_sequence_drafting_ms": round(per_sequence_drafting, 4),
            "samples": self.samples,
            "fixed": self.fixed,
        }


def _features(sequences: int, tokens: int, drafting: bool) -> tuple[float, ...]:
    return (1.0, float(sequences), float(tokens), float(sequences) if drafting else 0.0)


@dataclass(frozen=True)
class Candidate:
    """One request's drafting options for the coming step."""

    # Draft tokens on offer: what the drafter proposed, already cut to the request's cap.
    available: int
    acceptance: float
    # True: the rule picks 0..available; False: the client fixed the length (all available).
    adaptive: bool = True
    # Per draft position on offer, the chance it lands once those before it have (the
    # drafter's own confidence, calibrated: app/drafting/confidence.py); None: `acceptance`
    # at every position.
    positions: tuple[float, ...] | None = None

    def gain(self, k: int) -> float:
        """What verifying draft k+1 adds to the step's expected tokens: the chance that
        drafts 1..k+1 all land. It never grows with k, which keeps the rule exact."""
        if self.positions is None or k >= len(self.positions):
            return float(self.acceptance ** (k + 1))
        return math.prod(self.positions[: k + 1])

    def expected_tokens(self, k: int) -> float:
        """Tokens the step yields for this request verifying k drafts."""
        return 1.0 + sum(self.gain(j) for j in range(k))


def choose_lengths(
    candidates: Sequence[Candidate], sequences: int, cost: StepTime, at_least: int = 0
) -> list[int]:
    """Each candidate's draft length for the step that decodes `sequences` sequences.

    `at_least`: the fewest draft tokens the adaptive candidates take between them (as far
    as they have any on offer), the best such choice; 1 makes a step draft for the sake of
    measuring what drafting costs.

    `sequences` counts every sequence in the step, candidates or not; each yields at least
    one token and adds one token to the step. Exact for the rule's measure, T / sum(E): for
    any number D of draft tokens, taking the D largest gains (request i's next draft token
    adds a_i^(k+1), which falls with k) gives the largest sum(E), and T depends on D alone,
    so the best D is found by walking that order once. A step that drafts nothing skips the
    speculative path's price.
    """
    if not candidates:
        return []
    lengths = [0 if c.adaptive else c.available for c in candidates]
    tokens = sequences + sum(lengths)
    # Sequences without a candidate (a prompt chunk, a request with nothing on offer) yield
    # one token each.
    produced: float = max(sequences, len(candidates)) - len(candidates)
    produced += sum(c.expected_tokens(k) for c, k in zip(candidates, lengths, strict=True))
    best = cost.predict(sequences, tokens, any(lengths)) / produced if at_least <= 0 else math.inf
    best_count = 0
    order: list[int] = []  # the adaptive requests in the order their draft tokens are added

    def gain(i: int, k: int) -> float:
        """What request i's draft token k+1 adds to the step's expected tokens."""
        return candidates[i].gain(k)

    added = [0] * len(candidates)
    heap = [(-gain(i, 0), i) for i, c in enumerate(candidates) if c.adaptive and c.available]
    heapq.heapify(heap)
    while heap:
        negative, i = heapq.heappop(heap)
        produced -= negative
        added[i] += 1
        order.append(i)
        step = cost.predict(sequences, tokens + len(order), True) / produced
        if step < best or len(order) <= at_least:
            best, best_count = step, len(order)
        if added[i] < candidates[i].available:
            heapq.heappush(heap, (-gain(i, added[i]), i))
    for i in order[:best_count]:
        lengths[i] += 1
    return lengths
