"""How often drafts land, per workload class and drafting method: the simulator's inputs,
each with its source. Simulated requests draw their own acceptance around these.

Each request's answer is a sequence of token positions; at every position a draft either
matches the token the target model produces or not, and (for n-gram drafting) a proposal
either exists there or not. Matches follow a two-state chain: after a hit the next draft
lands with probability `after_hit`, after a miss with `after_miss`, so copying comes in runs
the way prompt lookup sees it. Drawing the pattern once per request, by position, gives every
arm the same answer to draft against (common random numbers): arms differ only in how many
drafts they verify at each step.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

METHODS = ("ngram", "draft_model", "eagle", "suffix")
CLASSES = ("code", "json", "edit", "chat", "creative")


@dataclass(frozen=True)
class Acceptance:
    """Per-position draft acceptance of one phase of an answer."""

    after_hit: float
    after_miss: float
    # Share of positions where the drafter proposes anything at all (n-gram: a match in the
    # context); model drafters always propose.
    proposes: float = 1.0

    @property
    def mean(self) -> float:
        """Stationary share of positions whose draft lands."""
        return self.after_miss / (1.0 - self.after_hit + self.after_miss)


# Sources, per method:
# - ngram: this project's measured per-class acceptance of prompt-lookup drafts (K=5) given
#   a proposal, replayed over the tune split's answers (app/routing/learner.py,
#   PRIOR_POSITION_ACCEPTANCE: structured 0.68, edit 0.67-0.70, code 0.5, open-ended 0.6, on
#   SmolLM2-135M); and vLLM PR #24344 (code edits, K=5: positions land 0.81, 0.74, 0.70, 0.68,
#   0.66 unconditionally, i.e. about 0.81 then 0.91-0.97 after a hit; 821 of 5,376 tokens
#   had no match, so proposals at 85 %). The shares of positions with a proposal for the
#   other classes are assumptions, not measurements.
# - eagle: EAGLE-3 for Llama-3.1-8B-Instruct in vLLM, K=7, MT-bench: positions land 0.74,
#   0.54, 0.41, 0.31, 0.23, ... unconditionally (vLLM issue #26191), about 0.74 each given
#   the one before; per task, mean acceptance length 2.77 (MT-bench), 3.49 (HumanEval),
#   3.34 (GSM8K) at T=1, K=7 (model card of nebius/EAGLE3-Llama-3.3-70B-Instruct). Code's
#   0.80 follows from HumanEval's length; JSON, edits and creative are assumptions.
# - draft_model: no published per-position acceptance was found for Llama-3.2-1B drafting
#   Llama-3.1-8B or -70B; these are assumptions set a little above EAGLE-3's, as the
#   draft-model method beat EAGLE on Llama-3-70B in "Speculative Decoding: Performance or
#   Illusion?" (arXiv 2601.11580, vLLM 0.10.1, H100).
CLASS_ACCEPTANCE: dict[str, dict[str, Acceptance]] = {
    "ngram": {
        "code": Acceptance(after_hit=0.75, after_miss=0.35, proposes=0.5),
        "json": Acceptance(after_hit=0.85, after_miss=0.5, proposes=0.7),
        "edit": Acceptance(after_hit=0.93, after_miss=0.8, proposes=0.85),
        "chat": Acceptance(after_hit=0.7, after_miss=0.3, proposes=0.35),
        "creative": Acceptance(after_hit=0.6, after_miss=0.15, proposes=0.15),
    },
    "eagle": {
        "code": Acceptance(after_hit=0.8, after_miss=0.8),
        "json": Acceptance(after_hit=0.82, after_miss=0.82),
        "edit": Acceptance(after_hit=0.85, after_miss=0.85),
        "chat": Acceptance(after_hit=0.74, after_miss=0.74),
        "creative": Acceptance(after_hit=0.6, after_miss=0.6),
    },
    "draft_model": {
        "code": Acceptance(after_hit=0.82, after_miss=0.82),
        "json": Acceptance(after_hit=0.84, after_miss=0.84),
        "edit": Acceptance(after_hit=0.87, after_miss=0.87),
        "chat": Acceptance(after_hit=0.77, after_miss=0.77),
        "creative": Acceptance(after_hit=0.62, after_miss=0.62),
    },
    # - suffix: suffix trees over the prompt and earlier answers (arctic-inference 0.3.0, as
    #   vLLM 0.32's `method: "suffix"` runs it). This project measured vLLM's suffix arm on
    #   its agent-shaped traffic (bench/agent_traffic.py, SmolLM2-135M on a CPU, greedy):
    #   positions landed 0.52, 0.31, 0.21, 0.17, 0.15, 0.11, ... unconditionally (about 0.52
    #   first, then 0.6-0.9 given the one before), mean acceptance length 2.95. SuffixDecoding
    #   (Oliaro et al., NeurIPS 2025) reports up to 5.3x on AgenticSQL and 1.4-3.9x over
    #   prompt lookup on SWE-Bench, and about prompt lookup's speed on Spec-Bench's open-ended
    #   tasks: proposals where the trees match more often than n-gram's, and long runs where
    #   answers repeat. The per-class values are assumptions set from those.
    "suffix": {
        "code": Acceptance(after_hit=0.8, after_miss=0.35, proposes=0.6),
        "json": Acceptance(after_hit=0.88, after_miss=0.5, proposes=0.8),
        "edit": Acceptance(after_hit=0.93, after_miss=0.75, proposes=0.9),
        "chat": Acceptance(after_hit=0.7, after_miss=0.25, proposes=0.4),
        "creative": Acceptance(after_hit=0.55, after_miss=0.1, proposes=0.2),
    },
}
# An answer that changes character part-way: fresh text first, then a copy of the context
# (a reply that explains, then quotes the edited file). Assumed, not measured.
COPYING = {
    "ngram": Acceptance(after_hit=0.95, after_miss=0.85, proposes=0.95),
    "eagle": Acceptance(after_hit=0.9, after_miss=0.9),
    "draft_model": Acceptance(after_hit=0.93, after_miss=0.93),
    "suffix": Acceptance(after_hit=0.95, after_miss=0.8, proposes=0.95),
}
# The share of each class's answers that repeat an earlier answer nearly whole (an agent's
# next record in the same shape, a tool loop's next call, a file returned again): the global
# tree drafts them from the first token. Only a suffix drafter sees earlier answers. Assumed:
# SuffixDecoding's agentic traces are where such repeats are common; chat and creative
# answers rarely repeat.
REPEATS = {"code": 0.3, "json": 0.5, "edit": 0.5, "chat": 0.1, "creative": 0.0}
REPEATING = Acceptance(after_hit=0.97, after_miss=0.7, proposes=0.98)

# Tokens of the context a draft's match starts with where the trees match at all (the
# shortest pattern that finds a continuation): an assumption.
SUFFIX_MATCH_START = 2
# The longest match the patterns record: the deepest trees any arm builds.
SUFFIX_MATCH_MAX = 64
# Requests differ within a class: each draws its own chance around the class's (a beta of
# this many pseudo-observations).
SPREAD = 12.0


def _jitter(rng: random.Random, p: float) -> float:
    p = min(max(p, 0.01), 0.99)
    return rng.betavariate(p * SPREAD, (1.0 - p) * SPREAD)


def request_acceptance(rng: random.Random, method: str, workload: str) -> Acceptance:
    base = CLASS_ACCEPTANCE[method][workload]
    if base.after_hit == base.after_miss:  # positions independent: one chance per request
        chance = _jitter(rng, base.after_hit)
        return Acceptance(chance, chance, base.proposes)
    return Acceptance(_jitter(rng, base.after_hit), _jitter(rng, base.after_miss), base.proposes)


@dataclass(frozen=True)
class DraftPattern:
    """Per output position: whether a draft for it lands, and whether one is proposed."""

    lands: tuple[bool, ...]
    proposed: tuple[bool, ...]
    # The true per-position acceptance of the answer's phase at each position, given a
    # proposal: what the oracle knows.
    chance: tuple[float, ...]
    # A suffix drafter's view per position: the length of the match a draft from there comes
    # from (what bounds how far its trees draft), and its probability for the token there.
    # None for the other drafters, which offer the engine's K wherever they propose.
    match: tuple[int, ...] | None = None
    confidence: tuple[float, ...] | None = None
    # Per position, whether the draft there comes from the request's own prediction of its
    # answer (Predicted Outputs: bench/gpu_sim/predicted_outputs.py); None: never.
    predicted: tuple[bool, ...] | None = None

    def predicted_at(self, start: int) -> bool:
        return self.predicted is not None and start < len(self.predicted) and self.predicted[start]

    def run_length(self, start: int, limit: int) -> int:
        """How many drafts in a row land from position `start`, at most `limit`."""
        length = 0
        while length < limit and start + length < len(self.lands) and self.lands[start + length]:
            length += 1
        return length

    def available(self, start: int, k: int, longest: Callable[[int], int] | None = None) -> int:
        """Drafts the drafter offers at `start` (n-gram: none where it finds no match); a
        suffix drafter's are bounded by `longest` of the match there."""
        if start >= len(self.proposed) or not self.proposed[start]:
            return 0
        if self.match is None or longest is None:
            return k
        return min(k, longest(self.match[start]))

    def offered_confidence(self, start: int, count: int) -> tuple[float, ...] | None:
        if self.confidence is None:
            return None
        return self.confidence[start : start + count]

    def match_at(self, start: int) -> int:
        return 0 if self.match is None or start >= len(self.match) else self.match[start]


