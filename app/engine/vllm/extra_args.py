"""The keys the gateway and vLLM's processes exchange, and what they read from them.

The gateway sets them on a request's `SamplingParams.extra_args` or on the engine's
`additional_config`; the engine core's scheduler (core/) and the workers (worker/) read
them. They live apart from both so that neither process's modules import the other's.
"""

from __future__ import annotations

from typing import Any

# In a request's extra_args: its most draft tokens per step (0..K; 0 never drafts) and the
# acceptance prior that asks for a length re-chosen every step.
DRAFT_LENGTH_KEY = "specgate_draft_length"
ACCEPTANCE_PRIOR_KEY = "specgate_acceptance_prior"
# In the engine's additional_config: a step-cost line (base, per sequence, per token, per
# sequence drafting; ms) to hold instead of learning one from the engine's own steps.
STEP_COST_KEY = "specgate_step_cost"
# Suffix decoding (app/engine/vllm/worker/suffix_drafter.py): whose earlier answers a request
# may draft from, in its extra_args; and the answer tokens the trees may hold, in
# additional_config.
TENANT_KEY = "specgate_tenant"
CACHE_TOKENS_KEY = "specgate_suffix_cache_tokens"
# The client (its key's name) and its weight, in a request's extra_args, for the waiting
# queue's fair-share order (app/engine/vllm/core/fair_waiting.py).
CLIENT_KEY = "specgate_client"
CLIENT_WEIGHT_KEY = "specgate_client_weight"
# A client's prediction of the answer (OpenAI's Predicted Outputs), as token ids, in its
# extra_args: the worker drafts from it for that request alone
# (app/drafting/prediction_drafts.py).
PREDICTION_KEY = "specgate_prediction"
# The most tokens a prediction drafts in one step (--prediction-draft-tokens), in
# additional_config; the engine's K bounds it too.
PREDICTION_DRAFT_TOKENS_KEY = "specgate_prediction_draft_tokens"
# On vLLM's DraftTokenIds from the worker: per request, whether its draft came from its
# prediction (a bool).
PREDICTED_ATTRIBUTE = "specgate_predicted"
# On a finished request's output (vLLM's kv_transfer_params, the one dict the engine core
# hands the client with a request's last output): how many of the prediction's drafted
# tokens the answer produced.
PREDICTION_ACCEPTED_KEY = "specgate_prediction_accepted"
# On vLLM's DraftTokenIds from the worker: per request, the drafter's probability for each
# draft token and the length of the match the draft came from (a list and an int), or None.
CONFIDENCE_ATTRIBUTE = "specgate_confidence"
Confidence = tuple[list[float], int]


def draft_limit(extra_args: dict[str, Any] | None, k: int) -> int:
    """The most draft tokens a request may verify per step: its own limit, within 0..k."""
    value = extra_args.get(DRAFT_LENGTH_KEY) if extra_args else None
    return k if value is None else max(0, min(int(value), k))


def acceptance_prior(extra_args: dict[str, Any] | None) -> float | None:
    """The request's acceptance prior, in [0, 1): it asks for a length re-chosen each step."""
    value = extra_args.get(ACCEPTANCE_PRIOR_KEY) if extra_args else None
    return None if value is None else min(max(float(value), 0.0), 0.99)


def prediction_draft_bound(additional_config: Any, k: int) -> int:
    """The most tokens a prediction drafts per step: the operator's bound, within 0..k."""
    value = additional_config.get(PREDICTION_DRAFT_TOKENS_KEY) if additional_config else None
    return k if not isinstance(value, int) else max(0, min(value, k))


def prediction(extra_args: dict[str, Any] | None) -> list[int] | None:
    """The request's predicted answer as token ids, if it brought one."""
    value = extra_args.get(PREDICTION_KEY) if extra_args else None
    return list(value) if value else None
