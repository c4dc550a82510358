"""/v1/completions request and response models."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import BaseModel, Field, model_validator

from app.schemas.common import (
    MAX_LOGPROBS,
    FieldError,
    RequestBase,
    RequestMetrics,
    RouteInfo,
    Text,
    Usage,
    is_none,
)

# Each prompt runs as its own engine request; how many a request may hold is the server's
# setting (the gateway checks it against what admission can hold).
Prompt = Text | list[Text] | list[int] | list[list[int]]


class CompletionRequest(RequestBase):
    unsupported_fields: ClassVar[tuple[str, ...]] = ("suffix",)

    prompt: Prompt
    # OpenAI's legacy completions default to 16 tokens.
    max_tokens: int | None = Field(16, ge=1, description="Upper bound on generated tokens.")
    best_of: int | None = Field(None, ge=1)
    logprobs: int | None = Field(
        None, ge=0, le=MAX_LOGPROBS, description="Logprobs of the sampled and k best tokens."
    )
    echo: bool | None = Field(None, description="Return the prompt before the completion.")

    @model_validator(mode="after")
    def _check_prompts(self) -> CompletionRequest:
        if self.best_of is not None and self.best_of != self.n:
            raise FieldError("best_of", "other than n is not supported")
        prompts = self.prompts()
        if not prompts or any(not prompt for prompt in prompts):
            raise FieldError("prompt", "must not be empty")
        if self.prediction is not None and len(prompts) > 1:
            raise FieldError(
                "prediction", f"predicts one answer; this request has {len(prompts)} prompts"
            )
        return self

    def prompts(self) -> list[str | list[int]]:
        """The prompts, each a string or a list of token ids."""
        prompt = self.prompt
        if isinstance(prompt, str):
            return [prompt]
        if prompt and all(isinstance(item, int) for item in prompt):
            return [prompt]  # type: ignore[list-item]  # one prompt of token ids
        return list(prompt)  # type: ignore[arg-type]


class CompletionLogprobs(BaseModel):
    text_offset: list[int]
    # None only for an echoed prompt's first token, as OpenAI sends it.
    token_logprobs: list[float | None]
    tokens: list[str]
    top_logprobs: list[dict[str, float] | None]


class CompletionChoice(BaseModel):
    index: int
    text: str
    logprobs: CompletionLogprobs | None = None
    finish_reason: Literal["stop", "length"] | None


class Completion(BaseModel):
    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage | None = None
    # Always on a whole response; on a stream's last content chunk and usage chunk only.
    specgate: RouteInfo | None = Field(default=None, exclude_if=is_none)
    # vLLM's extension: on a whole response and a stream's usage chunk, where drafting served.
    metrics: RequestMetrics | None = Field(default=None, exclude_if=is_none)
