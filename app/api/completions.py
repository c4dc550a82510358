"""POST /v1/completions."""

from __future__ import annotations

import time
import uuid

from fastapi import APIRouter, Request
from fastapi.responses import Response

from app.api.respond import respond
from app.api.sampling import sampling_options
from app.deps import GatewayDep, SpeculativeHeader
from app.errors import InvalidRequestError
from app.formatting import finished_choices, route_headers, route_info, usage
from app.generation import Run
from app.routing.features import extract_features
from app.schemas.completions import Completion, CompletionChoice, CompletionRequest
from app.streaming import completion_chunk_makers

router = APIRouter()


@router.post("/v1/completions", response_model=Completion)
async def create_completion(
    body: CompletionRequest,
    request: Request,
    gateway: GatewayDep,
    x_speculative: SpeculativeHeader = None,
) -> Response:
    """Create a text completion, streamed over SSE when `stream` is true."""
    gateway.check_model(body.model)
    try:
        prompt = body.single_prompt()
    except ValueError as exc:
        raise InvalidRequestError(str(exc), param="prompt") from exc
    options = sampling_options(body, body.max_tokens, None)
    features = extract_features(
        prompt if isinstance(prompt, str) else "",
        temperature=options.temperature,
        top_p=options.top_p,
        max_tokens=options.max_tokens,
    )
    decision = gateway.decide(x_speculative, features)
    completion_id = f"cmpl-{uuid.uuid4().hex}"
    created = int(time.time())
    run = await gateway.start(decision, completion_id, prompt, options, "completions")

    def build_response(run: Run) -> Completion:
        return Completion(
            id=completion_id,
            created=created,
            model=gateway.model_id,
            choices=[
                CompletionChoice(index=index, text=text, finish_reason=finish)
                for index, text, finish in finished_choices(run)
            ],
            usage=usage(run),
            specgate=route_info(run),
        )

    return await respond(
        run,
        request,
        stream=body.stream,
        stream_options=body.stream_options,
        chunk_makers=completion_chunk_makers(completion_id, created, gateway.model_id),
        build_response=build_response,
        headers=route_headers(decision, completion_id),
    )
