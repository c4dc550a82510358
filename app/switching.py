"""Moving a streaming request between the engines, mid-stream, without the client noticing.

A move ends the request on one engine and continues it on the other with the prompt plus
the tokens generated so far as token ids, and `max_tokens` reduced by what was produced.
The client sees one stream: prompt counts stay the original prompt's, token counts add up,
logprobs continue. Greedy output is unchanged, because both engines compute the same model
on the same tokens (tests/engine/test_switching.py).

Only requests whose state is all in their tokens can move; `not_movable` names the others.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Protocol

from app.engine.generation import GenerationRequest, GenerationStep
from app.engine.protocol import Engine, for_route
from app.routing.draft_replay import DraftReplay, NgramConfig, ReplayFigures
from app.routing.policy import MoveProposal
from app.vocabulary import Route, SpecDecodeStats, other_route

logger = logging.getLogger("specgate.switching")

# Look first after FIRST_CHECK_TOKENS, then again after every CHECK_EVERY_TOKENS new tokens;
# never move with fewer than MIN_REMAINING to go, and at most MAX_MOVES times: a move
# re-reads the whole context. The first look waits for a few draft steps' worth of evidence.
FIRST_CHECK_TOKENS = 32
CHECK_EVERY_TOKENS = 16
MIN_REMAINING_TOKENS = 32
MAX_MOVES = 2
# The request's own drafting yield is judged over its last this-many replayed steps.
RECENT_STEPS = 16

# "adaptive": only when the client forces it (the gateway proposes no moves in one engine).
BASES_THAT_MAY_MOVE = frozenset({"learned", "adaptive", "explore", "load", "acceptance"})


@dataclass
class Segment:
    """One engine's share of a request."""

    route: Route
    reason: str
    tokens: int = 0
    # The speculative engine's figures; for a segment moved away (vLLM reports per-request
    # figures only when a request finishes), the draft replay of its tokens,
    # which matches the ngram engine's (tests/engine/test_engines.py).
    draft_stats: SpecDecodeStats | None = None


@dataclass(frozen=True)
class MoveContext:
    """What the decision to move sees at a checkpoint."""

    route: Route
    remaining_tokens: int
    context_tokens: int
    drafting_now: float | None
    # How many replayed steps `drafting_now` covers.
    drafting_steps: int = 0


class MoveAdvice(Protocol):
    """What a mover asks at each checkpoint, and tells when it moves."""

    def propose(self, context: MoveContext) -> MoveProposal | None:
        """Where the rest should go, or None to stay."""
        ...

    def moved(self, source: Route, target: Route, proposal: MoveProposal) -> None:
        """The request left `source` for `target` (load accounting, metrics)."""
        ...


@dataclass(frozen=True)
class MoveReport:
    """A moving request as it stands: what the run reports of it."""

    route: Route
    segments: tuple[Segment, ...]
    # Drafting on the speculative route, summed over its segments (None: none drafted).
    speculative_stats: SpecDecodeStats | None
    # The replay of the whole output (None before the first step).
    replay: ReplayFigures | None


def not_movable(
    request: GenerationRequest, basis: str, ngram: NgramConfig | None, forced: bool = False
) -> str | None:
    """Why this request must stay where it started, or None if it may move.

    A client that pinned a route stays on it, unless it asked for a move itself (`forced`).
    """
    options = request.options
    if basis not in BASES_THAT_MAY_MOVE and not (forced and basis == "header"):
        return f"routed by {basis}"
    reasons = {
        # Moves are judged by the draft replay: it needs ngram drafting and token ids.
        "no draft replay (not ngram speculation, or an engine without token ids)": (ngram is None),
        "n > 1": options.n > 1,
        # The grammar's state would restart on the other engine.
        "structured output": options.json_schema is not None,
        "echo": options.echo,
        # vLLM holds back text that may start a stop string; a move would lose it.
        "stop strings": bool(options.stop),
        # A seed reproduces a sampled answer only on the route it was drawn on; greedy
        # answers ignore it.
        "a seed": options.seed is not None and options.temperature != 0,
        # Penalties count output tokens, which become prompt tokens after a move.
        "presence or frequency penalty": bool(
            options.presence_penalty or options.frequency_penalty
        ),
    }
    return next((reason for reason, applies in reasons.items() if applies), None)


