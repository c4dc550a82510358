"""DraftPlanner: the draft-length rule's state for one engine, as the scheduler and the GPU
simulator drive it."""

from __future__ import annotations

import random

from app.drafting.draft_plan import MEASURE_DRAFTING_AFTER_STEPS, DraftPlanner, Offer
from app.drafting.length_rule import StepCostPrior

# A line that prices the speculative path far above what drafting saves: left alone, the
# rule would never draft again, and never see that the price is wrong.
OVERPRICED = StepCostPrior(
    base_ms=5, per_sequence_ms=0.05, per_token_ms=0.01, per_sequence_drafting_ms=1.0
)


def test_after_a_run_of_steps_without_drafts_one_step_drafts_to_measure_the_price() -> None:
    planner = DraftPlanner(OVERPRICED)
    offers = [Offer(f"r{i}", 5, 0.5) for i in range(8)]
    drafted = []
    for _ in range(3 * MEASURE_DRAFTING_AFTER_STEPS + 3):
        drafted.append(sum(planner.lengths(offers, 8)))
    measured = [step for step, total in enumerate(drafted) if total]
    assert measured == [
        MEASURE_DRAFTING_AFTER_STEPS,
        2 * MEASURE_DRAFTING_AFTER_STEPS + 1,
        3 * MEASURE_DRAFTING_AFTER_STEPS + 2,
    ]


def test_measured_drafting_steps_correct_an_overpriced_line() -> None:
    planner = DraftPlanner(OVERPRICED)
    rng = random.Random(2)
    for step in range(20 * MEASURE_DRAFTING_AFTER_STEPS):
        batch = rng.randint(4, 16)
        offers = [
            Offer(f"{step}-{i}", rng.randint(0, 5), rng.uniform(0.3, 0.9)) for i in range(batch)
        ]
        lengths = planner.lengths(offers, batch)
        tokens = batch + sum(lengths)
        # The machine: drafting costs nothing beyond its tokens.
        planner.observe_step(batch, tokens, any(lengths), 5 + 0.05 * batch + 0.01 * tokens)
    assert planner.step_cost.drafting_ms(8) < 0.5
    copying = [Offer(f"copy-{i}", 5, 0.7) for i in range(8)]
    assert sum(planner.lengths(copying, 8)) > 8


def test_steps_with_nothing_on_offer_do_not_count_toward_measuring() -> None:
    planner = DraftPlanner(OVERPRICED)
    for _ in range(2 * MEASURE_DRAFTING_AFTER_STEPS):
        assert planner.lengths([Offer("r", 0, 0.5)], 8) == [0]
    assert sum(planner.lengths([Offer("r", 5, 0.5)], 8)) == 0
