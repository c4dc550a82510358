"""How one request's prediction of its answer fared: OpenAI's accepted and rejected
prediction tokens.

The counting rule (docs/api.md): a prediction token is accepted when the answer produced it
at the place the prediction put it while the request drafted from the prediction: the
answer's first token when it is the prediction's first (nothing drafts the first token: the
prompt's pass samples it), then every token the worker drafted from the prediction and the
step produced, as the engine core's scheduler counts them (app/engine/vllm/core/
draft_length_scheduler.py). Every other token of the prediction is rejected. A request that
never drafts (the plain route, `X-Speculative: off`) lands nothing.
"""

from __future__ import annotations

from typing import Any

from app.engine.vllm.extra_args import PREDICTION_ACCEPTED_KEY
from app.vocabulary import PredictionCounts


class PredictionTally:
    def __init__(self, tokens: list[int], drafts_from_it: bool) -> None:
        self.tokens = tokens
        self.drafts_from_it = drafts_from_it
        self._first_landed: int | None = None  # None: no token produced yet

    def see(self, output: Any) -> None:
        """One of vLLM's outputs for the request (deltas)."""
        if self._first_landed is None and output.outputs and output.outputs[0].token_ids:
            first = output.outputs[0].token_ids[0]
            self._first_landed = int(self.drafts_from_it and first == self.tokens[0])

    def counts(self, output: Any) -> PredictionCounts:
        """The figures, from the request's last output."""
        drafted = (output.kv_transfer_params or {}).get(PREDICTION_ACCEPTED_KEY, 0)
        accepted = (self._first_landed or 0) + int(drafted) if self.drafts_from_it else 0
        return PredictionCounts(len(self.tokens), min(accepted, len(self.tokens)))
