"""/v1/chat/completions request and response models."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import BaseModel, Field, model_validator

from app.schemas.common import (
    MAX_LOGPROBS,
    FieldError,
    MaxTokensField,
    RequestBase,
    RequestMetrics,
    RouteInfo,
    Text,
    TextPart,
    Usage,
    is_none,
    joined_text,
)

# OpenAI's rule for function names.
FUNCTION_NAME = r"^[a-zA-Z0-9_-]{1,64}$"


class FunctionDefinition(BaseModel):
    name: str = Field(pattern=FUNCTION_NAME)
    description: str | None = None
    parameters: dict[str, Any] | None = Field(
        None, description="A JSON schema for the arguments; absent: any object."
    )
    strict: bool | None = None


class Tool(BaseModel):
    type: Literal["function"]
    function: FunctionDefinition


class FunctionName(BaseModel):
    name: str


class NamedToolChoice(BaseModel):
    type: Literal["function"]
    function: FunctionName


ToolChoice = Literal["none", "auto", "required"] | NamedToolChoice
# The legacy `function_call`: "none", "auto", or {"name": ...}.
FunctionCallChoice = Literal["none", "auto"] | FunctionName


class FunctionCall(BaseModel):
    name: str
    arguments: str = Field(description="The arguments as a JSON text.")


class ToolCallIn(BaseModel):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessageIn(BaseModel):
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: Text | list[TextPart] | None = None
    name: str | None = None
    # An assistant turn that called tools, and a tool's answer to one of those calls.
    tool_calls: list[ToolCallIn] | None = None
    tool_call_id: str | None = None
    # The legacy single call of an assistant turn.
    function_call: FunctionCall | None = None

    @model_validator(mode="after")
    def _check_roles(self) -> ChatMessageIn:
        if self.role == "tool" and not self.tool_call_id:
            raise FieldError("messages.tool_call_id", "is required in a tool message")
        if (self.tool_calls or self.function_call) and self.role != "assistant":
            raise FieldError("messages.tool_calls", "belong to assistant messages only")
        return self

    def text(self) -> str:
        return joined_text(self.content)


class ChatCompletionRequest(RequestBase):
    unsupported_fields: ClassVar[tuple[str, ...]] = ("audio",)

    messages: list[ChatMessageIn] = Field(min_length=1)
    max_tokens: int | None = MaxTokensField
    max_completion_tokens: int | None = MaxTokensField
    logprobs: bool | None = Field(None, description="Return each output token's logprob.")
    top_logprobs: int | None = Field(
        None, ge=0, le=MAX_LOGPROBS, description="Alternatives per token; needs logprobs."
    )
    tools: list[Tool] | None = Field(None, max_length=128)
    tool_choice: ToolChoice | None = Field(
        None, description="none, auto (the default with tools), required, or a named function."
    )
    parallel_tool_calls: bool | None = Field(
        None, description="Allow several calls in one answer (default true)."
    )
    # The legacy form of tools and tool_choice.
    functions: list[FunctionDefinition] | None = Field(None, max_length=128)
    function_call: FunctionCallChoice | None = None

    @model_validator(mode="after")
    def _check_chat(self) -> ChatCompletionRequest:
        if self.top_logprobs and not self.logprobs:
            raise FieldError("top_logprobs", "needs logprobs set to true")
        if self.functions is not None and self.tools is not None:
            raise FieldError("functions", "cannot be sent with tools; use tools")
        tools, choice = self.tool_definitions(), self.effective_tool_choice()
        names = [tool.name for tool in tools]
        if len(set(names)) != len(names):
            raise FieldError(self._tools_field, "names must be unique")
        if choice not in (None, "none", "auto") and not tools:
            named = choice.name if isinstance(choice, FunctionName) else choice
            raise FieldError(self._choice_field, f"'{named}' needs {self._tools_field}")
        if isinstance(choice, FunctionName) and choice.name not in names:
            raise FieldError(self._choice_field, f"names no function in {self._tools_field}")
        return self

    @property
    def legacy_functions(self) -> bool:
        """The request used `functions` (or `function_call`): calls come back as
        `function_call`."""
        return self.functions is not None or (self.function_call is not None and self.tools is None)

    @property
    def _tools_field(self) -> str:
        return "functions" if self.legacy_functions else "tools"

    @property
    def _choice_field(self) -> str:
        return "function_call" if self.legacy_functions else "tool_choice"

    def tool_definitions(self) -> list[FunctionDefinition]:
        if self.functions is not None:
            return self.functions
        return [tool.function for tool in self.tools or ()]

    def effective_tool_choice(self) -> Literal["none", "auto", "required"] | FunctionName | None:
        """The tool choice, legacy form mapped; None when there are no tools at all."""
        choice: Any = self.function_call if self.legacy_functions else self.tool_choice
        if isinstance(choice, NamedToolChoice):
            choice = choice.function
        if choice is None:
            return "auto" if self.tool_definitions() else None
        return choice  # type: ignore[no-any-return]

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


class ToolCallOut(BaseModel):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str | None
    refusal: str | None = None
    tool_calls: list[ToolCallOut] | None = Field(default=None, exclude_if=is_none)
    # Answers to requests that used the legacy `functions`.
    function_call: FunctionCall | None = Field(default=None, exclude_if=is_none)


ChatFinishReason = Literal["stop", "length", "tool_calls", "function_call"]


class ChatChoice(BaseModel):
    index: int
    message: AssistantMessage
    logprobs: ChatLogprobs | None = None
    finish_reason: ChatFinishReason


class ChatCompletion(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage
    specgate: RouteInfo
    # vLLM's extension: on a whole response and a stream's usage chunk, where drafting served.
    metrics: RequestMetrics | None = Field(default=None, exclude_if=is_none)


class FunctionCallDelta(BaseModel):
    name: str | None = Field(default=None, exclude_if=is_none)
    arguments: str | None = Field(default=None, exclude_if=is_none)


class ToolCallDeltaOut(BaseModel):
    """A piece of a streamed call: index, id, type and name first, then argument fragments."""

    index: int
    id: str | None = Field(default=None, exclude_if=is_none)
    type: Literal["function"] | None = Field(default=None, exclude_if=is_none)
    function: FunctionCallDelta


class ChatDelta(BaseModel):
    # OpenAI leaves out delta fields that did not change (the role after the first).
    role: Literal["assistant"] | None = Field(default=None, exclude_if=is_none)
    content: str | None = Field(default=None, exclude_if=is_none)
    tool_calls: list[ToolCallDeltaOut] | None = Field(default=None, exclude_if=is_none)
    function_call: FunctionCallDelta | None = Field(default=None, exclude_if=is_none)


class ChatChunkChoice(BaseModel):
    index: int
    delta: ChatDelta
    logprobs: ChatLogprobs | None = None
    finish_reason: ChatFinishReason | None = None


class ChatCompletionChunk(BaseModel):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChatChunkChoice]
    usage: Usage | None = None
    # On the last content chunk and the usage chunk only.
    specgate: RouteInfo | None = Field(default=None, exclude_if=is_none)
    # vLLM's extension: on a whole response and a stream's usage chunk, where drafting served.
    metrics: RequestMetrics | None = Field(default=None, exclude_if=is_none)
