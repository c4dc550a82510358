"""/v1/responses request, response and stream-event models (OpenAI's Responses API)."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from app.schemas.chat import FUNCTION_NAME
from app.schemas.common import (
    INT64_MAX,
    FieldError,
    RouteInfo,
    SpeculativeUsage,
    Text,
    is_none,
)


class InputText(BaseModel):
    type: Literal["input_text", "output_text"]
    text: Text


class InputMessage(BaseModel):
    type: Literal["message"] = "message"
    role: Literal["user", "assistant", "system", "developer"]
    content: Text | list[InputText]
    id: str | None = None
    status: str | None = None

    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content)


class FunctionCallItem(BaseModel):
    """A call the model made earlier, sent back as input (or produced as output)."""

    type: Literal["function_call"] = "function_call"
    id: str | None = Field(default=None, exclude_if=is_none)
    call_id: str
    name: str
    arguments: str
    status: Literal["in_progress", "completed", "incomplete"] | None = Field(
        default=None, exclude_if=is_none
    )


class FunctionCallOutputItem(BaseModel):
    type: Literal["function_call_output"]
    call_id: str
    output: Text
    id: str | None = None


InputItem = InputMessage | FunctionCallItem | FunctionCallOutputItem


class FunctionToolIn(BaseModel):
    type: Literal["function"]
    name: str = Field(pattern=FUNCTION_NAME)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class ToolChoiceFunction(BaseModel):
    type: Literal["function"]
    name: str


class TextFormat(BaseModel):
    type: Literal["text", "json_object", "json_schema"]
    # For json_schema: the schema's name, the schema and strict sit beside the type.
    name: str | None = Field(default=None, exclude_if=is_none)
    schema_: dict[str, Any] | None = Field(default=None, alias="schema", exclude_if=is_none)
    strict: bool | None = Field(default=None, exclude_if=is_none)

    model_config = ConfigDict(populate_by_name=True, serialize_by_alias=True)


class TextConfig(BaseModel):
    format: TextFormat = Field(default_factory=lambda: TextFormat(type="text"))


class ResponseRequest(BaseModel):
    """POST /v1/responses. Unknown fields are ignored; known ones this server cannot honour
    are refused by name."""

    model_config = ConfigDict(extra="allow")
    unsupported_fields: ClassVar[tuple[str, ...]] = (
        "reasoning",
        "background",
        "conversation",
        "prompt",
        "include",
        "max_tool_calls",
    )

    model: Text
    input: Text | list[InputItem] = Field(min_length=1)
    instructions: Text | None = None
    max_output_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, ge=0, le=1)
    tools: list[dict[str, Any]] | None = Field(None, max_length=128)
    tool_choice: Literal["none", "auto", "required"] | ToolChoiceFunction | None = None
    parallel_tool_calls: bool | None = None
    text: TextConfig | None = None
    stream: bool = False
    store: bool = True
    previous_response_id: str | None = None
    metadata: dict[str, str] | None = Field(None, max_length=16)
    user: str | None = None
    seed: int | None = Field(None, ge=-(2**63), le=INT64_MAX)
    cache_salt: str | None = Field(
        None,
        max_length=256,
        description="vLLM extension: whose work this request may share. Suffix drafting "
        "draws only on earlier answers with the same salt (by default the same API key).",
    )

    @model_validator(mode="after")
    def _check(self) -> ResponseRequest:
        for name in self.unsupported_fields:
            if (self.model_extra or {}).get(name) not in (None, False, [], {}):
                raise FieldError(name, "is not supported by this server")
        for index, tool in enumerate(self.tools or ()):
            if tool.get("type") != "function":
                raise FieldError(
                    f"tools.{index}.type",
                    f"'{tool.get('type')}' is not supported: this server runs function tools only",
                )
        names = [tool.name for tool in self.function_tools()]
        if len(set(names)) != len(names):
            raise FieldError("tools", "names must be unique")
        choice = self.tool_choice
        if choice not in (None, "none", "auto") and not names:
            raise FieldError("tool_choice", "needs tools")
        if isinstance(choice, ToolChoiceFunction) and choice.name not in names:
            raise FieldError("tool_choice", "names no function in tools")
        fmt = self.text.format if self.text else None
        if fmt is not None and fmt.type == "json_schema" and fmt.schema_ is None:
            raise FieldError("text.format.schema", "is required for type json_schema")
        return self

    def function_tools(self) -> list[FunctionToolIn]:
        return [FunctionToolIn.model_validate(tool) for tool in self.tools or ()]

    def json_schema(self) -> dict[str, Any] | None:
        fmt = self.text.format if self.text else None
        if fmt is None or fmt.type == "text":
            return None
        return fmt.schema_ if fmt.type == "json_schema" and fmt.schema_ is not None else {}


class OutputText(BaseModel):
    type: Literal["output_text"] = "output_text"
    text: str
    annotations: list[Any] = Field(default_factory=list)
    logprobs: list[Any] = Field(default_factory=list)


class OutputMessage(BaseModel):
    type: Literal["message"] = "message"
    id: str
    status: Literal["in_progress", "completed", "incomplete"]
    role: Literal["assistant"] = "assistant"
    content: list[OutputText]


OutputItem = OutputMessage | FunctionCallItem


class InputTokensDetails(BaseModel):
    cached_tokens: int = 0
    cache_write_tokens: int = 0


class OutputTokensDetails(BaseModel):
    reasoning_tokens: int = 0


class ResponseUsage(BaseModel):
    input_tokens: int
    input_tokens_details: InputTokensDetails = Field(default_factory=InputTokensDetails)
    output_tokens: int
    output_tokens_details: OutputTokensDetails = Field(default_factory=OutputTokensDetails)
    total_tokens: int
    speculative_decoding: SpeculativeUsage | None = Field(
        default=None,
        description="specgate extension: present when the speculative engine served.",
        exclude_if=is_none,
    )


class IncompleteDetails(BaseModel):
    reason: Literal["max_output_tokens", "content_filter"]


class ResponseErrorBody(BaseModel):
    code: str
    message: str


class ResponseObject(BaseModel):
    id: str
    object: Literal["response"] = "response"
    created_at: int
    status: Literal["completed", "failed", "in_progress", "incomplete"]
    error: ResponseErrorBody | None = None
    incomplete_details: IncompleteDetails | None = None
    instructions: str | None
    max_output_tokens: int | None
    model: str
    output: list[OutputItem]
    parallel_tool_calls: bool
    previous_response_id: str | None
    temperature: float | None
    top_p: float | None
    tool_choice: Any
    tools: list[dict[str, Any]]
    text: TextConfig
    truncation: Literal["disabled"] = "disabled"
    usage: ResponseUsage | None = Field(default=None, exclude_if=is_none)
    metadata: dict[str, str] | None
    user: str | None = Field(default=None, exclude_if=is_none)
    store: bool
    specgate: RouteInfo | None = Field(default=None, exclude_if=is_none)

    @property
    def output_text(self) -> str:
        return "".join(
            part.text
            for item in self.output
            if isinstance(item, OutputMessage)
            for part in item.content
        )
