"""The engine adapter protocol: what a route needs from whatever generates tokens."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from typing import Any, Protocol, Self, runtime_checkable

from app.drafting.length_rule import StepCostPrior
from app.engine.generation import (
    GenerationRequest,
    GenerationStep,
    SamplingOptions,
    SuffixCacheCounts,
)
from app.engine.tokenizing import TokenizerService
from app.vocabulary import Refusal, Route


@dataclass(frozen=True)
class EngineFacts:
    """What an engine tells about itself, known once it has started."""

    # The context length in tokens; None where the engine does not say.
    max_model_len: int | None = None
    # Its steps carry token ids (the draft replay and moves between engines need them).
    exposes_token_ids: bool = False
    # It takes GenerationRequest.draft_length (an embedded engine that drafts).
    per_request_draft_length: bool = False
    # The model's tokenizer (tool-call parsers read its template and special tokens).
    tokenizer: Any = None
    # /tokenize and its kin: the engine's own tokenizer, or its upstreams'.
    tokenizing: TokenizerService | None = None
    # The draft replay replays this engine's n-gram proposer faithfully (not on Model
    # Runner V2, whose speculator differs).
    draft_replay_matches: bool = True
    # Tokens its KV cache holds (None where the engine does not say): a replica's report of
    # how full it is.
    kv_capacity_tokens: int | None = None
    # A drafting request may carry the sampling fields vLLM's V1 rejection sampler cannot
    # apply at drafts (Model Runner V2 applies them: app/engine/refusals.py).
    applies_sampling_fields_at_drafts: bool = False
    # The step-cost line its steps are priced by, where it is fixed in advance (a paced fake):
    # a Ray replica's step watch starts from it.
    step_cost_prior: StepCostPrior | None = None
    # It takes a request's prediction (OpenAI's Predicted Outputs): drafts from it, or lands
    # nothing of it and says so. A pool of vLLM servers cannot: their API has no such field.
    takes_prediction: bool = True


class Engine(Protocol):
    route: Route

    @property
    def facts(self) -> EngineFacts:
        """What it tells about itself: the gateway reads nothing else of an engine."""
        ...

    def generate(self, request: GenerationRequest) -> AsyncIterator[GenerationStep]:
        """Stream the request's progress. Closing the iterator early aborts the request.

        Bad requests raise `app.errors.InvalidRequestError` on the first step, before any
        output, so the HTTP layer can still answer with an error status.
        """
        ...

    def servable(self, options: SamplingOptions, draft_length: int | None = None) -> Refusal | None:
        """The fields of a request with these options (and this draft length; None: the
        engine's choice) that this engine cannot serve; None when it serves them all.

        Cheap and side-effect free: the router asks every route before choosing one, and the
        engine asks again of the request it is given.
        """
        ...

    def unfinished_requests(self) -> int:
        """Requests the engine still holds (running, queued, or not yet cleaned up)."""
        ...

    def is_alive(self) -> bool:
        """False once the engine has died or stopped; cheap enough to ask per request."""
        ...

    async def check_health(self) -> None:
        """Raise if the engine cannot serve."""
        ...

    async def aclose(self) -> None:
        """Stop the engine and every process it started."""
        ...

    async def __aenter__(self) -> Self: ...

    async def __aexit__(self, *exc_info: object) -> None:
        """Stops it, as aclose() does."""
        ...


class StopsOnExit:
    """`async with engine:` stops the engine on leaving the block."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        raise NotImplementedError


@runtime_checkable
class UpstreamReporter(Protocol):
    """An engine made of upstream servers (a remote pool), which /health lists one by one."""

    def upstream_status(self) -> dict[str, str]:
        """Each upstream's base URL: "ok", or why it is out of the pool."""
        ...


@runtime_checkable
class SuffixCacheReporter(Protocol):
    """An engine that drafts from suffix trees of earlier answers, which /metrics reports."""

    async def suffix_cache_counts(self) -> SuffixCacheCounts | None: ...


@runtime_checkable
class ReplicaReporter(Protocol):
    """An engine made of replicas (Ray Serve), whose routing reports /metrics shows."""

    async def replica_reports(self) -> dict[str, dict[str, Any]]:
        """Each live replica's report (app/serve_ray/replica.py), by replica."""
        ...


def for_route(request: GenerationRequest, route: Route, facts: EngineFacts) -> GenerationRequest:
    """The request as `route` sends it to its engine.

    One engine may serve both routes (`--engine-layout one`): it takes a draft length per
    request, and the plain route's requests carry 0, so they never draft.
    """
    if route_draft_length(route, facts) == 0:
        return replace(request, draft_length=0, acceptance_prior=None)
    return request


def route_draft_length(route: Route, facts: EngineFacts) -> int | None:
    """The draft length `route` fixes on an engine with these facts (None: the request's)."""
    return 0 if route == "plain" and facts.per_request_draft_length else None
