"""The per-step draft-length rule (app/drafting/length_rule.py), with controlled inputs."""

from __future__ import annotations

import itertools
import random

import pytest

from app.drafting.length_rule import (
    CPU_STEP_PRIOR,
    GPU_STEP_PRIOR,
    AcceptanceEstimate,
    Candidate,
    StepCost,
    StepCostPrior,
    choose_lengths,
    evidence,
    expected_tokens,
)


def time_per_token(
    candidates: list[Candidate],
    lengths: tuple[int, ...] | list[int],
    sequences: int,
    cost: StepCost,
) -> float:
    """What the rule minimises: the step's time over the tokens the batch expects from it."""
    step = cost.predict(sequences, sequences + sum(lengths), any(lengths))
    produced = sum(yielded(c, k) for c, k in zip(candidates, lengths, strict=True))
    return step / (produced + sequences - len(candidates))


def yielded(candidate: Candidate, k: int) -> float:
    """Expected tokens from verifying k drafts: the bonus token, plus each draft that lands
    with all those before it (its position's own chance where the candidate has them)."""
    chances = candidate.positions or (candidate.acceptance,) * k
    total, landed = 1.0, 1.0
    for chance in chances[:k]:
        landed *= chance
        total += landed
    return total


def test_expected_tokens_is_the_geometric_sum() -> None:
    assert expected_tokens(0.5, 0) == 1.0
    assert expected_tokens(0.5, 3) == pytest.approx((1 - 0.5**4) / (1 - 0.5))
    assert expected_tokens(0.0, 5) == 1.0


@pytest.mark.parametrize(
    ("drafts", "produced", "found"),
    [
        ([7, 8, 9], [7, 8, 5], (2, True)),  # two accepted, the third rejected
        ([7, 8, 9], [7, 8, 9, 4], (3, False)),  # all accepted, the bonus token unseen
        ([7, 8], [7, 8, 3], (2, False)),
        ([7, 8, 9], [7], (1, False)),  # a held draft matched the step's only token
        ([7, 8, 9], [6], (0, True)),  # it did not
        ([], [6], None),
        ([7], [], None),
    ],
)
def test_evidence_counts_leading_matches_then_the_miss(
    drafts: list[int], produced: list[int], found: tuple[int, bool] | None
) -> None:
    assert evidence(drafts, produced) == found


def test_acceptance_starts_at_the_prior_and_follows_recent_steps() -> None:
    estimate = AcceptanceEstimate(prior=0.6)
    assert estimate.value == pytest.approx(0.6)
    for _ in range(30):
        estimate.observe(0, True)  # every draft missed at once
    assert estimate.value < 0.1
    for _ in range(30):
        estimate.observe(3, False)  # then the answer starts copying
    assert estimate.value > 0.8


def test_a_cheap_verification_drafts_everything_on_offer() -> None:
    cost = StepCost(GPU_STEP_PRIOR)
    candidates = [Candidate(5, 0.7), Candidate(3, 0.4)]
    assert choose_lengths(candidates, sequences=2, cost=cost) == [5, 3]


def test_an_expensive_verification_drafts_nothing_for_fresh_text() -> None:
    cost = StepCost(StepCostPrior(20, 3, 10, 0.0))
    assert choose_lengths([Candidate(5, 0.1)], sequences=1, cost=cost) == [0]


def test_a_fixed_length_is_kept_whatever_it_costs() -> None:
    cost = StepCost(StepCostPrior(20, 3, 10, 0.0))
    candidates = [Candidate(4, 0.0, adaptive=False), Candidate(5, 0.1)]
    assert choose_lengths(candidates, sequences=2, cost=cost) == [4, 0]


def test_the_same_request_drafts_less_as_the_batch_grows() -> None:
    # A compute-bound device: each token computed costs far more than each sequence.
    cost = StepCost(StepCostPrior(20, 0.5, 4, 0.0))
    lengths = [
        choose_lengths([Candidate(5, 0.6)], sequences=n, cost=cost)[0] for n in (1, 2, 4, 8, 32)
    ]
    assert lengths == sorted(lengths, reverse=True)
    assert lengths[0] >= 2 and lengths[-1] == 0