@dataclass
class Mover:
    """The steps of a request that may change engines; the run reads them, and its report."""

    engines: Mapping[Route, Engine]
    request: GenerationRequest
    first_route: Route
    first_reason: str
    ngram: NgramConfig
    advice: MoveAdvice
    expected_tokens: float
    # A client's X-Specgate-Move-After: one move, after this many tokens, whatever it costs.
    move_after: int | None = None
    _segments: list[Segment] = field(default_factory=list)
    # The whole output replayed through the ngram drafter: what drafting gives the request
    # now, and what the run reports as its replay (one replay per request, not two).
    _replay: DraftReplay | None = None

    def current_route(self) -> Route:
        """Where the request runs now: cheap, for the load book's every decision."""
        return self._segments[-1].route if self._segments else self.first_route

    def report(self) -> MoveReport:
        segments = tuple(replace(segment) for segment in self._segments)
        route = self.current_route()
        figures = [s.draft_stats for s in segments if s.route == "speculative" and s.draft_stats]
        speculative = sum(figures[1:], figures[0]) if figures else None
        replay = self._replay.figures() if self._replay is not None else None
        return MoveReport(route, segments, speculative, replay)

    def finish(self) -> None:
        """The output is complete: the replay settles its last steps."""
        if self._replay is not None:
            self._replay.finish()

    async def steps(self) -> AsyncIterator[GenerationStep]:
        options = self.request.options
        request = self.request
        segment = Segment(self.first_route, self.first_reason)
        self._segments.append(segment)
        prompt_ids: tuple[int, ...] | None = None
        output: list[int] = []
        # A speculative segment's own replay: its figures if it is moved away.
        part: DraftReplay | None = None
        next_check = FIRST_CHECK_TOKENS
        while True:
            proposal: MoveProposal | None = None
            engine = self.engines[segment.route]
            stream = engine.generate(for_route(request, segment.route, engine.facts))
            try:
                async for step in stream:
                    if prompt_ids is None:
                        prompt_ids = step.prompt_token_ids or ()
                        self._replay = DraftReplay(prompt_ids, self.ngram)
                    if part is None and segment.route == "speculative":
                        part = DraftReplay((*prompt_ids, *output), self.ngram)
                    original_prompt = step.prompt_token_ids if not output else None
                    for delta in step.choices:
                        output.extend(delta.token_ids)
                        segment.tokens += delta.new_tokens
                        if part is not None:
                            part.feed(delta.token_ids)
                        if self._replay is not None:
                            self._replay.feed(delta.token_ids)
                        if delta.draft_stats is not None:
                            segment.draft_stats = delta.draft_stats
                    done = all(delta.finish_reason for delta in step.choices)
                    if done and self._replay is not None:
                        # Settled before the last step goes up: the run reports it with it.
                        self._replay.finish()
                    yield replace(
                        step, prompt_tokens=len(prompt_ids), prompt_token_ids=original_prompt
                    )
                    if done:
                        return
                    if self.move_after is not None or (
                        len(output) >= next_check and len(self._segments) <= MAX_MOVES
                    ):
                        next_check = len(output) + CHECK_EVERY_TOKENS
                        proposal = self._ask(segment.route, len(prompt_ids), output)
                        if proposal is not None:
                            break
            finally:
                await stream.aclose()  # type: ignore[attr-defined]  # aborts an unfinished request
            if proposal is None or prompt_ids is None:
                return
            if part is not None and segment.draft_stats is None:
                part.finish()
                segment.draft_stats = part.stats
            logger.info("request %s moves: %s", self.request.request_id, proposal.reason)
            self.advice.moved(segment.route, proposal.route, proposal)
            segment = Segment(proposal.route, proposal.reason)
            self._segments.append(segment)
            part = None
            left = None if options.max_tokens is None else options.max_tokens - len(output)
            request = GenerationRequest(
                f"{self.request.request_id}-m{len(self._segments) - 1}",
                [*prompt_ids, *output],
                replace(options, max_tokens=left),
                self.request.draft_length,
                self.request.acceptance_prior,
                tenant=self.request.tenant,
                workload_class=self.request.workload_class,
            )

    def _ask(self, route: Route, prompt_tokens: int, output: list[int]) -> MoveProposal | None:
        if not prompt_tokens:
            return None  # the engine gave no token ids to continue from
        if self.move_after is not None:
            if len(self._segments) > 1 or len(output) < self.move_after:
                return None
            other = other_route(route)
            return MoveProposal(other, "forced", f"{route} -> {other}: X-Specgate-Move-After")
        limit = self.request.options.max_tokens
        # An answer already past its expected length is expected to go on a little.
        remaining = max(self.expected_tokens - len(output), float(CHECK_EVERY_TOKENS))
        if limit is not None:
            remaining = min(remaining, float(limit - len(output)))
        if remaining < MIN_REMAINING_TOKENS:
            return None
        replay = self._replay
        drafting = replay.recent_tokens_per_step(RECENT_STEPS) if replay is not None else None
        steps = min(RECENT_STEPS, replay.steps) if replay is not None else 0
        context = MoveContext(route, int(remaining), prompt_tokens + len(output), drafting, steps)
        return self.advice.propose(context)
