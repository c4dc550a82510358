"""The served model's tokenizer, for /tokenize, /detokenize and /tokenizer_info.

An embedded engine answers from its own tokenizer (`LocalTokenizer`); a remote route forwards
to one of its upstreams, vLLM servers that answer the same paths (`RemoteTokenizer`).
"""

from __future__ import annotations

from typing import Any, Protocol, TypeVar

from pydantic import BaseModel, ValidationError

from app.errors import EngineFailureError, InvalidRequestError
from app.schemas.tokenize import (
    DetokenizeRequest,
    DetokenizeResponse,
    TokenizeRequest,
    TokenizeResponse,
    TokenizerInfo,
)
from app.vocabulary import ChatMessage

Answer = TypeVar("Answer", bound=BaseModel)


class TokenizerService(Protocol):
    async def tokenize(
        self, request: TokenizeRequest, messages: list[ChatMessage] | None
    ) -> TokenizeResponse:
        """`messages`: the request's messages as the chat template takes them."""
        ...

    async def detokenize(self, request: DetokenizeRequest) -> DetokenizeResponse: ...

    async def tokenizer_info(self) -> TokenizerInfo: ...


class Forwarder(Protocol):
    async def forward(self, method: str, path: str, body: dict[str, Any] | None) -> Any:
        """One upstream's JSON answer on `path`; its errors raised as the gateway's."""
        ...


class LocalTokenizer:
    """A Hugging Face tokenizer (an embedded engine's)."""

    def __init__(self, tokenizer: Any, max_model_len: int) -> None:
        self._tokenizer = tokenizer
        self._max_model_len = max_model_len

    async def tokenize(
        self, request: TokenizeRequest, messages: list[ChatMessage] | None
    ) -> TokenizeResponse:
        if messages is None:
            special = request.add_special_tokens is not False
            tokens = list(self._tokenizer.encode(request.prompt or "", add_special_tokens=special))
        else:
            tokens = self._chat_tokens(request, messages)
        strings = None
        if request.return_token_strs:
            strings = [str(token) for token in self._tokenizer.convert_ids_to_tokens(tokens)]
        return TokenizeResponse(
            count=len(tokens), max_model_len=self._max_model_len, tokens=tokens, token_strs=strings
        )

    def _chat_tokens(self, request: TokenizeRequest, messages: list[ChatMessage]) -> list[int]:
        tools = [tool.model_dump(exclude_none=True) for tool in request.tools or ()]
        generation = request.add_generation_prompt
        try:
            text = self._tokenizer.apply_chat_template(
                list(messages),
                tools=tools or None,
                add_generation_prompt=not request.continue_final_message
                if generation is None
                else generation,
                continue_final_message=request.continue_final_message,
                tokenize=False,
            )
        except Exception as exc:  # the template is model code; any failure is the request's
            raise InvalidRequestError(
                f"cannot apply the chat template: {exc}", param="messages"
            ) from exc
        # The template wrote the special tokens it wants, unless asked for more.
        special = request.add_special_tokens is True
        return list(self._tokenizer.encode(str(text), add_special_tokens=special))

    async def detokenize(self, request: DetokenizeRequest) -> DetokenizeResponse:
        vocab = len(self._tokenizer)
        if any(token >= vocab for token in request.tokens):
            raise InvalidRequestError(f"token ids must lie in [0, {vocab})", param="tokens")
        return DetokenizeResponse(prompt=str(self._tokenizer.decode(request.tokens)))

    async def tokenizer_info(self) -> TokenizerInfo:
        config = dict(getattr(self._tokenizer, "init_kwargs", None) or {})
        for local_file in ("vocab_file", "merges_file", "tokenizer_file", "name_or_path"):
            config.pop(local_file, None)  # paths on this machine, of no use to a client
        info = {key: _plain(value) for key, value in config.items()}
        template = getattr(self._tokenizer, "chat_template", None)
        if template:
            info["chat_template"] = template
        info["tokenizer_class"] = type(self._tokenizer).__name__
        return TokenizerInfo.model_validate(info)


def _plain(value: Any) -> Any:
    """A config value as JSON holds it (added tokens by their text)."""
    if hasattr(value, "content"):
        return value.content
    if isinstance(value, dict):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)


class RemoteTokenizer:
    """A remote route's upstreams answer, as vLLM's server does on the same paths."""

    def __init__(self, upstreams: Forwarder) -> None:
        self._upstreams = upstreams

    async def tokenize(
        self, request: TokenizeRequest, messages: list[ChatMessage] | None
    ) -> TokenizeResponse:
        body = request.model_dump(exclude_none=True, exclude={"model"})
        return await self._answer(TokenizeResponse, "POST", "/tokenize", body)

    async def detokenize(self, request: DetokenizeRequest) -> DetokenizeResponse:
        body = {"tokens": request.tokens}
        return await self._answer(DetokenizeResponse, "POST", "/detokenize", body)

    async def tokenizer_info(self) -> TokenizerInfo:
        return await self._answer(TokenizerInfo, "GET", "/tokenizer_info", None)

    async def _answer(
        self, shape: type[Answer], method: str, path: str, body: dict[str, Any] | None
    ) -> Answer:
        answer = await self._upstreams.forward(method, path, body)
        try:
            return shape.model_validate(answer)
        except ValidationError as exc:
            # The upstream's fault, not the client's: said as such, never as a bare 500.
            raise EngineFailureError(
                f"the upstream's {path} answer is not vLLM's shape: {exc.errors()[0]['msg']}"
            ) from exc
