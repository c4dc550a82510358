"""POST /tokenize, POST /detokenize, GET /tokenizer_info: vLLM's helpers, which evaluation
harnesses (lm-eval's remote tokenizer) use to count and cut prompts without the model's files."""

from __future__ import annotations

from fastapi import APIRouter

from app.api.chat import template_message
from app.api.deps import GatewayDep
from app.api.openapi_docs import ERRORS
from app.engine.tokenizing import TokenizerService
from app.errors import NotFoundError
from app.gateway import Gateway
from app.schemas.tokenize import (
    DetokenizeRequest,
    DetokenizeResponse,
    TokenizeRequest,
    TokenizeResponse,
    TokenizerInfo,
)

router = APIRouter()


def tokenizer_of(gateway: Gateway, model: str | None) -> TokenizerService:
    if model is not None:
        gateway.model.check(model)
    if gateway.tokenizing is None:
        raise NotFoundError("this server's engines have no tokenizer to answer with")
    return gateway.tokenizing


@router.post(
    "/tokenize", response_model=TokenizeResponse, summary="Tokenize a prompt", responses=ERRORS
)
async def tokenize(body: TokenizeRequest, gateway: GatewayDep) -> TokenizeResponse:
    """A prompt's token ids, or chat messages' through the chat template (vLLM's shape)."""
    service = tokenizer_of(gateway, body.model)
    messages = None
    if body.messages is not None:
        messages = [template_message(message) for message in body.messages]
    return await service.tokenize(body, messages)


@router.post(
    "/detokenize",
    response_model=DetokenizeResponse,
    summary="Detokenize token ids",
    responses=ERRORS,
)
async def detokenize(body: DetokenizeRequest, gateway: GatewayDep) -> DetokenizeResponse:
    """The text of token ids (vLLM's shape)."""
    return await tokenizer_of(gateway, body.model).detokenize(body)


@router.get(
    "/tokenizer_info",
    response_model=TokenizerInfo,
    summary="Describe the tokenizer",
    responses=ERRORS,
)
async def tokenizer_info(gateway: GatewayDep) -> TokenizerInfo:
    """The tokenizer's configuration, as its tokenizer_config.json holds it (vLLM's shape)."""
    return await tokenizer_of(gateway, None).tokenizer_info()
