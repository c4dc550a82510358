"""Drafts from a client's prediction: follow it, leave it at an edit, find it again."""

from __future__ import annotations

from app.drafting.prediction_drafts import ANCHOR_TOKENS, PredictionDrafts

PREDICTION = list(range(100, 160))  # sixty distinct tokens


def answer_steps(
    drafts: PredictionDrafts, answer: list[int], most: int = 8
) -> list[tuple[int, list[int]]]:
    """Feed the answer one token at a time: (output length, draft) at every step."""
    return [(n, drafts.propose(answer[:n], most)) for n in range(1, len(answer) + 1)]


def test_an_answer_equal_to_the_prediction_drafts_its_next_tokens_every_step() -> None:
    drafts = PredictionDrafts(PREDICTION)
    for n, draft in answer_steps(drafts, PREDICTION[:40]):
        assert draft == PREDICTION[n : n + 8]


def test_steps_of_several_tokens_and_a_bound() -> None:
    drafts = PredictionDrafts(PREDICTION)
    assert drafts.propose(PREDICTION[:1], 3) == PREDICTION[1:4]
    assert drafts.propose(PREDICTION[:4], 32) == PREDICTION[4:36]  # three landed at once
    assert drafts.propose(PREDICTION[:58], 32) == PREDICTION[58:]  # the end of the prediction
    assert drafts.propose(PREDICTION[:60], 32) == []
    assert drafts.propose(PREDICTION[:10], 0) == []


def test_a_changed_line_stops_drafts_until_the_answer_meets_the_prediction_again() -> None:
    # Tokens 20..24 of the prediction are replaced by five others in the answer.
    answer = [*PREDICTION[:20], 1, 2, 3, 4, 5, *PREDICTION[25:]]
    steps = dict(answer_steps(PredictionDrafts(PREDICTION), answer))
    assert steps[20] == PREDICTION[20:28]  # the prediction's next, before the edit shows
    assert all(steps[n] == [] for n in range(21, 25 + ANCHOR_TOKENS))
    n = 25 + ANCHOR_TOKENS  # the answer's last four are the prediction's 25..28
    assert steps[n] == PREDICTION[n : n + 8]


def test_an_insertion_and_a_deletion_are_found_again() -> None:
    inserted = [*PREDICTION[:30], 7, 8, 9, *PREDICTION[30:]]
    steps = dict(answer_steps(PredictionDrafts(PREDICTION), inserted))
    assert steps[33] == []
    assert steps[33 + ANCHOR_TOKENS] == PREDICTION[30 + ANCHOR_TOKENS : 38 + ANCHOR_TOKENS]
    deleted = PREDICTION[:30] + PREDICTION[45:]
    steps = dict(answer_steps(PredictionDrafts(PREDICTION), deleted))
    assert steps[31] == []  # 45 where 30 was predicted
    assert steps[30 + ANCHOR_TOKENS] == PREDICTION[45 + ANCHOR_TOKENS : 53 + ANCHOR_TOKENS]


def test_an_answer_that_starts_with_its_own_words_meets_the_prediction_later() -> None:
    answer = [1, 2, 3, *PREDICTION]
    steps = dict(answer_steps(PredictionDrafts(PREDICTION), answer))
    assert all(steps[n] == [] for n in range(1, 3 + ANCHOR_TOKENS))
    assert steps[3 + ANCHOR_TOKENS] == PREDICTION[ANCHOR_TOKENS : ANCHOR_TOKENS + 8]


def test_a_repeated_fragment_is_placed_by_the_longest_match_then_ahead() -> None:
    # The same four tokens end at 4 and at 14; what precedes them decides.
    prediction = [9, 1, 2, 3, 4, 50, 51, 52, 53, 8, 1, 2, 3, 4, 60, 61, 62]
    drafts = PredictionDrafts(prediction)
    assert drafts.propose([7, 8, 1, 2, 3, 4], 3) == [60, 61, 62]
    drafts = PredictionDrafts(prediction)
    assert drafts.propose([7, 7, 1, 2, 3, 4], 3) == [50, 51, 52]  # equal matches: the first
    drafts.propose(prediction[:12], 3)  # reached 12 by following
    assert drafts.propose([*prediction[:12], 99, 1, 2, 3, 4], 3) == [60, 61, 62]


def test_wrong_text_never_drafts_and_a_missed_step_costs_nothing() -> None:
    drafts = PredictionDrafts(PREDICTION)
    assert all(d == [] for _, d in answer_steps(drafts, list(range(1, 40))))
    drafts = PredictionDrafts(PREDICTION)
    drafts.propose(PREDICTION[:5], 4)
    # Ten tokens later, without a call between (the hint is stale, the output still right).
    assert drafts.propose(PREDICTION[:15], 4) == PREDICTION[15:19]


def test_it_says_whether_a_draft_followed_or_was_found_again() -> None:
    drafts = PredictionDrafts(PREDICTION)
    drafts.propose(PREDICTION[:3], 4)
    assert drafts.followed
    drafts.propose([*PREDICTION[:3], 1, *PREDICTION[20:24]], 4)
    assert not drafts.followed
