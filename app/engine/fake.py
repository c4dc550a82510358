"""A deterministic stand-in for a vLLM engine, for fast tests of the HTTP layer.

It keeps the adapter's contract: token-by-token deltas, max_tokens and stop handling, n
choices, per-request speculative figures on the speculative route, prompt validation on
the first step, and abort on early close. Its "model" repeats the prompt's words.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from app.engine.types import (
    ChoiceDelta,
    FinishReason,
    GenerationRequest,
    GenerationStep,
    Prompt,
    Route,
    SpecDecodeStats,
)
from app.errors import (
    ContextLengthError,
    EngineFailureError,
    EngineUnavailableError,
    InvalidRequestError,
)

FAIL_MIDSTREAM = "<fail-midstream>"


class FakeEngine:
    def __init__(
        self,
        route: Route,
        max_model_len: int = 256,
        seconds_per_token: float = 0.0,
        per_request_draft_length: bool = False,
    ) -> None:
        self.route: Route = route
        # As an embedded speculative engine: it takes GenerationRequest.draft_length.
        self.per_request_draft_length = per_request_draft_length
        # Every request it was given, in order.
        self.requests: list[GenerationRequest] = []
        self.max_model_len = max_model_len
        self.seconds_per_token = seconds_per_token
        self.active: set[str] = set()
        # Tests set this to False to play a dead engine.
        self.alive = True

    async def generate(self, request: GenerationRequest) -> AsyncIterator[GenerationStep]:
        if not self.alive:
            raise EngineUnavailableError(f"the {self.route} engine has stopped")
        self.requests.append(request)
        words = _prompt_words(request.prompt)
        options = request.options
        limit = options.max_tokens or self.max_model_len - len(words)
        if len(words) + limit > self.max_model_len:
            raise ContextLengthError(
                f"the request needs {len(words) + limit} tokens; the limit is {self.max_model_len}",
                param="max_tokens",
            )
        if options.temperature is not None and options.temperature < 0:
            raise InvalidRequestError("temperature must be non-negative", param="temperature")
        self.active.add(request.request_id)
        try:
            texts = ["" for _ in range(options.n)]
            for position in range(limit):
                if self.seconds_per_token:
                    await asyncio.sleep(self.seconds_per_token)
                if FAIL_MIDSTREAM in words and position == 2:
                    raise EngineFailureError("the fake engine failed mid-stream")
                deltas = []
                for index in range(options.n):
                    piece = f" {words[(position + index) % len(words)]}"
                    texts[index] += piece
                    finish = _finish(texts[index], options.stop, position + 1 == limit)
                    deltas.append(self._delta(index, piece, finish, position + 1))
                yield GenerationStep(prompt_tokens=len(words), choices=deltas)
                if all(delta.finish_reason for delta in deltas):
                    return
        finally:
            # Finished or closed early (an abort), the request leaves the engine.
            self.active.discard(request.request_id)

    def _delta(
        self, index: int, piece: str, finish: FinishReason | None, tokens: int
    ) -> ChoiceDelta:
        spec = None
        if finish is not None and self.route == "speculative":
            # Pretend every other draft token was accepted.
            spec = SpecDecodeStats(drafts=tokens, draft_tokens=2 * tokens, accepted_tokens=tokens)
        return ChoiceDelta(index=index, text=piece, new_tokens=1, finish_reason=finish, spec=spec)

    def unfinished_requests(self) -> int:
        return len(self.active)

    def is_alive(self) -> bool:
        return self.alive

    async def check_health(self) -> None:
        if not self.alive:
            raise EngineUnavailableError(f"the {self.route} engine has stopped")

    async def aclose(self) -> None:
        return None


def _prompt_words(prompt: Prompt) -> list[str]:
    if isinstance(prompt, str):
        text = prompt
    else:
        text = " ".join(f"t{item}" if isinstance(item, int) else item["content"] for item in prompt)
    return text.split() or ["empty"]


def _finish(text: str, stop: tuple[str, ...], at_limit: bool) -> FinishReason | None:
    if any(sequence in text for sequence in stop):
        return "stop"
    return "length" if at_limit else None
