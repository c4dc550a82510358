"""/v1/completions request and response models."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import BaseModel, Field, model_validator

from app.schemas.common import RequestBase, RouteInfo, Usage

Prompt = str | list[str] | list[int] | list[list[int]]


class CompletionRequest(RequestBase):
    unsupported_fields: ClassVar[tuple[str, ...]] = ("logprobs", "echo", "suffix", "logit_bias")

    prompt: Prompt
    # OpenAI's legacy completions default to 16 tokens.
    max_tokens: int | None = Field(16, ge=1, description="Upper bound on generated tokens.")
    best_of: int | None = Field(None, ge=1)

    @model_validator(mode="after")
    def _one_prompt(self) -> CompletionRequest:
        if self.best_of is not None and self.best_of != self.n:
            raise ValueError("best_of other than n is not supported")
        if isinstance(self.prompt, list) and (
            not self.prompt or isinstance(self.prompt[0], (str, list))
        ):
            if len(self.prompt) != 1:
                raise ValueError("prompt must be one string or one list of token ids")
        return self

    def single_prompt(self) -> str | list[int]:
        prompt = self.prompt
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], (str, list)):
            return prompt[0]
        if isinstance(prompt, str) and not prompt:
            raise ValueError("prompt must not be empty")
        return prompt  # type: ignore[return-value]


class CompletionChoice(BaseModel):
    index: int
    text: str
    logprobs: None = None
    finish_reason: Literal["stop", "length"] | None


class Completion(BaseModel):
    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage | None = None
    specgate: RouteInfo | None = None
