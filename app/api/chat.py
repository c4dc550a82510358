"""POST /v1/chat/completions."""

from __future__ import annotations

import time
import uuid

from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response
from sse_starlette import EventSourceResponse

from app.api.sampling import sampling_options
from app.deps import GatewayDep, SpeculativeHeader
from app.engine.types import ChatMessage
from app.formatting import public_finish, route_headers, route_info, usage
from app.schemas.chat import AssistantMessage, ChatChoice, ChatCompletion, ChatCompletionRequest
from app.schemas.common import dump
from app.streaming import chat_chunk_makers, sse_events

router = APIRouter()


@router.post("/v1/chat/completions", response_model=ChatCompletion)
async def create_chat_completion(
    body: ChatCompletionRequest, gateway: GatewayDep, x_speculative: SpeculativeHeader = None
) -> Response:
    """Create a chat completion, streamed over SSE when `stream` is true."""
    gateway.check_model(body.model)
    messages: list[ChatMessage] = [{"role": m.role, "content": m.text()} for m in body.messages]
    options = sampling_options(body, body.token_limit(), body.json_schema())
    prompt_text = "\n".join(message["content"] for message in messages)
    decision = gateway.decide(
        x_speculative, prompt_text, body.json_schema() is not None, options.temperature
    )
    completion_id = f"chatcmpl-{uuid.uuid4().hex}"
    run = await gateway.start(decision, completion_id, messages, options, "chat")
    headers = route_headers(decision, completion_id)
    created = int(time.time())

    if body.stream:
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        chunk, usage_chunk = chat_chunk_makers(completion_id, created, gateway.model_id)
        return EventSourceResponse(
            sse_events(run, chunk, usage_chunk, include_usage), headers=headers, sep="\n"
        )

    await run.collect()
    completion = ChatCompletion(
        id=completion_id,
        created=created,
        model=gateway.model_id,
        choices=[
            ChatChoice(
                index=index,
                message=AssistantMessage(content=choice.text),
                finish_reason=public_finish(choice.finish_reason) or "stop",
            )
            for index, choice in sorted(run.choices.items())
        ],
        usage=usage(run),
        specgate=route_info(run),
    )
    return JSONResponse(dump(completion), headers=headers)
