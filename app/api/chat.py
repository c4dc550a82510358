"""POST /v1/chat/completions."""

from __future__ import annotations

import time
import uuid

from fastapi import APIRouter, Request
from fastapi.responses import Response

from app.api.openapi_docs import GENERATION_RESPONSES
from app.api.respond import respond
from app.api.sampling import sampling_options
from app.deps import GatewayDep, MoveAfterHeader, SpeculativeHeader
from app.engine.types import ChatMessage
from app.formatting import finished_choices, route_headers, route_info, usage
from app.generation import Run
from app.logprobs import chat_logprobs
from app.routing.features import extract_features
from app.schemas.chat import AssistantMessage, ChatChoice, ChatCompletion, ChatCompletionRequest
from app.streaming import chat_chunk_makers

router = APIRouter()


@router.post(
    "/v1/chat/completions",
    response_model=ChatCompletion,
    summary="Create a chat completion",
    responses=GENERATION_RESPONSES,
)
async def create_chat_completion(
    body: ChatCompletionRequest,
    request: Request,
    gateway: GatewayDep,
    x_speculative: SpeculativeHeader = None,
    x_specgate_move_after: MoveAfterHeader = None,
) -> Response:
    """Create a chat completion, streamed over SSE when `stream` is true."""
    gateway.check_model(body.model)
    messages: list[ChatMessage] = [
        # "developer" is OpenAI's newer name for "system"; chat templates know only the latter.
        {"role": "system" if m.role == "developer" else m.role, "content": m.text()}
        for m in body.messages
    ]
    json_schema = body.json_schema()
    options = sampling_options(body, body.token_limit(), json_schema, body.logprob_count())
    features = extract_features(
        "\n".join(message["content"] for message in messages),
        wants_json=json_schema is not None,
        temperature=options.temperature,
        top_p=options.top_p,
        max_tokens=options.max_tokens,
    )
    decision = gateway.decide(x_speculative, features, options)
    completion_id = f"chatcmpl-{uuid.uuid4().hex}"
    created = int(time.time())
    run = await gateway.start(
        decision, completion_id, [messages], options, "chat", move_after=x_specgate_move_after
    )

    def build_response(run: Run) -> ChatCompletion:
        return ChatCompletion(
            id=completion_id,
            created=created,
            model=gateway.model_id,
            choices=[
                ChatChoice(
                    index=index,
                    message=AssistantMessage(content=choice.text),
                    logprobs=chat_logprobs(choice.logprobs),
                    finish_reason=finish,
                )
                for index, choice, finish in finished_choices(run)
            ],
            usage=usage(run),
            specgate=route_info(run),
        )

    return await respond(
        run,
        request,
        stream=body.stream,
        stream_options=body.stream_options,
        chunk_makers=chat_chunk_makers(completion_id, created, gateway.model_id),
        build_response=build_response,
        headers=route_headers(decision, completion_id),
        shutdown_grace_seconds=gateway.shutdown_grace_seconds,
    )
