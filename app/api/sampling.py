"""OpenAI sampling fields -> engine sampling options, shared by both generation endpoints."""

from __future__ import annotations

from typing import Any

from app.engine.generation import SamplingOptions
from app.schemas.common import RequestBase


def sampling_options(
    body: RequestBase,
    max_tokens: int | None,
    json_schema: dict[str, Any] | None,
    logprobs: int | None = None,
    echo: bool = False,
) -> SamplingOptions:
    temperature = body.temperature
    # top_p 0 keeps only the most likely token: that is greedy decoding.
    if body.top_p == 0:
        temperature = 0.0
    return SamplingOptions(
        max_tokens=max_tokens,
        temperature=temperature,
        top_p=body.top_p or None,
        presence_penalty=body.presence_penalty or 0.0,
        frequency_penalty=body.frequency_penalty or 0.0,
        stop=body.stop_sequences(),
        seed=body.seed,
        n=body.n,
        json_schema=json_schema,
        # -1 and 0 both mean "off"; None says so to the router (see engine.capabilities).
        top_k=body.top_k if body.top_k and body.top_k > 0 else None,
        min_p=body.min_p,
        repetition_penalty=body.repetition_penalty,
        logit_bias=body.token_biases(),
        logprobs=logprobs,
        echo=echo,
        ignore_eos=body.ignore_eos,
    )
