"""What the HTTP layer and an engine adapter exchange. No vLLM types cross this line."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from app.vocabulary import ChatMessage, PredictionCounts, SpecDecodeStats

FinishReason = Literal["stop", "length", "abort"]


@dataclass(frozen=True)
class SamplingOptions:
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    stop: tuple[str, ...] = ()
    seed: int | None = None
    n: int = 1
    # Structured output: a JSON schema, or {} for "any JSON object".
    json_schema: dict[str, object] | None = None
    # vLLM's sampling extensions; None leaves the engine's default.
    top_k: int | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None
    logit_bias: dict[int, float] | None = None
    # Log probabilities: None for none; k for the sampled token plus its k best alternatives.
    logprobs: int | None = None
    # Return the prompt (and, with logprobs, the prompt's log probabilities) too.
    echo: bool = False
    # Generate past the end-of-sequence token, up to max_tokens (vLLM's extension).
    ignore_eos: bool = False
    # What an absent max_tokens means (--max-tokens-default), within what the context leaves.
    default_max_tokens: int | None = None


# A completion prompt (text or token ids) or a chat conversation.
Prompt = str | list[int] | list[ChatMessage]


@dataclass(frozen=True)
class GenerationRequest:
    request_id: str
    prompt: Prompt
    options: SamplingOptions = field(default_factory=SamplingOptions)
    # The most draft tokens a speculative engine may verify per step for this request
    # (0: none); None leaves the engine's own K.
    draft_length: int | None = None
    # Set: the engine re-chooses the draft length (0..draft_length) every step for the
    # batch's goodput, starting from this per-position acceptance (app/drafting/length_rule.py).
    # None: the request verifies up to draft_length every step.
    acceptance_prior: float | None = None
    # A chat request's function tools, in OpenAI's shape, for the chat template.
    tools: tuple[dict[str, Any], ...] | None = None
    # Whose earlier answers suffix drafting may draw on (app/tenancy.py); None: the tree
    # that requests without a tenant share.
    tenant: str | None = None
    # The class the gateway's policy gave it (a balancer over replicas keeps one tenant's
    # class together; a replica learns acceptance by class); None: not classified.
    workload_class: str | None = None
    # The client's prediction of the answer (OpenAI's Predicted Outputs): a draft source for
    # this request alone where the engine drafts.
    prediction: str | None = None
    # The client's key name and weight, for the engine's fair-share order of its waiting
    # requests (app/tenants/fair_share.py); None: a server without keys.
    client: str | None = None
    client_weight: float = 1.0


@dataclass(frozen=True)
class TokenLogprob:
    """One token's log probability and its best alternatives, most likely first.

    `logprob` is None only for a prompt's first token, which nothing predicts.
    """

    token: str
    logprob: float | None
    top: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True)
class PromptEcho:
    """The prompt handed back to an echo request: its text and, with logprobs, its tokens."""

    text: str
    logprobs: tuple[TokenLogprob, ...] | None = None


@dataclass(frozen=True)
class ChoiceDelta:
    index: int
    text: str
    new_tokens: int
    finish_reason: FinishReason | None = None
    # Set on the final delta of a choice served by a speculative engine.
    draft_stats: SpecDecodeStats | None = None
    # Set on the final delta of a choice whose request brought a prediction.
    prediction: PredictionCounts | None = None
    # One entry per new token, when the request asked for logprobs.
    logprobs: tuple[TokenLogprob, ...] | None = None
    # On the first delta of each choice of an echo request.
    echo: PromptEcho | None = None
    # The new tokens' ids, where the engine exposes them (embedded engines do): the draft
    # replay and a mid-stream move need them.
    token_ids: tuple[int, ...] = ()


@dataclass(frozen=True)
class GenerationStep:
    """One batch of progress on a request: new text for one or more of its n choices."""

    prompt_tokens: int
    choices: list[ChoiceDelta]
    # The prompt as the engine tokenised it, on a request's first step (embedded engines).
    prompt_token_ids: tuple[int, ...] | None = None


@dataclass
class SuffixCacheCounts:
    """A suffix-drafting engine's trees of earlier answers
    (app/engine/vllm/worker/suffix_drafter.py), as its worker counts them: what /metrics
    reports."""

    tenants: int = 0
    cached_answers: int = 0
    cached_tokens: int = 0
    proposals: int = 0  # requests that asked for a draft, step by step
    hits: int = 0  # ...and got one
    evictions: int = 0  # answers dropped to stay within the bounds