def test_likelier_drafts_get_at_least_as_many_tokens() -> None:
    cost = StepCost(CPU_STEP_PRIOR)
    candidates = [Candidate(5, a) for a in (0.2, 0.5, 0.8, 0.95)]
    lengths = choose_lengths(candidates, sequences=4, cost=cost)
    assert lengths == sorted(lengths)
    assert lengths[-1] > lengths[0]


def test_the_lengths_minimise_the_batchs_time_per_token() -> None:
    rng = random.Random(7)
    priors = [
        CPU_STEP_PRIOR,
        GPU_STEP_PRIOR,
        StepCostPrior(10, 1, 4, 0.0),
        StepCostPrior(20, 1, 3, 2),
    ]
    for _ in range(200):
        cost = StepCost(rng.choice(priors))
        candidates = []
        for _ in range(rng.randint(1, 3)):
            available = rng.randint(0, 3)
            # Half with a chance per position, as a confident drafter's calibrated drafts.
            chances = tuple(rng.random() for _ in range(available))
            positions = chances if rng.random() < 0.5 else None
            adaptive = rng.random() < 0.8
            candidates.append(Candidate(available, rng.random(), adaptive, positions))
        sequences = len(candidates) + rng.randint(0, 6)
        chosen = choose_lengths(candidates, sequences, cost)
        options = [range(c.available + 1) if c.adaptive else (c.available,) for c in candidates]
        best = min(
            time_per_token(candidates, ks, sequences, cost) for ks in itertools.product(*options)
        )
        assert time_per_token(candidates, chosen, sequences, cost) == pytest.approx(best, rel=1e-9)


def test_in_a_crowded_step_requests_that_copy_still_draft() -> None:
    # On the CPU's line a verified draft token costs about 1.4 ms where the batch's average
    # token costs about 3.9 ms at 20 sequences: a request that lands 4 drafts in 5 pays its
    # way, one that lands 1 in 10 does not. (Summing each request's time per token instead,
    # the earlier measure, drafted nothing here: one token's price, paid by all 20.)
    cost = StepCost(CPU_STEP_PRIOR)
    candidates = [Candidate(5, 0.8)] * 8 + [Candidate(5, 0.1)] * 4
    lengths = choose_lengths(candidates, sequences=20, cost=cost)
    assert all(k >= 2 for k in lengths[:8]) and not any(lengths[8:])


def test_a_request_stops_and_restarts_drafting_as_its_evidence_changes() -> None:
    """Mid-stream: the length follows the request's own acceptance, step by step."""
    cost = StepCost(StepCostPrior(20, 3, 4, 0.0))
    estimate = AcceptanceEstimate(prior=0.7)
    history = []
    for step in range(40):
        length = choose_lengths([Candidate(5, estimate.value)], sequences=1, cost=cost)[0]
        history.append(length)
        # Fresh text for 20 steps (every draft misses), then a copy (every draft lands).
        copying = step >= 20
        estimate.observe(max(length, 1) if copying else 0, not copying)
    assert history[0] > 0
    assert 0 in history[:20]
    assert history[-1] > 0


def test_a_step_drafts_only_if_its_gains_pay_for_the_speculative_path() -> None:
    # Every sequence costs 3 ms more in a step where anything drafts: one good request
    # among 16 does not pay for it, the same request alone does.
    cost = StepCost(StepCostPrior(20, 1, 2, 3))
    alone = choose_lengths([Candidate(5, 0.7)], sequences=1, cost=cost)
    crowded = choose_lengths([Candidate(5, 0.7)], sequences=16, cost=cost)
    assert alone[0] > 0 and crowded == [0]
    many = choose_lengths([Candidate(5, 0.9)] * 16, sequences=16, cost=cost)
    assert all(k > 0 for k in many)


def test_the_step_cost_learns_the_machine_line() -> None:
    cost = StepCost(CPU_STEP_PRIOR)
    rng = random.Random(3)
    for _ in range(2000):
        sequences = rng.randint(1, 8)
        tokens = sequences + rng.randint(0, 5 * sequences)
        drafting = tokens > sequences
        ms = 10 + 1.5 * sequences + 4 * tokens + (2 * sequences if drafting else 0)
        cost.observe(sequences, tokens, drafting, ms)
    assert cost.per_token_ms == pytest.approx(4, rel=0.05)
    assert cost.drafting_ms(8) == pytest.approx(16, rel=0.05)
    assert cost.predict(4, 12, True) == pytest.approx(10 + 6 + 48 + 8, rel=0.05)


