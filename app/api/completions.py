"""POST /v1/completions."""

from __future__ import annotations

import time
import uuid

from fastapi import APIRouter, Request
from fastapi.responses import Response

from app.api.openapi_docs import GENERATION_RESPONSES
from app.api.respond import respond
from app.api.sampling import sampling_options
from app.deps import GatewayDep, MoveAfterHeader, SpeculativeHeader
from app.formatting import completion_choice, finished_choices, route_headers, route_info, usage
from app.generation import Run
from app.routing.features import extract_features
from app.schemas.completions import Completion, CompletionRequest
from app.streaming import completion_chunk_makers

router = APIRouter()


@router.post(
    "/v1/completions",
    response_model=Completion,
    summary="Create a text completion",
    responses=GENERATION_RESPONSES,
)
async def create_completion(
    body: CompletionRequest,
    request: Request,
    gateway: GatewayDep,
    x_speculative: SpeculativeHeader = None,
    x_specgate_move_after: MoveAfterHeader = None,
) -> Response:
    """Create a text completion, streamed over SSE when `stream` is true."""
    gateway.check_model(body.model)
    prompts = body.prompts()
    json_schema = body.json_schema()
    options = sampling_options(body, body.max_tokens, json_schema, body.logprobs, bool(body.echo))
    features = extract_features(
        # Token-id prompts have no text to classify; they route on sampling alone.
        "\n".join(prompt for prompt in prompts if isinstance(prompt, str)),
        wants_json=json_schema is not None,
        temperature=options.temperature,
        top_p=options.top_p,
        max_tokens=options.max_tokens,
    )
    decision = gateway.decide(x_speculative, features, options)
    completion_id = f"cmpl-{uuid.uuid4().hex}"
    created = int(time.time())
    run = await gateway.start(
        decision,
        completion_id,
        list(prompts),
        options,
        "completions",
        move_after=x_specgate_move_after,
    )

    def build_response(run: Run) -> Completion:
        return Completion(
            id=completion_id,
            created=created,
            model=gateway.model_id,
            choices=[
                completion_choice(index, choice, finish, with_logprobs=body.logprobs is not None)
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
        chunk_makers=completion_chunk_makers(
            completion_id, created, gateway.model_id, with_logprobs=body.logprobs is not None
        ),
        build_response=build_response,
        headers=route_headers(decision, completion_id),
        shutdown_grace_seconds=gateway.shutdown_grace_seconds,
    )
