"""One routed request in flight: primes the engine, keeps the books, reports once when released."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Literal

from app.engine.generation import FinishReason, GenerationStep, PromptEcho, TokenLogprob
from app.errors import EngineFailureError, SpecgateError
from app.routing.draft_replay import DraftReplay, NgramConfig, ReplayFigures
from app.routing.feedback import Outcome, RunListener, RunReport
from app.routing.policy import RouteDecision
from app.switching import Mover, Segment
from app.vocabulary import PredictionCounts, Route, SpecDecodeStats

logger = logging.getLogger("specgate.generation")

Endpoint = Literal["chat", "completions", "responses"]
# The id prefix OpenAI gives each endpoint's objects.
ID_PREFIXES: dict[Endpoint, str] = {
    "chat": "chatcmpl-",
    "completions": "cmpl-",
    "responses": "resp_",
}


@dataclass
class ChoiceResult:
    text: str = ""
    tokens: int = 0
    finish_reason: FinishReason | None = None
    logprobs: list[TokenLogprob] | None = None
    echo: PromptEcho | None = None


# Compared by identity: the dispatcher keeps the runs in flight in a dict.
@dataclass(eq=False)
class Run:
    decision: RouteDecision
    endpoint: Endpoint
    # Told once, when the run is released.
    listener: RunListener
    request_id: str = ""
    # When the request was made, in Unix seconds: the response's `created`.
    created: int = field(default_factory=lambda: int(time.time()))
    prompt_tokens: int = 0
    choices: dict[int, ChoiceResult] = field(default_factory=dict)
    draft_stats: SpecDecodeStats | None = None
    # How the request's prediction of its answer fared, if it brought one.
    prediction: PredictionCounts | None = None
    started_at: float = field(default_factory=time.monotonic)
    first_token_at: float | None = None
    finished_at: float | None = None
    failed: bool = False
    # The replay config: drafting's figures for single-sequence runs on engines with token ids.
    ngram: NgramConfig | None = None
    # Replays the output through an ngram drafter: what drafting gives this request, on
    # either route (a moving request's mover keeps its own).
    _replay: DraftReplay | None = None
    # The steps' source when the request may move between engines mid-stream.
    _mover: Mover | None = None
    _steps: AsyncIterator[GenerationStep] | None = None
    _first: GenerationStep | None = None
    # The task reading the steps, and why it was told to stop (see `cut`).
    _reader: asyncio.Task[object] | None = None
    _cut: SpecgateError | None = None
    # Told its listener it completed (every choice has its finish reason).
    _completed: bool = False

    @classmethod
    async def start(
        cls,
        steps: AsyncIterator[GenerationStep],
        decision: RouteDecision,
        endpoint: Endpoint,
        listener: RunListener,
        request_id: str = "",
        ngram: NgramConfig | None = None,
        mover: Mover | None = None,
    ) -> Run:
        """Wait for the first of the engine's `steps` (its request is submitted by then).

        Errors the engine finds in the request surface here, while the caller can still
        answer with an error status instead of a broken stream.
        """
        run = cls(decision, endpoint, listener, request_id, ngram=ngram, _mover=mover)
        run._steps = steps
        try:
            run._first = await anext(run._steps)
        except StopAsyncIteration:
            run.failed = True
            await run.close()
            raise EngineFailureError("the engine returned no output") from None
        except BaseException:
            run.failed = True
            await run.close()
            raise
        run._account(run._first)
        return run

    @property
    def route(self) -> Route:
        """Where the request runs now (or ended)."""
        return self._mover.current_route() if self._mover is not None else self.decision.route

    @property
    def segments(self) -> tuple[Segment, ...] | None:
        """Each engine's share, for a request that may move (None: it may not)."""
        return self._mover.report().segments if self._mover is not None else None

    @property
    def moved(self) -> bool:
        return len(self.segments or ()) > 1

    @property
    def speculative_stats(self) -> SpecDecodeStats | None:
        """Drafting on the speculative route (summed over its segments when it moved)."""
        if self._mover is not None:
            return self._mover.report().speculative_stats
        # None: the engine gave no figures (a remote upstream without per-request metrics,
        # or n > 1 there): say nothing rather than report zero acceptance.
        return self.draft_stats if self.decision.route == "speculative" else None

    @property
    def replay(self) -> ReplayFigures | None:
        """What the draft replay has found so far (None: no replay runs)."""
        if self._mover is not None:
            return self._mover.report().replay
        return self._replay.figures() if self._replay is not None else None

    @property
    def finished(self) -> bool:
        return bool(self.choices) and all(c.finish_reason for c in self.choices.values())

    @property
    def outcome(self) -> Outcome:
        if self.failed:
            return "error"
        return "ok" if self.finished else "aborted"

    @property
    def completion_tokens(self) -> int:
        return sum(choice.tokens for choice in self.choices.values())

    async def steps(self) -> AsyncIterator[GenerationStep]:
        """Every step, the primed first one included; accounting is already applied."""
        assert self._steps is not None
        self._reader = asyncio.current_task()
        try:
            if self._first is not None:
                first, self._first = self._first, None
                yield first
            async for step in self._steps:
                self._account(step)
                yield step
        except asyncio.CancelledError:
            if self._cut is None or self._reader is None:
                raise
            # Our own cancellation (see `cut`), not the server's: the reader goes on, to
            # send the error. The engine's stream is closed by now, which aborted it.
            self._reader.uncancel()
            self.failed = True
            raise self._cut from None
        except SpecgateError:
            self.failed = True
            raise
        except Exception as exc:
            self.failed = True
            logger.exception("generation failed")
            raise EngineFailureError(f"generation failed: {exc}") from exc

    def cut(self, error: SpecgateError) -> None:
        """Stop the steps where they are waiting, and have `steps()` raise `error` instead.

        For streams still open when the server must go: they end with an error event and
        [DONE], as when an engine dies, instead of a connection closed mid-answer.
        """
        if self._reader is not None and not self._reader.done() and self._cut is None:
            self._cut = error
            self._reader.cancel()

    async def collect(self) -> None:
        try:
            async for _ in self.steps():
                pass
        finally:
            await self.close()

    async def close(self) -> None:
        """Release the request (aborting it in the engine if unfinished) and report it."""
        if self._steps is None:
            return
        steps, self._steps = self._steps, None
        await steps.aclose()  # type: ignore[attr-defined]
        self.finished_at = time.monotonic()
        if self._mover is not None:
            self._mover.finish()
        if self._replay is not None:
            self._replay.finish()
        self.listener.run_finished(self._report(self.finished_at))

    def _report(self, finished_at: float) -> RunReport:
        ordered = [choice for _, choice in sorted(self.choices.items())]
        return RunReport(
            request_id=self.request_id,
            endpoint=self.endpoint,
            decision=self.decision,
            route=self.route,
            outcome=self.outcome,
            moved=self.moved,
            choices=len(self.choices),
            prompt_tokens=self.prompt_tokens,
            completion_tokens=self.completion_tokens,
            started_at=self.started_at,
            first_token_at=self.first_token_at,
            finished_at=finished_at,
            draft_stats=self.draft_stats,
            speculative_stats=self.speculative_stats,
            replay=self.replay,
            outputs=tuple(choice.text for choice in ordered),
        )

    def _account(self, step: GenerationStep) -> None:
        self.prompt_tokens = step.prompt_tokens
        replays = self._mover is None and self.ngram is not None and len(step.choices) == 1
        if self._replay is None and replays and step.prompt_token_ids is not None:
            assert self.ngram is not None
            self._replay = DraftReplay(step.prompt_token_ids, self.ngram)
        for delta in step.choices:
            if self._replay is not None:
                self._replay.feed(delta.token_ids)
            choice = self.choices.setdefault(delta.index, ChoiceResult())
            choice.text += delta.text
            choice.tokens += delta.new_tokens
            if delta.echo is not None:
                choice.echo = delta.echo
            if delta.logprobs is not None:
                choice.logprobs = [*(choice.logprobs or []), *delta.logprobs]
            if delta.new_tokens and self.first_token_at is None:
                self.first_token_at = time.monotonic()
            if delta.finish_reason is not None:
                choice.finish_reason = delta.finish_reason
            stats, before = delta.draft_stats, self.draft_stats
            if stats is not None:
                self.draft_stats = stats if before is None else before + stats
            if delta.prediction is not None:
                # One final delta: a request with a prediction has one choice and never moves.
                self.prediction = delta.prediction
        if self._replay is not None and self.finished:
            # Settled now, not at close: the stream's last chunk reports it before the close.
            self._replay.finish()
        if self.finished and not self._completed:
            self._completed = True
            self.listener.run_completed(self._report(time.monotonic()))
