"""The mover over fake engines with token ids: segments, usage and the requests it makes."""

from __future__ import annotations

from dataclasses import dataclass, field

from app.engine.fakes.scripted import FakeEngine
from app.engine.generation import GenerationRequest, SamplingOptions
from app.routing.draft_replay import DraftReplay, NgramConfig
from app.routing.policy import MoveProposal
from app.switching import FIRST_CHECK_TOKENS, MoveContext, Mover, not_movable
from app.vocabulary import Route

NGRAM = NgramConfig(k=3, min_n=2, max_n=3, max_model_len=1000)
PROMPT = [1, 2, 3]  # the fake's words t1 t2 t3, which its default script repeats


def unmoved(tokens: int) -> list[int]:
    return [PROMPT[i % 3] for i in range(tokens)]


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
) -> tuple[Mover, dict[Route, FakeEngine], Advice]:
    engines: dict[Route, FakeEngine] = {
        "plain": FakeEngine("plain", max_model_len=1000),
        "speculative": FakeEngine("speculative", max_model_len=1000),
    }
    advice = Advice(policy_route)
    options = SamplingOptions(max_tokens=max_tokens, temperature=0)
    request = GenerationRequest("r", list(PROMPT), options)
    made = Mover(
        engines, request, first, "start", NGRAM, advice,
        expected_tokens=max_tokens, move_after=move_after,
    )  # fmt: skip
    return made, engines, advice


async def test_a_forced_move_continues_from_the_tokens_so_far() -> None:
    made, engines, advice = mover(move_after=5)
    steps = [step async for step in made.steps()]
    tokens = [t for step in steps for d in step.choices for t in d.token_ids]
    assert tokens == unmoved(60)  # the same answer as without the move
    assert all(step.prompt_tokens == 3 for step in steps)
    report = made.report()
    assert [s.route for s in report.segments] == ["plain", "speculative"]
    assert [s.tokens for s in report.segments] == [5, 55]
    assert report.route == "speculative"
    assert advice.moves == [("plain", "speculative")]
    (second,) = engines["speculative"].requests
    assert second.prompt == [*PROMPT, *unmoved(5)]
    assert second.options.max_tokens == 55
    assert second.request_id == "r-m1"
    # The segment that finished on the speculative engine reports the engine's own figures.
    assert report.speculative_stats is not None
    assert report.speculative_stats == report.segments[1].draft_stats


async def test_a_speculative_segment_moved_away_reports_its_replayed_drafting() -> None:
    made, _, _ = mover(move_after=5, first="speculative")
    [step async for step in made.steps()]
    report = made.report()
    assert [s.route for s in report.segments] == ["speculative", "plain"]
    # vLLM reports figures only for finished requests; the replay of the segment's five
    # tokens stands in (a repeated prompt: its drafts are accepted).
    replay = DraftReplay(PROMPT, NGRAM)
    replay.feed(unmoved(5))
    replay.finish()
    assert report.segments[0].draft_stats == replay.stats
    assert replay.stats.accepted_tokens > 0
    assert report.speculative_stats == report.segments[0].draft_stats


async def test_the_policy_moves_at_checkpoints_only() -> None:
    made, _, advice = mover(move_after=None, policy_route="speculative", max_tokens=80)
    tokens = [t async for step in made.steps() for d in step.choices for t in d.token_ids]
    assert tokens == unmoved(80)
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
