"""/v1/chat/completions request and response models."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import BaseModel, Field, model_validator

from app.schemas.common import (
    MAX_LOGPROBS,
    FieldError,
    MaxTokensField,
    RequestBase,
    RouteInfo,
    Text,
    Usage,
)

# tool_choice values that ask for no tool call, harmless without tools.
NO_TOOL_CHOICES = (None, "none", "auto")


class TextPart(BaseModel):
    type: Literal["text"]
    text: Text


class ChatMessageIn(BaseModel):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: Text | list[TextPart] | None = None
    name: str | None = None

    def text(self) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content)


class ChatCompletionRequest(RequestBase):
    # The embedded model has no tool-call format, so tools are refused rather than ignored.
    unsupported_fields: ClassVar[tuple[str, ...]] = ("tools", "functions", "audio", "prediction")

    messages: list[ChatMessageIn] = Field(min_length=1)
    max_tokens: int | None = MaxTokensField
    max_completion_tokens: int | None = MaxTokensField
    logprobs: bool | None = Field(None, description="Return each output token's logprob.")
    top_logprobs: int | None = Field(
        None, ge=0, le=MAX_LOGPROBS, description="Alternatives per token; needs logprobs."
    )

    @model_validator(mode="after")
    def _check_chat(self) -> ChatCompletionRequest:
        extra = self.model_extra or {}
        for name in ("tool_choice", "function_call"):
            if extra.get(name) not in NO_TOOL_CHOICES:
                raise FieldError(name, "is not supported: this server serves no tools")
        if self.top_logprobs and not self.logprobs:
            raise FieldError("top_logprobs", "needs logprobs set to true")
        return self

    def logprob_count(self) -> int | None:
        """Alternatives per token for the engine, or None without logprobs."""
        return (self.top_logprobs or 0) if self.logprobs else None

    def token_limit(self) -> int | None:
        # max_completion_tokens is the newer name; it wins when both are sent.
        return self.max_completion_tokens or self.max_tokens


class TopLogprob(BaseModel):
    token: str
    logprob: float
    bytes: list[int] | None


class TokenLogprobOut(TopLogprob):
    top_logprobs: list[TopLogprob]


class ChatLogprobs(BaseModel):
    content: list[TokenLogprobOut] | None
    refusal: list[TokenLogprobOut] | None = None


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str | None
    refusal: str | None = None


class ChatChoice(BaseModel):
    index: int
    message: AssistantMessage
    logprobs: ChatLogprobs | None = None
    finish_reason: Literal["stop", "length"]


class ChatCompletion(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage
    specgate: RouteInfo


class ChatDelta(BaseModel):
    role: Literal["assistant"] | None = None
    content: str | None = None


class ChatChunkChoice(BaseModel):
    index: int
    delta: ChatDelta
    logprobs: ChatLogprobs | None = None
    finish_reason: Literal["stop", "length"] | None = None


class ChatCompletionChunk(BaseModel):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChatChunkChoice]
    usage: Usage | None = None
    specgate: RouteInfo | None = None
