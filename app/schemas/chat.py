"""/v1/chat/completions request and response models."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import BaseModel, Field, model_validator

from app.schemas.common import MaxTokensField, RequestBase, RouteInfo, Usage


class TextPart(BaseModel):
    type: Literal["text"]
    text: str


class ChatMessageIn(BaseModel):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None
    name: str | None = None

    def text(self) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content)


class JsonSchemaFormat(BaseModel):
    name: str = "response"
    schema_: dict[str, Any] = Field(default_factory=dict, alias="schema")
    strict: bool | None = None


class ResponseFormat(BaseModel):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None

    @model_validator(mode="after")
    def _schema_when_needed(self) -> ResponseFormat:
        if self.type == "json_schema" and self.json_schema is None:
            raise ValueError("response_format.json_schema is required for type json_schema")
        return self


class ChatCompletionRequest(RequestBase):
    unsupported_fields: ClassVar[tuple[str, ...]] = (
        "tools",
        "tool_choice",
        "functions",
        "function_call",
        "logprobs",
        "top_logprobs",
        "logit_bias",
        "audio",
        "prediction",
    )

    messages: list[ChatMessageIn] = Field(min_length=1)
    max_tokens: int | None = MaxTokensField
    max_completion_tokens: int | None = MaxTokensField
    response_format: ResponseFormat | None = None

    def token_limit(self) -> int | None:
        # max_completion_tokens is the newer name; it wins when both are sent.
        return self.max_completion_tokens or self.max_tokens

    def json_schema(self) -> dict[str, Any] | None:
        """The structured-output constraint: a schema, {} for any JSON object, None for text."""
        if self.response_format is None or self.response_format.type == "text":
            return None
        if self.response_format.json_schema is not None:
            return self.response_format.json_schema.schema_
        return {}


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str | None
    refusal: str | None = None


class ChatChoice(BaseModel):
    index: int
    message: AssistantMessage
    logprobs: None = None
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
    logprobs: None = None
    finish_reason: Literal["stop", "length"] | None = None


class ChatCompletionChunk(BaseModel):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChatChunkChoice]
    usage: Usage | None = None
    specgate: RouteInfo | None = None
