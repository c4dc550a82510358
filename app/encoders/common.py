"""What every endpoint family reports the same way: usage, route info, headers, finishes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Literal, Protocol

from pydantic import BaseModel

from app.engine.types import ChoiceDelta, FinishReason, SpecDecodeStats
from app.generation import ChoiceResult, Run
from app.schemas.common import RouteInfo, RouteSegment, SpeculativeUsage, Usage


class ResponseEncoder(Protocol):
    """One endpoint family's encoder for a run: its whole response, and its stream."""

    def response(self, run: Run) -> BaseModel:
        """The whole response of a finished run."""
        ...

    def sse(
        self, run: Run, include_usage: bool, every_chunk: bool = False
    ) -> AsyncIterator[bytes | dict[str, str]]:
        """The run as server-sent events; `every_chunk`: the usage so far on each chunk
        (vLLM's continuous_usage_stats). Closing it early aborts the request."""
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


def speculative_usage(run: Run) -> SpeculativeUsage | None:
    if run.mover is not None:
        # The speculative segments' figures, summed (None if none was speculative).
        return _usage_of(run.mover.speculative_stats())
    if run.decision.route != "speculative":
        return None
    # None: the engine gave no figures (a remote upstream without per-request metrics, or
    # n > 1 there): say nothing rather than report zero acceptance.
    return _usage_of(run.draft_stats)


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
    return Usage(
        prompt_tokens=run.prompt_tokens,
        completion_tokens=run.completion_tokens,
        total_tokens=run.prompt_tokens + run.completion_tokens,
        speculative_decoding=speculative_usage(run),
    )


def route_info(run: Run) -> RouteInfo:
    decision = run.decision
    return RouteInfo(
        route=decision.route,
        workload_class=decision.workload_class.value,
        reason=decision.reason,
        speculative_decoding=speculative_usage(run),
        shadow_drafting=_usage_of(run.draft_replay.stats if run.draft_replay is not None else None),
        segments=None
        if run.mover is None
        else [
            RouteSegment(route=s.route, tokens=s.tokens, reason=s.reason)
            for s in run.mover.segments
        ],
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
