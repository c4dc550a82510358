"""A fake engine whose steps take what a real engine's would: the routing benchmark's replica.

Two real engines do not fit the 2-core machine specgate is developed on, so the benchmark of
Ray Serve routers (bench/ray_fake_server.py) runs fake replicas paced like the real one: every
request in the replica shares one step loop (continuous batching), and each step lasts what
the real engine's measured step-cost line says for its sequences and tokens (prompt tokens on
a request's first step, one decoded token per sequence, and the draft tokens verified). What
a router's choice changes is then what it changes on a real engine:

- the batch a request joins, hence its step time and its neighbours';
- the prefix cache (vLLM's automatic prefix caching): prompt blocks this replica has computed
  before cost nothing again;
- drafting: a request with a draft length drafts every step it is offered a draft; each draft
  token lands with its class's chance (given the one before landed), and a request with an
  acceptance prior gets its length re-chosen every step by the same rule as the real one
  engine (app/drafting/length_rule.py's choose_lengths over the pacing's line);
- a suffix drafter's earlier answers: a request whose prompt this replica has mostly seen
  before (a conversation's earlier turns, a repeated prompt) repeats an earlier answer with
  its class's share, and then drafts with the repeating chance.

The figures (line, chances, shares) are the pacing's, set by the benchmark with their sources.
Draws are seeded by the request's prompt, so every router's run sees the same dice for the
same request in the same state.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field, replace

from app.drafting.length_rule import Candidate, StepCost, StepCostPrior, choose_lengths
from app.engine.fakes.scripted import FakeEngine, prompt_ids_of, prompt_words
from app.engine.generation import GenerationRequest, GenerationStep
from app.placement.prefix_table import CHUNK_IDS, PrefixTable, prompt_chunks
from app.vocabulary import SpecDecodeStats

# vLLM's KV block: the prefix cache's unit (the prefix table's chunk of token ids).
BLOCK_TOKENS = CHUNK_IDS
# The one engine's key in its prefix table (a router's table keys replicas).
_HERE = ""
# A prompt this share of which is cached here is a conversation this replica served before.
SEEN_SHARE = 0.5


@dataclass(frozen=True)
class DraftChances:
    """One class's drafts: the chance a proposal is made at a step, the first token's
    landing chance, and each later token's given the one before landed."""

    proposes: float
    first: float
    next: float


@dataclass(frozen=True)
class StepPacing:
    line: StepCostPrior
    chances: Mapping[str, DraftChances]
    # Chances for a class the table lacks (an unclassified request).
    default: DraftChances
    # Share of each class's requests, seen here before, that repeat an earlier answer.
    repeats: Mapping[str, float] = field(default_factory=dict)
    repeating: DraftChances = DraftChances(0.98, 0.97, 0.97)
    # The engine's K where a request leaves the length to it.
    default_draft: int = 5
    # Prefix-cache blocks kept (least recently used go first).
    cache_blocks: int = 16384


class _Seat:
    """One request in the step loop: tokens it is owed, what it drafts, what it yields."""

    def __init__(
        self,
        prefill: int,
        limit: int,
        draft: int,
        adaptive: bool,
        chances: DraftChances,
        rng: random.Random,
    ) -> None:
        self.prefill = prefill
        self.left = limit
        self.draft = draft
        self.adaptive = adaptive
        self.chances = chances
        self.rng = rng
        self.credit = 0
        self.ready = asyncio.Event()
        self.stats = SpecDecodeStats(0, 0, 0)

    def candidate(self) -> Candidate | None:
        # No draft reaches past the request's last token.
        available = min(self.draft, self.left - 1)
        if available <= 0 or self.prefill or self.rng.random() >= self.chances.proposes:
            return None
        mean = (self.chances.first + self.chances.next * (available - 1)) / available
        return Candidate(available, mean, self.adaptive)

    def landed(self, k: int) -> int:
        """Of k draft tokens verified, how many land (a run from the first)."""
        chance = self.chances.first
        for landed in range(k):
            if self.rng.random() >= chance:
                return landed
            chance = self.chances.next
        return k


