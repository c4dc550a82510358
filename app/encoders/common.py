"""What every endpoint family reports the same way: usage, route info, headers, finishes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel

from app.engine.generation import ChoiceDelta, FinishReason
from app.request_run import ChoiceResult, Run
from app.schemas.common import (
    CompletionTokensDetails,
    RequestMetrics,
    RouteInfo,
    RouteSegment,
    SpeculativeDecodingMetrics,
    SpeculativeUsage,
    Usage,
)
from app.vocabulary import SpecDecodeStats


class ResponseEncoder(Protocol):
    """One endpoint family's encoder for a run: its whole response (app/api/respond.py streams
    it)."""

    def response(self, run: Run) -> BaseModel:
        """The whole response of a finished run."""
        ...


class ChunkEncoder(ResponseEncoder, Protocol):
    """A family that streams chunks of its response (chat, completions), ended by [DONE]."""

    def chunk(self, delta: ChoiceDelta, first: bool, run: Run) -> BaseModel | None:
        """One choice's delta as a stream chunk (`first`: the choice's first), or None when
        it has nothing to say yet."""
        ...

    def usage_chunk(self, run: Run) -> BaseModel:
        """The stream's last chunk when usage was asked for: no choices, the usage."""
        ...


@runtime_checkable
class EventEncoder(ResponseEncoder, Protocol):
    """A family that streams typed events of its own (the Responses API)."""

    def events(self, run: Run) -> AsyncIterator[dict[str, str]]:
        """The run as server-sent events. Closing it early aborts the request."""
        ...


def speculative_usage(run: Run) -> SpeculativeUsage | None:
    return _usage_of(run.speculative_stats)


def _usage_of(spec: SpecDecodeStats | None) -> SpeculativeUsage | None:
    if spec is None:
        return None
    return SpeculativeUsage(
        drafts=spec.drafts,
        draft_tokens=spec.draft_tokens,
        accepted_tokens=spec.accepted_tokens,
        acceptance_rate=round(spec.acceptance_rate, 4),
        draft_lengths=list(spec.draft_lengths) if spec.draft_lengths else None,
    )


def usage(run: Run) -> Usage:
    prediction = run.prediction
    return Usage(
        prompt_tokens=run.prompt_tokens,
        completion_tokens=run.completion_tokens,
        total_tokens=run.prompt_tokens + run.completion_tokens,
        completion_tokens_details=None
        if prediction is None
        else CompletionTokensDetails(
            accepted_prediction_tokens=prediction.accepted,
            rejected_prediction_tokens=prediction.rejected,
        ),
        speculative_decoding=speculative_usage(run),
    )


def id_fields(run: Run, model: str) -> dict[str, Any]:
    """The fields that name a response or chunk: its id, creation time and model."""
    return {"id": run.request_id, "created": run.created, "model": model}


def closing_fields(run: Run) -> dict[str, Any]:
    """The fields a whole response, or a stream's last chunk, ends with."""
    return {"usage": usage(run), "specgate": route_info(run), "metrics": request_metrics(run)}


def request_metrics(run: Run) -> RequestMetrics | None:
    """vLLM's per-request speculation figures, as vLLM gives them: single-choice requests
    that an engine reporting them (its K and acceptance histogram) drafted for."""
    spec = run.speculative_stats
    if spec is None or not spec.spec_tokens or len(run.choices) != 1:
        return None
    steps = sum(spec.acceptance_histogram)
    return RequestMetrics(
        speculative_decoding=SpeculativeDecodingMetrics(
            mean_acceptance_length=1 + spec.accepted_tokens / steps if steps else 1.0,
            draft_acceptance_rate=spec.acceptance_rate,
            acceptance_histogram=list(spec.acceptance_histogram),
            num_spec_steps=steps,
            num_accepted_draft_tokens=spec.accepted_tokens,
            num_draft_tokens=spec.draft_tokens,
            num_spec_tokens=spec.spec_tokens,
        )
    )


def route_info(run: Run) -> RouteInfo:
    decision = run.decision
    return RouteInfo(
        route=decision.route,
        workload_class=decision.workload_class.value,
        reason=decision.reason,
        speculative_decoding=speculative_usage(run),
        shadow_drafting=_usage_of(run.replay.stats if run.replay is not None else None),
        segments=None
        if run.segments is None
        else [RouteSegment(route=s.route, tokens=s.tokens, reason=s.reason) for s in run.segments],
    )


def route_headers(run: Run) -> dict[str, str]:
    decision = run.decision
    return {
        "x-specgate-route": decision.route,
        "x-specgate-class": decision.workload_class.value,
        "x-specgate-reason": decision.reason,
        "x-request-id": run.request_id,
    }


def public_finish(reason: FinishReason | None) -> Literal["stop", "length"] | None:
    # OpenAI knows stop and length. An aborted choice only reaches a client that is still
    # listening when the server stops it, which reads as a stop.
    if reason is None:
        return None
    return "length" if reason == "length" else "stop"


def finished_choices(run: Run) -> list[tuple[int, ChoiceResult, Literal["stop", "length"]]]:
    """(index, result, finish reason) of each choice, in order, for a non-streamed response."""
    return [
        (index, choice, public_finish(choice.finish_reason) or "stop")
        for index, choice in sorted(run.choices.items())
    ]
