"""/tokenize, /detokenize and /tokenizer_info: vLLM's helper endpoints, in vLLM's shapes."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, model_validator

from app.schemas.chat import ChatMessageIn, Tool
from app.schemas.common import FieldError


class TokenizeRequest(BaseModel):
    """A prompt, or chat messages through the chat template (vLLM's two forms in one)."""

    model: str | None = None
    prompt: str | None = None
    messages: list[ChatMessageIn] | None = None
    # vLLM's defaults: special tokens for a prompt; none for messages, whose template wrote them.
    add_special_tokens: bool | None = None
    add_generation_prompt: bool | None = Field(
        None, description="Messages: end on the assistant's turn (default: unless continuing)."
    )
    continue_final_message: bool = Field(
        False, description="Messages: leave the last message open, for the model to continue."
    )
    return_token_strs: bool = Field(False, description="Also return each token's string.")
    tools: list[Tool] | None = None

    @model_validator(mode="after")
    def _one_form(self) -> TokenizeRequest:
        if (self.prompt is None) == (self.messages is None):
            raise FieldError("prompt", "send either prompt or messages")
        if self.continue_final_message and self.add_generation_prompt:
            raise FieldError(
                "continue_final_message", "cannot be combined with add_generation_prompt"
            )
        return self


class TokenizeResponse(BaseModel):
    count: int
    max_model_len: int
    tokens: list[int]
    token_strs: list[str] | None = None


class DetokenizeRequest(BaseModel):
    model: str | None = None
    tokens: list[Annotated[int, Field(ge=0)]]


class DetokenizeResponse(BaseModel):
    prompt: str


class TokenizerInfo(BaseModel):
    """The tokenizer's configuration, as its tokenizer_config.json holds it."""

    model_config = ConfigDict(extra="allow")
    tokenizer_class: str