class StepClock:
    """The replica's step loop: steps run while any request is in it."""

    def __init__(self, pacing: StepPacing) -> None:
        self.pacing = pacing
        self.line = StepCost(pacing.line, fixed=True)
        self.seats: dict[str, _Seat] = {}
        # vLLM's automatic prefix caching: chained keys of the blocks computed here.
        self.blocks = PrefixTable(keys_per_replica=pacing.cache_blocks)
        # Steps run and tokens computed in them, as an engine's counters would say.
        self.steps = 0
        self.tokens = 0
        self._loop: asyncio.Task[None] | None = None

    def cached_tokens(self, ids: tuple[int, ...]) -> int:
        """Leading prompt tokens whose blocks this replica has computed (touching them)."""
        chunks, block = prompt_chunks(ids)
        cached = self.blocks.cached_tokens(_HERE, chunks, block)
        self.blocks.sent(_HERE, chunks[: cached // block])
        return cached

    def remember(self, ids: tuple[int, ...]) -> None:
        self.blocks.sent(_HERE, prompt_chunks(ids)[0])

    def join(self, request_id: str, seat: _Seat) -> None:
        self.seats[request_id] = seat
        if self._loop is None or self._loop.done():
            self._loop = asyncio.create_task(self._run())

    def leave(self, request_id: str) -> None:
        self.seats.pop(request_id, None)

    async def _run(self) -> None:
        while self.seats:
            seats = [s for s in self.seats.values() if s.left > 0]
            if not seats:
                await asyncio.sleep(0.001)  # owed tokens still being read out
                continue
            offers = [(s, s.candidate()) for s in seats]
            drafting = [(s, c) for s, c in offers if c is not None]
            lengths = choose_lengths([c for _, c in drafting], len(seats), self.line)
            verified = sum(lengths)
            tokens = len(seats) + verified + sum(s.prefill for s in seats)
            await asyncio.sleep(self.line.predict(len(seats), tokens, verified > 0) / 1000)
            self.steps += 1
            self.tokens += tokens
            drafts = {id(s): k for (s, _), k in zip(drafting, lengths, strict=True)}
            for seat in seats:
                k = drafts.get(id(seat), 0)
                gained = 1 + seat.landed(k) if k else 1
                if k:
                    seat.stats = seat.stats + SpecDecodeStats(1, k, gained - 1)
                seat.prefill = 0
                seat.credit += min(gained, seat.left)
                seat.left -= min(gained, seat.left)
                seat.ready.set()


class PacedFakeEngine(FakeEngine):
    """FakeEngine's answers, at the pace of StepClock's batched steps."""

    def __init__(self, pacing: StepPacing, max_model_len: int = 65536) -> None:
        super().__init__("speculative", max_model_len=max_model_len, per_request_draft_length=True)
        self.clock = StepClock(pacing)
        self._seats: dict[str, _Seat] = {}
        self.facts = replace(self.facts, step_cost_prior=pacing.line)

    async def generate(self, request: GenerationRequest) -> AsyncIterator[GenerationStep]:
        words = prompt_words(request.prompt)
        ids = prompt_ids_of(request.prompt, words)
        cached = self.clock.cached_tokens(ids)
        seat = self._seat(request, len(ids), cached)
        self._seats[request.request_id] = seat
        self.clock.join(request.request_id, seat)
        answer: list[int] = []
        try:
            async for step in super().generate(request):
                for choice in step.choices:
                    answer.extend(choice.token_ids or ())
                yield step
        finally:
            self.clock.leave(request.request_id)
            self._seats.pop(request.request_id, None)
            self.clock.remember(ids + tuple(answer))

    def _seat(self, request: GenerationRequest, prompt: int, cached: int) -> _Seat:
        pacing = self.pacing
        rng = random.Random(_digest(str(request.prompt)))
        workload = request.workload_class or ""
        chances = pacing.chances.get(workload, pacing.default)
        seen = cached >= SEEN_SHARE * prompt
        if seen and rng.random() < pacing.repeats.get(workload, 0.0):
            chances = pacing.repeating
        draft = pacing.default_draft if request.draft_length is None else request.draft_length
        limit = max(1, self._answer_limit(request.options, prompt))
        adaptive = request.acceptance_prior is not None
        # Blocks already computed cost nothing; the last token is always computed.
        return _Seat(max(1, prompt - cached), limit, draft, adaptive, chances, rng)

    @property
    def pacing(self) -> StepPacing:
        return self.clock.pacing

    async def _pace(self, request: GenerationRequest) -> None:
        seat = self._seats[request.request_id]
        while seat.credit == 0:
            seat.ready.clear()
            await seat.ready.wait()
        seat.credit -= 1

    def _spec(self, request: GenerationRequest, tokens: int) -> SpecDecodeStats | None:
        seat = self._seats.get(request.request_id)
        return seat.stats if seat is not None else None


def _digest(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")