def draw_pattern(
    rng: random.Random, phases: list[tuple[int, Acceptance]], length: int
) -> DraftPattern:
    """`phases`: (first position, acceptance) pairs in order; the first starts at 0."""
    lands, proposed, chance = [], [], []
    hit = False
    for position in range(length):
        phase = [acceptance for start, acceptance in phases if start <= position][-1]
        p = phase.after_hit if hit else phase.after_miss
        hit = rng.random() < p
        lands.append(hit)
        proposed.append(rng.random() < phase.proposes)
        chance.append(phase.mean)
    return DraftPattern(tuple(lands), tuple(proposed), tuple(chance))


def with_suffix_drafts(
    rng: random.Random, pattern: DraftPattern, phases: list[tuple[int, Acceptance]]
) -> DraftPattern:
    """`pattern` as a suffix drafter offers it. The match grows along a run of landed
    positions (the answer keeps following earlier text) and starts over after a miss; the
    drafter's probability for a token scatters around its phase's chance after a hit (its
    frequency counts know the text, not the target model)."""
    match, confidence, offered = [], [], []
    run = 0
    for position, proposed in enumerate(pattern.proposed):
        phase = [acceptance for start, acceptance in phases if start <= position][-1]
        # Text that has been following earlier text still matches it.
        proposed = proposed or run > 0
        offered.append(proposed)
        match.append(min(run + SUFFIX_MATCH_START, SUFFIX_MATCH_MAX) if proposed else 0)
        confidence.append(_jitter(rng, phase.after_hit))
        run = run + 1 if pattern.lands[position] else 0
    return DraftPattern(
        pattern.lands, tuple(offered), pattern.chance, tuple(match), tuple(confidence)
    )
