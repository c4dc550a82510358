"""One routed request in flight: primes the engine, keeps the books, records metrics."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Literal

from app.engine.base import Engine
from app.engine.types import FinishReason, GenerationRequest, GenerationStep, SpecDecodeStats
from app.errors import EngineFailureError, SpecgateError
from app.metrics import GatewayMetrics
from app.routing.policy import RouteDecision

logger = logging.getLogger("specgate.generation")

Endpoint = Literal["chat", "completions"]
Outcome = Literal["ok", "aborted", "error"]


@dataclass
class ChoiceResult:
    text: str = ""
    tokens: int = 0
    finish_reason: FinishReason | None = None


@dataclass
class Run:
    decision: RouteDecision
    endpoint: Endpoint
    prompt_tokens: int = 0
    choices: dict[int, ChoiceResult] = field(default_factory=dict)
    spec: SpecDecodeStats | None = None
    _steps: AsyncIterator[GenerationStep] | None = None
    _first: GenerationStep | None = None
    _metrics: GatewayMetrics | None = None
    _started: float = 0.0
    _first_token_at: float | None = None
    _outcome: Outcome | None = None

    @classmethod
    async def start(
        cls,
        engine: Engine,
        request: GenerationRequest,
        decision: RouteDecision,
        endpoint: Endpoint,
        metrics: GatewayMetrics,
    ) -> Run:
        """Submit the request and wait for its first step.

        Errors the engine finds in the request surface here, while the caller can still
        answer with an error status instead of a broken stream.
        """
        run = cls(decision, endpoint, _metrics=metrics, _started=time.monotonic())
        run._steps = engine.generate(request)
        metrics.in_flight.labels(engine=decision.route).inc()
        try:
            run._first = await anext(run._steps)
        except StopAsyncIteration:
            await run.close()
            raise EngineFailureError("the engine returned no output") from None
        except BaseException:
            run._outcome = "error"
            await run.close()
            raise
        run._account(run._first)
        return run

    @property
    def finished(self) -> bool:
        return bool(self.choices) and all(c.finish_reason for c in self.choices.values())

    @property
    def completion_tokens(self) -> int:
        return sum(choice.tokens for choice in self.choices.values())

    async def steps(self) -> AsyncIterator[GenerationStep]:
        """Every step, the primed first one included; accounting is already applied."""
        assert self._steps is not None
        try:
            if self._first is not None:
                first, self._first = self._first, None
                yield first
            async for step in self._steps:
                self._account(step)
                yield step
        except SpecgateError:
            self._outcome = "error"
            raise
        except Exception as exc:
            self._outcome = "error"
            logger.exception("generation failed")
            raise EngineFailureError(f"generation failed: {exc}") from exc

    async def collect(self) -> None:
        try:
            async for _ in self.steps():
                pass
        finally:
            await self.close()

    async def close(self) -> None:
        """Release the request: aborts it in the engine if it has not finished."""
        if self._steps is None:
            return
        steps, self._steps = self._steps, None
        await steps.aclose()  # type: ignore[attr-defined]
        self._record()

    def _account(self, step: GenerationStep) -> None:
        self.prompt_tokens = step.prompt_tokens
        for delta in step.choices:
            choice = self.choices.setdefault(delta.index, ChoiceResult())
            choice.text += delta.text
            choice.tokens += delta.new_tokens
            if delta.new_tokens and self._first_token_at is None:
                self._first_token_at = time.monotonic()
            if delta.finish_reason is not None:
                choice.finish_reason = delta.finish_reason
            if delta.spec is not None:
                self.spec = delta.spec if self.spec is None else self.spec + delta.spec

    def _record(self) -> None:
        metrics = self._metrics
        if metrics is None:
            return
        route = self.decision.route
        outcome: Outcome = self._outcome or ("ok" if self.finished else "aborted")
        metrics.in_flight.labels(engine=route).dec()
        metrics.requests.labels(engine=route, endpoint=self.endpoint, outcome=outcome).inc()
        if outcome == "error":
            return
        now = time.monotonic()
        metrics.latency.labels(engine=route, endpoint=self.endpoint).observe(now - self._started)
        if self._first_token_at is not None:
            metrics.time_to_first_token.labels(engine=route, endpoint=self.endpoint).observe(
                self._first_token_at - self._started
            )
        metrics.prompt_tokens.labels(engine=route).inc(self.prompt_tokens)
        metrics.completion_tokens.labels(engine=route).inc(self.completion_tokens)
        if self.spec is not None:
            metrics.record_spec(route, self.spec)