def test_a_fixed_line_counts_steps_and_keeps_its_prices() -> None:
    # The same steps that teach a learning line (above) leave a fixed one where it was.
    learning, fixed = StepCost(CPU_STEP_PRIOR), StepCost(CPU_STEP_PRIOR, fixed=True)
    before = fixed.predict(4, 12, True)
    for _ in range(500):
        for cost in (learning, fixed):
            cost.observe(4, 12, True, 2 * before)  # a machine twice as slow as the prior
    assert fixed.samples == learning.samples == 500
    assert fixed.predict(4, 12, True) == before
    assert learning.predict(4, 12, True) == pytest.approx(2 * before, rel=0.05)


def test_a_fresh_lines_per_token_prices_hold_through_prefill_heavy_first_steps() -> None:
    # A fresh engine's first steps are mostly prompt chunks, with little to tell the terms
    # apart; its prior's slopes must not swing on them (before each term's prior was scaled
    # to its feature, a few such steps priced drafting out for hundreds of steps).
    cost = StepCost(GPU_STEP_PRIOR)
    for sequences, prompt in [(32, 8192), (32, 8192), (32, 8192), (32, 3000), (32, 0), (32, 0)]:
        ms = 6 + 0.05 * sequences + 0.004 * sequences + 0.022 * prompt + 0.5
        cost.observe(sequences, sequences + prompt, False, ms)
    drafting_price = cost.predict(32, 32 + 64, True) - cost.predict(32, 32, False)
    assert 0 < drafting_price < 3.0  # 64 draft tokens and the speculative path, in ms
    # A token moves toward the prompt chunks' price, and no further.
    assert GPU_STEP_PRIOR.per_token_ms <= cost.per_token_ms <= 0.03


def test_at_least_one_draft_when_asked_even_where_the_rule_would_draft_none() -> None:
    cost = StepCost(StepCostPrior(20, 1, 2, 3))
    candidates = [Candidate(5, 0.3), Candidate(5, 0.6), Candidate(0, 0.9)]
    assert choose_lengths(candidates, sequences=16, cost=cost) == [0, 0, 0]
    # Once the step pays the speculative path's price, the next-best tokens come cheaper
    # than the batch's average: the best choice of at least one token verifies three.
    assert choose_lengths(candidates, sequences=16, cost=cost, at_least=1) == [1, 2, 0]


def test_a_negative_price_per_sequence_moves_to_the_drafting_term() -> None:
    # Where nearly every step drafts, the fit cannot tell the two terms apart and may trade
    # them: the drafting step keeps its fitted price, the other is not made cheaper.
    cost = StepCost(StepCostPrior(10, 0.5, 0.1, 0.5))
    cost._fit.theta = [10.0, -2.0, 0.1, 2.5]
    assert cost.predict(8, 16, True) == pytest.approx(10 - 16 + 1.6 + 20)
    assert cost.predict(8, 16, False) == pytest.approx(10 + 1.6)
    assert cost.drafting_ms(8) == pytest.approx(4.0)


def test_a_draft_is_cut_where_the_drafter_loses_confidence() -> None:
    cost = StepCost(CPU_STEP_PRIOR)
    # Sure of two tokens, then a guess: the guess and all after it wait for a later step.
    confident = Candidate(5, 0.78, positions=(0.95, 0.95, 0.1, 0.95, 0.95))
    assert choose_lengths([confident], sequences=1, cost=cost) == [2]
    # One chance for every position (their mean) would verify all five.
    assert choose_lengths([Candidate(5, 0.78)], sequences=1, cost=cost) == [5]


def test_a_confident_newcomer_outbids_a_request_with_a_better_record() -> None:
    cost = StepCost(CPU_STEP_PRIOR)
    record = Candidate(4, 0.6)  # its drafts have landed three times in five
    sure = Candidate(4, 0.3, positions=(0.98, 0.97, 0.97, 0.96))
    record_length, sure_length = choose_lengths([record, sure], sequences=12, cost=cost)
    assert sure_length == 4 and record_length < 4
