"""The drafter's confidence calibrated against what steps accept (app/drafting/confidence.py),
and the planner pricing each draft position by it (app/drafting/draft_plan.py)."""

from __future__ import annotations

import pytest

from app.drafting.confidence import MOST_LIKELY, ConfidenceCalibration
from app.drafting.draft_plan import DraftPlanner, Offer
from app.drafting.length_rule import CPU_STEP_PRIOR


def test_a_fresh_table_takes_the_drafter_at_its_word() -> None:
    table = ConfidenceCalibration()
    assert table.value(0.93) == pytest.approx(0.95)  # its tenth's midpoint
    assert table.value(0.12) == pytest.approx(0.15)
    assert table.value(1.0) == pytest.approx(0.95)


def test_no_draft_token_is_ever_certain() -> None:
    table = ConfidenceCalibration()
    for _ in range(500):
        table.observe([1.0], hits=1, missed=False)
    assert table.value(1.0) == MOST_LIKELY


def test_confident_tokens_that_miss_lose_their_confidence() -> None:
    table = ConfidenceCalibration()
    for _ in range(100):
        table.observe([0.95, 0.95, 0.95], hits=0, missed=True)
    assert table.value(0.95) < 0.1
    assert table.value(0.45) == pytest.approx(0.45)  # other cells are untouched


def test_positions_after_the_first_miss_are_not_counted() -> None:
    table = ConfidenceCalibration()
    for _ in range(100):
        # The first token lands, the second misses; the third was never checked.
        table.observe([0.95, 0.55, 0.15], hits=1, missed=True)
    assert table.value(0.95) > 0.95
    assert table.value(0.55) < 0.1
    assert table.value(0.15) == pytest.approx(0.15)


def test_a_draft_that_lands_whole_counts_every_token_and_no_miss() -> None:
    table = ConfidenceCalibration()
    for _ in range(100):
        table.observe([0.35, 0.35], hits=2, missed=False)
    assert table.value(0.35) > 0.95


def test_the_planner_prices_positions_by_the_calibrated_confidence() -> None:
    planner = DraftPlanner(CPU_STEP_PRIOR, fixed_step_cost=True)
    unsure = (0.95, 0.95, 0.05, 0.95)
    assert planner.lengths([Offer("r", 4, 0.9, unsure)], sequences=1) == [2]
    # The engine finds that this drafter's wildest guesses land nearly always.
    for _ in range(200):
        planner.observe_drafts("r", [1, 2, 3], [1, 2, 3, 4], confidence=[0.05, 0.05, 0.05])
    assert planner.calibration.value(0.05) > 0.9
    assert planner.lengths([Offer("r", 4, 0.9, unsure)], sequences=1) == [4]


def test_without_confidence_the_request_s_own_acceptance_prices_every_position() -> None:
    planner = DraftPlanner(CPU_STEP_PRIOR, fixed_step_cost=True)
    assert planner.lengths([Offer("r", 4, 0.9)], sequences=1) == [4]
    planner.observe_drafts("r", [1, 2], [5])  # no confidence: the table learns nothing
    assert planner.calibration.snapshot() == ConfidenceCalibration().snapshot()


def test_a_long_match_is_calibrated_apart_from_a_short_one() -> None:
    table = ConfidenceCalibration()
    for _ in range(100):
        # Probability 1 from a two-token match in the prompt: often wrong.
        table.observe([1.0, 1.0], hits=0, missed=True, match_length=2)
        # Probability 1 from a forty-token match in an earlier answer: nearly always right.
        table.observe([1.0, 1.0], hits=2, missed=False, match_length=40)
    assert table.value(1.0, match_length=2) < 0.1
    assert table.value(1.0, match_length=40) == MOST_LIKELY
    assert table.value(1.0, match_length=8) == pytest.approx(0.95)  # not yet seen


def test_the_planner_learns_per_match_length() -> None:
    planner = DraftPlanner(CPU_STEP_PRIOR, fixed_step_cost=True)
    for _ in range(200):
        planner.observe_drafts("r", [1, 2], [9], confidence=[1.0, 1.0], match_length=1)
    sure = (1.0, 1.0, 1.0, 1.0)
    assert planner.lengths([Offer("r", 4, 0.9, sure, match_length=1)], sequences=1) == [0]
    assert planner.lengths([Offer("r", 4, 0.9, sure, match_length=30)], sequences=1) == [4]


def test_sampled_requests_are_calibrated_apart_from_greedy_ones() -> None:
    planner = DraftPlanner(CPU_STEP_PRIOR, fixed_step_cost=True)
    sure = (0.95, 0.95, 0.95, 0.95)
    # Stories at temperature 1 drafted from earlier stories: the drafter is sure, and wrong.
    for _ in range(200):
        planner.observe_drafts("story", [1, 2], [5], confidence=[0.95, 0.95], sampled=True)
        planner.observe_drafts("copy", [1, 2], [1, 2, 3], confidence=[0.95, 0.95])
    assert planner.sampled_calibration.value(0.95) < 0.05
    assert planner.calibration.value(0.95) == MOST_LIKELY
    offers = [Offer("copy", 4, 0.9, sure), Offer("story", 4, 0.9, sure, sampled=True)]
    assert planner.lengths(offers, sequences=2) == [4, 0]
