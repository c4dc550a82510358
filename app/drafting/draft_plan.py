"""One engine's draft-length planning state: each request's acceptance so far and the
engine's step-cost line, applied through the rule in app/drafting/length_rule.py.

The engine's scheduler (app/engine/vllm/core/draft_length_scheduler.py) and the GPU-scale simulator
(bench/gpu_sim) both drive this class, so what the simulator runs is what the engine runs:
offers in, lengths out, then each step's time and each request's evidence back in. Nothing
here reads a clock or imports vLLM; the caller measures (or simulates) the step.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Literal

from app.drafting.confidence import ConfidenceCalibration
from app.drafting.length_rule import (
    AcceptanceEstimate,
    Candidate,
    StepCost,
    StepCostPrior,
    choose_lengths,
    evidence,
)

# A step-cost term the rule stops paying for is never measured again: had the line once
# overpriced drafting, the engine would stop drafting for good (in the GPU simulation the
# speculative path's learned price did exactly that at 32 in flight: 1.57x the oracle's
# latency). So after this many steps in a row without drafts while drafts were on offer,
# one step drafts: the rule's best choice that drafts at least one token.
MEASURE_DRAFTING_AFTER_STEPS = 50
# A request that asked for a fixed length is assumed to accept this share per position
# until its own drafts say otherwise (it only weighs in the batch's expected tokens).
FIXED_LENGTH_PRIOR = 0.5
# Where a request's drafts come from: its drafter's guesses (n-gram, suffix trees, a draft
# model), or the client's prediction of the answer (app/drafting/prediction_drafts.py). Each
# source's acceptance is learned apart: a prediction that lands says nothing of the trees.
Source = Literal["drafter", "prediction"]


@dataclass(frozen=True)
class Offer:
    """One request's drafts on offer for the coming step."""

    request_id: str
    # Draft tokens proposed, already cut to the request's cap.
    available: int
    # Its class's acceptance prior: the rule picks 0..available. None: the client fixed the
    # length, and every available draft is verified.
    prior: float | None
    # The drafter's confidence in each token on offer (suffix trees give one), and the length
    # of the match the draft came from; None: the request's own acceptance prices every
    # position.
    confidence: tuple[float, ...] | None = None
    match_length: int = 0
    # The request samples (temperature above 0): its drafts land by the target's probability
    # of each token, not by whether the token is its argmax, so its confidence is calibrated
    # apart from greedy requests'.
    sampled: bool = False
    source: Source = "drafter"


class DraftPlanner:
    def __init__(self, step_prior: StepCostPrior, fixed_step_cost: bool = False) -> None:
        self.step_cost = StepCost(step_prior, fixed_step_cost)
        self._acceptance: dict[tuple[str, Source], AcceptanceEstimate] = {}
        # The same drafter probability lands far less often for a sampled request than for
        # a greedy one: calibrated in one table, creative prompts at temperature 1 drafted on
        # the greedy requests' record and lost 40-70 % to never drafting (issue 40).
        self.calibration = ConfidenceCalibration()  # greedy requests'
        self.sampled_calibration = ConfidenceCalibration()
        self._steps_without_drafts = 0

    def lengths(self, offers: Sequence[Offer], sequences: int) -> list[int]:
        """Each offer's draft length for a step of `sequences` sequences (offers or not)."""
        candidates = []
        for offer in offers:
            key = (offer.request_id, offer.source)
            estimate = self._acceptance.get(key)
            if estimate is None:
                prior = FIXED_LENGTH_PRIOR if offer.prior is None else offer.prior
                estimate = self._acceptance[key] = AcceptanceEstimate(prior)
            positions = None
            if offer.confidence:
                offered = offer.confidence[: offer.available]
                table = self.calibration_for(offer.sampled)
                positions = table.positions(offered, offer.match_length)
            candidates.append(
                Candidate(
                    offer.available,
                    estimate.value,
                    adaptive=offer.prior is not None,
                    positions=positions,
                )
            )
        measure = self._steps_without_drafts >= MEASURE_DRAFTING_AFTER_STEPS
        lengths = choose_lengths(candidates, sequences, self.step_cost, at_least=int(measure))
        if any(lengths):
            self._steps_without_drafts = 0
        elif any(c.adaptive and c.available for c in candidates):
            self._steps_without_drafts += 1
        return lengths

    def observe_step(self, sequences: int, tokens: int, drafting: bool, ms: float) -> None:
        """A step's time: `tokens` computed in all (prompt chunks included)."""
        self.step_cost.observe(sequences, tokens, drafting, ms)

    def calibration_for(self, sampled: bool) -> ConfidenceCalibration:
        return self.sampled_calibration if sampled else self.calibration

    def observe_drafts(
        self,
        request_id: str,
        drafts: Sequence[int],
        produced: Sequence[int],
        confidence: Sequence[float] | None = None,
        match_length: int = 0,
        sampled: bool = False,
        source: Source = "drafter",
    ) -> int:
        """A step's outcome for one request: every draft proposed for it (verified or held
        back) against the tokens the step produced, with the drafter's confidence in each
        and the length of the match they came from. Returns how many of the drafts the step
        produced."""
        found = evidence(drafts, produced)
        if found is None:
            return 0
        self.observe_outcome(request_id, *found, source=source)
        if confidence:
            self.calibration_for(sampled).observe(confidence, *found, match_length)
        return found[0]

    def observe_outcome(
        self, request_id: str, hits: int, missed: bool, source: Source = "drafter"
    ) -> None:
        """A step's outcome for one request known only by count: `hits` verified drafts
        landed, then one missed or not (async scheduling: the proposals stay in the worker)."""
        estimate = self._acceptance.get((request_id, source))
        if estimate is not None:
            estimate.observe(hits, missed)

    def forget_all_but(self, live: Collection[str]) -> None:
        for key in [key for key in self._acceptance if key[0] not in live]:
            del self._acceptance[key]
