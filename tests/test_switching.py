"""The mover on a scripted engine that exposes token ids: segments, usage and requests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from app.engine.base import EngineFacts
from app.engine.types import (
    ChoiceDelta,
    GenerationRequest,
    GenerationStep,
    Route,
    SamplingOptions,
)
from app.routing.draft_replay import NgramConfig
from app.routing.policy import MoveProposal
from app.switching import FIRST_CHECK_TOKENS, MoveContext, Mover, not_movable

NGRAM = NgramConfig(k=3, min_n=2, max_n=3, max_model_len=1000)


class CountingEngine:
    """Continues any token-id prompt with the next integers, one token a step."""

    facts = EngineFacts(exposes_token_ids=True)

    def __init__(self, route: Route) -> None:
        self.route: Route = route
        self.requests: list[GenerationRequest] = []

    async def generate(self, request: GenerationRequest) -> AsyncIterator[GenerationStep]:
        self.requests.append(request)
        prompt = list(request.prompt) if isinstance(request.prompt, list) else [1, 2, 3]
        limit = request.options.max_tokens or 10
        for i in range(limit):
            token = int(prompt[-1]) + 1 + i  # type: ignore[arg-type]
            finish = "length" if i + 1 == limit else None
            delta = ChoiceDelta(0, f" {token}", 1, finish_reason=finish, token_ids=(token,))
            first = tuple(prompt) if i == 0 else None  # type: ignore[arg-type]
            yield GenerationStep(len(prompt), [delta], prompt_token_ids=first)


@dataclass
class Advice:
    """Proposes `target` at every checkpoint not already there; keeps the moves it was told."""

    target: Route | None
    moves: list[tuple[Route, Route]] = field(default_factory=list)

    def propose(self, context: MoveContext) -> MoveProposal | None:
        if self.target is None or context.route == self.target:
            return None
        return MoveProposal(self.target, "load", "test")

    def moved(self, source: Route, target: Route, proposal: MoveProposal) -> None:
        self.moves.append((source, target))


def mover(
    move_after: int | None,
    policy_route: Route | None = None,
    first: Route = "plain",
    max_tokens: int = 60,
) -> tuple[Mover, dict[str, CountingEngine], Advice]:
    engines = {"plain": CountingEngine("plain"), "speculative": CountingEngine("speculative")}
    advice = Advice(policy_route)
    options = SamplingOptions(max_tokens=max_tokens, temperature=0)
    request = GenerationRequest("r", [1, 2, 3], options)
    made = Mover(
        engines, request, first, "start", NGRAM, advice,  # type: ignore[arg-type]
        expected_tokens=max_tokens, move_after=move_after,
    )  # fmt: skip
    return made, engines, advice


async def test_a_forced_move_continues_from_the_tokens_so_far() -> None:
    made, engines, advice = mover(move_after=5)
    steps = [step async for step in made.steps()]
    tokens = [t for step in steps for d in step.choices for t in d.token_ids]
    assert tokens == list(range(4, 64))  # one uninterrupted count
    assert all(step.prompt_tokens == 3 for step in steps)
    report = made.report()
    assert [s.route for s in report.segments] == ["plain", "speculative"]
    assert [s.tokens for s in report.segments] == [5, 55]
    assert report.route == "speculative"
    assert advice.moves == [("plain", "speculative")]
    (second,) = engines["speculative"].requests
    assert second.prompt == [1, 2, 3, 4, 5, 6, 7, 8]
    assert second.options.max_tokens == 55
    assert second.request_id == "r-m1"
    # The scripted engine reports no drafting figures for the segment that finished.
    assert report.speculative_stats is None


async def test_a_speculative_segment_moved_away_reports_its_replayed_drafting() -> None:
    made, _, _ = mover(move_after=5, first="speculative")
    [step async for step in made.steps()]
    report = made.report()
    assert [s.route for s in report.segments] == ["speculative", "plain"]
    # vLLM reports figures only for finished requests; the shadow replay of the segment's
    # five tokens stands in (a count has no repeated n-gram: nothing drafted).
    assert report.segments[0].draft_stats is not None
    assert report.speculative_stats == report.segments[0].draft_stats


async def test_the_policy_moves_at_checkpoints_only() -> None:
    made, _, advice = mover(move_after=None, policy_route="speculative", max_tokens=80)
    tokens = [t async for step in made.steps() for d in step.choices for t in d.token_ids]
    assert tokens == list(range(4, 84))
    # The first look waits for FIRST_CHECK_TOKENS of evidence.
    segments = made.report().segments
    assert [s.tokens for s in segments] == [FIRST_CHECK_TOKENS, 80 - FIRST_CHECK_TOKENS]
    assert advice.moves == [("plain", "speculative")]


async def test_no_move_leaves_too_little_to_gain() -> None:
    # At the first look, 60 - 32 tokens remain: fewer than MIN_REMAINING_TOKENS.
    made, _, advice = mover(move_after=None, policy_route="speculative", max_tokens=60)
    _ = [step async for step in made.steps()]
    assert [s.tokens for s in made.report().segments] == [60]
    assert advice.moves == []


def test_what_cannot_move() -> None:
    def why(**options: object) -> str | None:
        request = GenerationRequest("r", "x", SamplingOptions(**options))  # type: ignore[arg-type]
        return not_movable(request, "learned", NGRAM)

    assert why() is None
    assert why(json_schema={}) == "structured output"
    assert why(n=2) == "n > 1"
    assert why(echo=True) == "echo"
    assert why(seed=1) == "a seed"
    assert why(seed=1, temperature=0.0) is None  # greedy: the seed changes nothing
    assert why(stop=("x",)) == "stop strings"
    assert why(presence_penalty=0.1) == "presence or frequency penalty"
    request = GenerationRequest("r", "x", SamplingOptions())
    assert not_movable(request, "header", NGRAM) == "routed by header"
    assert not_movable(request, "learned", None) is not None
