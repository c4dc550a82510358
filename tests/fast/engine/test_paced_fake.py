"""The routing benchmark's paced fake engine: batched steps, the prefix cache, drafts that land
by their chances, and repeats where the replica has served the prompt before."""

from __future__ import annotations

import asyncio

from app.drafting.length_rule import StepCostPrior
from app.engine.fakes.paced import BLOCK_TOKENS, DraftChances, PacedFakeEngine, StepPacing
from app.engine.generation import GenerationRequest, SamplingOptions

# Steps of a fraction of a millisecond: the tests count steps, not time.
QUICK = StepCostPrior(
    base_ms=0.2, per_sequence_ms=0.0, per_token_ms=0.0, per_sequence_drafting_ms=0.0
)
ALWAYS = DraftChances(proposes=1.0, first=1.0, next=1.0)
NEVER = DraftChances(proposes=1.0, first=0.0, next=0.0)
PROMPT = " ".join(f"w{i}" for i in range(2 * BLOCK_TOKENS + 3))


def pacing(
    chances: DraftChances = ALWAYS, line: StepCostPrior = QUICK, **more: object
) -> StepPacing:
    return StepPacing(line=line, chances={"code": chances}, default=NEVER, **more)  # type: ignore[arg-type]


def request(
    rid: str, tokens: int, draft: int | None = 0, prior: float | None = None
) -> GenerationRequest:
    return GenerationRequest(
        rid,
        PROMPT,
        SamplingOptions(max_tokens=tokens),
        draft_length=draft,
        acceptance_prior=prior,
        workload_class="code",
    )


async def answer(engine: PacedFakeEngine, req: GenerationRequest) -> tuple[int, object]:
    tokens, stats = 0, None
    async for step in engine.generate(req):
        for choice in step.choices:
            tokens += choice.new_tokens
            stats = choice.draft_stats or stats
    return tokens, stats


def test_requests_in_flight_share_steps() -> None:
    async def run() -> tuple[int, int]:
        alone = PacedFakeEngine(pacing())
        await answer(alone, request("a", 20))
        together = PacedFakeEngine(pacing())
        await asyncio.gather(*(answer(together, request(f"r{i}", 20)) for i in range(4)))
        return alone.clock.steps, together.clock.steps

    alone, together = asyncio.run(run())
    assert alone == 20  # the prefill's step yields the first token
    assert together == alone  # four requests, one step loop: the same steps, not four times


def test_landed_drafts_cut_the_steps_and_are_reported() -> None:
    async def run(chances: DraftChances) -> tuple[int, int, object]:
        engine = PacedFakeEngine(pacing(chances))
        tokens, stats = await answer(engine, request("a", 21, draft=4))
        return engine.clock.steps, tokens, stats

    steps, tokens, stats = asyncio.run(run(ALWAYS))
    # The prefill's token, then 5 a step (4 drafts landed and the bonus token).
    assert (steps, tokens) == (5, 21)
    assert stats is not None and stats.accepted_tokens == 16  # type: ignore[attr-defined]
    steps, tokens, stats = asyncio.run(run(NEVER))
    assert (steps, tokens) == (21, 21)
    assert stats is not None and stats.accepted_tokens == 0  # type: ignore[attr-defined]
    # 4 a step until the answer's last tokens: no draft reaches past max_tokens.
    assert stats.draft_tokens == 4 * 16 + 3 + 2 + 1  # type: ignore[attr-defined]


def test_an_adaptive_request_drafts_only_where_the_line_says_it_pays() -> None:
    # Each draft token costs as much as the whole step's base: at 10 % acceptance, never worth it.
    dear = StepCostPrior(
        base_ms=0.1, per_sequence_ms=0.0, per_token_ms=0.1, per_sequence_drafting_ms=0.0
    )

    async def run() -> object:
        engine = PacedFakeEngine(pacing(NEVER, line=dear))
        return (await answer(engine, request("a", 10, draft=5, prior=0.1)))[1]

    stats = asyncio.run(run())
    assert stats is None or stats.draft_tokens == 0  # type: ignore[attr-defined]


def test_the_prefix_cache_holds_what_the_replica_computed() -> None:
    async def run() -> tuple[int, int]:
        engine = PacedFakeEngine(pacing())
        before = engine.clock.cached_tokens(_ids())
        await answer(engine, request("a", 4))
        return before, engine.clock.cached_tokens(_ids())

    before, after = asyncio.run(run())
    assert before == 0
    assert after == 2 * BLOCK_TOKENS  # the full blocks of the prompt (its tail is a part block)


def test_a_prompt_seen_before_repeats_with_its_class_share() -> None:
    repeating = DraftChances(proposes=1.0, first=1.0, next=1.0)

    async def run() -> tuple[int, int]:
        engine = PacedFakeEngine(pacing(NEVER, repeats={"code": 1.0}, repeating=repeating))
        first = (await answer(engine, request("a", 21, draft=4)))[1]
        second = (await answer(engine, request("b", 21, draft=4)))[1]
        return first.accepted_tokens, second.accepted_tokens  # type: ignore[union-attr]

    assert asyncio.run(run()) == (0, 16)


def _ids() -> tuple[int, ...]:
    from app.engine.fakes.scripted import prompt_ids_of, prompt_words

    return prompt_ids_of(PROMPT, prompt_words(PROMPT))
