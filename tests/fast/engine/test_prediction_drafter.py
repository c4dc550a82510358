"""The worker's drafts from requests' predictions (app/engine/vllm/worker/prediction_drafter.py)
over a runner's batch as vLLM keeps it. Starts no engine."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np

from app.engine.vllm.extra_args import (
    DRAFT_LENGTH_KEY,
    PREDICTION_DRAFT_TOKENS_KEY,
    PREDICTION_KEY,
)
from app.engine.vllm.worker.prediction_drafter import RequestPredictions

PROMPT = [1, 2, 3]
PREDICTION = list(range(100, 140))


def runner(
    rows: dict[str, tuple[list[int], dict[str, Any] | None]], k: int = 8, bound: int | None = None
) -> Any:
    """A model runner holding these requests: output tokens and extra_args by request id."""
    ids = list(rows)
    tokens = np.zeros((len(ids), 256), dtype=np.int64)
    lengths = []
    for row, (output, _) in enumerate(rows.values()):
        full = PROMPT + output
        tokens[row, : len(full)] = full
        lengths.append(len(full))
    batch = SimpleNamespace(
        req_ids=ids,
        req_id_to_index={r: i for i, r in enumerate(ids)},
        token_ids_cpu=tokens,
        num_tokens_no_spec=np.array(lengths),
        num_prompt_tokens=np.array([len(PROMPT)] * len(ids)),
    )
    requests = {
        r: SimpleNamespace(sampling_params=SimpleNamespace(extra_args=extra))
        for r, (_, extra) in rows.items()
    }
    additional = {} if bound is None else {PREDICTION_DRAFT_TOKENS_KEY: bound}
    return SimpleNamespace(
        input_batch=batch,
        requests=requests,
        num_spec_tokens=k,
        max_model_len=200,
        vllm_config=SimpleNamespace(additional_config=additional),
    )


def test_a_prediction_replaces_the_drafters_guess_where_it_proposes() -> None:
    predicting = {PREDICTION_KEY: PREDICTION}
    made = runner(
        {
            "follows": (PREDICTION[:5], predicting),
            "left-it": ([7, 7, 7, 7, 7], predicting),
            "never-drafts": (PREDICTION[:5], {**predicting, DRAFT_LENGTH_KEY: 0}),
            "short": (PREDICTION[:5], {**predicting, DRAFT_LENGTH_KEY: 2}),
            "no-prediction": (PREDICTION[:5], None),
            "prefilling": ([], predicting),
        }
    )
    guesses = [[50, 51]] * 6
    drafts = [list(d) for d in guesses]
    book = RequestPredictions()
    sampled = [[1], [1], [1], [1], [1], []]
    book.replace_drafts(made, sampled, drafts)
    assert drafts[0] == PREDICTION[5:14]  # the engine's K, and one held as evidence
    assert drafts[1] == guesses[1]  # the answer left the prediction: the drafter's guess
    assert drafts[2] == guesses[2]  # never drafts: the scheduler drops whatever is there
    assert drafts[3] == PREDICTION[5:8]
    assert drafts[4] == guesses[4]
    assert drafts[5] == guesses[5]
    assert book.predicted == {"follows", "short"}


def test_requests_that_leave_are_forgotten_and_a_draft_stops_at_the_context() -> None:
    book = RequestPredictions()
    made = runner({"a": (PREDICTION[:5], {PREDICTION_KEY: PREDICTION})})
    book.replace_drafts(made, [[1]], [[]])
    made = runner({"b": (PREDICTION[:5], {PREDICTION_KEY: PREDICTION})})
    made.max_model_len = len(PROMPT) + 5 + 3  # room for 2 drafts and the step's own token
    drafts: list[list[int]] = [[]]
    book.replace_drafts(made, [[1]], drafts)
    assert drafts == [PREDICTION[5:7]]  # nothing past the context, even as evidence
    assert set(book._drafts) == {"b"}


def test_a_placement_found_again_waits_a_step_behind_the_drafters_guess() -> None:
    predicting = {PREDICTION_KEY: PREDICTION}
    answer = [7, 7, *PREDICTION[10:16]]  # its own start, then the prediction from token 10
    book = RequestPredictions()
    drafts = [[50, 51]]
    book.replace_drafts(runner({"r": (answer, predicting)}), [[1]], drafts)
    assert drafts == [[50, 51]] and book.predicted == set()  # found by search: a guess
    drafts = [[50, 51]]
    book.replace_drafts(runner({"r": ([*answer, PREDICTION[16]], predicting)}), [[1]], drafts)
    assert drafts == [PREDICTION[17:26]] and book.predicted == {"r"}  # followed: it leads
    drafts = [[]]
    book.replace_drafts(
        runner({"r": ([*answer, 3, *PREDICTION[20:24]], predicting)}), [[1]], drafts
    )
    assert drafts == [PREDICTION[24:33]]  # the drafter has nothing: the placement drafts


def test_the_operators_bound_caps_a_predictions_drafts_within_the_engines_k() -> None:
    predicting = {PREDICTION_KEY: PREDICTION}
    rows = {
        "free": (PREDICTION[:5], predicting),
        "short": (PREDICTION[:5], {**predicting, DRAFT_LENGTH_KEY: 2}),
    }
    # The operator's bound, then each row's draft length.
    cases = [(None, 9, 3), (4, 4, 3), (2, 2, 3), (1, 1, 1), (50, 9, 3)]
    for bound, free, short in cases:
        drafts: list[list[int]] = [[], []]
        RequestPredictions().replace_drafts(runner(rows, k=8, bound=bound), [[1], [1]], drafts)
        # Past the request's own limit (at most the bound) one more token is held as
        # evidence, never verified; under a bound below the limit, the bound's tokens are
        # all verified; K bounds the bound.
        assert drafts == [PREDICTION[5 : 5 + free], PREDICTION[5 : 5 + short]], bound
