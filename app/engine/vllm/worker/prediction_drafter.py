"""Drafts from each request's own prediction of its answer, in vLLM's worker.

A request that brought a prediction (OpenAI's Predicted Outputs; its token ids under
`PREDICTION_KEY` in its extra_args) drafts from it for as long as the answer follows it
(app/drafting/prediction_drafts.py). At a step where the prediction proposes nothing (the
answer has left it, or is not yet in it), or only a placement found by search after the
answer left it, the engine's drafter's proposal (n-gram, suffix trees) stands where it has
one. A prediction is the client's: it drafts for its own request only and is never added to a
tree of earlier answers.

The drafts are bounded by the request's limit, the operator's bound
(`--prediction-draft-tokens`, 32) and the engine's K, plus one token the scheduler
never verifies but holds as evidence (app/engine/vllm/core/draft_length_scheduler.py), and
flagged as the prediction's on what the worker hands the scheduler (`PREDICTED_ATTRIBUTE`),
which learns their acceptance apart from the drafter's and counts what landed. Only drafters
that propose on the CPU (n-gram, suffix) are joined: a draft model's proposals are tensors on
the device, and stand as they are.
"""

from __future__ import annotations

from typing import Any

from app.drafting.prediction_drafts import PredictionDrafts
from app.engine.vllm.extra_args import draft_limit, prediction, prediction_draft_bound


class RequestPredictions:
    """The runner's live requests' predictions, and which of the last step's drafts came
    from one."""

    def __init__(self) -> None:
        self._drafts: dict[str, PredictionDrafts | None] = {}  # None: brought no prediction
        self.predicted: set[str] = set()

    def replace_drafts(
        self, runner: Any, sampled_token_ids: list[list[int]], drafts: list[list[int]]
    ) -> None:
        """Put each predicting request's draft from its prediction in `drafts`, where it has
        one."""
        self.predicted = set()
        batch = runner.input_batch
        k = int(runner.num_spec_tokens)
        bound = prediction_draft_bound(runner.vllm_config.additional_config, k)
        for row, sampled in enumerate(sampled_token_ids):
            if not sampled:  # a prefill still in progress
                continue
            request_id = batch.req_ids[row]
            extra_args = self._extra_args(runner, request_id)
            drafter = self._drafter(request_id, extra_args)
            if drafter is None:
                continue
            limit = draft_limit(extra_args, k)
            if limit == 0:  # a request that never drafts lands nothing of its prediction
                continue
            # One token past the request's limit: the scheduler verifies up to the limit and
            # holds the rest as evidence, so the step's own token counts as landed when it is
            # the prediction's (within the context, where the scheduler does not cut). Under
            # a lower operator's bound, the bound's tokens are all verified.
            length = int(batch.num_tokens_no_spec[row])
            room = min(limit + 1 if limit <= bound else bound, runner.max_model_len - length - 1)
            if room <= 0:
                continue
            output = batch.token_ids_cpu[row, int(batch.num_prompt_tokens[row]) : length]
            draft = drafter.propose(output.tolist(), room)
            # A placement found by search after the answer left the prediction is a guess:
            # the drafter's own proposal leads that step, and the prediction takes over once
            # the answer follows it again (the next step, when the placement was right).
            if draft and (drafter.followed or not drafts[row]):
                drafts[row] = draft
                self.predicted.add(request_id)
        live = batch.req_id_to_index
        for request_id in [r for r in self._drafts if r not in live]:
            del self._drafts[request_id]

    def _drafter(
        self, request_id: str, extra_args: dict[str, Any] | None
    ) -> PredictionDrafts | None:
        if request_id not in self._drafts:
            tokens = prediction(extra_args)
            self._drafts[request_id] = PredictionDrafts(tokens) if tokens else None
        return self._drafts[request_id]

    @staticmethod
    def _extra_args(runner: Any, request_id: str) -> dict[str, Any] | None:
        state = runner.requests.get(request_id)
        params = state.sampling_params if state is not None else None
        return params.extra_args if params is not None else None


def predictions_of(runner: Any) -> RequestPredictions:
    """The runner's book of predictions, made on first use."""
    book = getattr(runner, "_specgate_predictions", None)
    if book is None:
        book = RequestPredictions()
        runner._specgate_predictions = book
    return book
