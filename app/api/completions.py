"""POST /v1/completions."""

from __future__ import annotations

from dataclasses import replace

from fastapi import APIRouter, Request
from fastapi.responses import Response

from app.api.deps import (
    ClientChoiceDep,
    DispatcherDep,
    ModelDep,
    MoveAfterHeader,
    ShutdownGraceDep,
    TenancyDep,
)
from app.api.openapi_docs import GENERATION_RESPONSES
from app.api.respond import respond
from app.api.sampling import sampling_options
from app.encoders.completions import CompletionsEncoder
from app.request_spec import RequestSpec
from app.routing.policy import ClientChoice
from app.schemas.completions import Completion, CompletionRequest

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
    dispatcher: DispatcherDep,
    model: ModelDep,
    grace: ShutdownGraceDep,
    routing: ClientChoiceDep,
    tenancy: TenancyDep,
    x_specgate_move_after: MoveAfterHeader = None,
) -> Response:
    """Create a text completion, streamed over SSE when `stream` is true."""
    spec = completion_spec(body, routing, x_specgate_move_after)
    run = await dispatcher.open(
        replace(spec, tenant=tenancy.tenant(body.cache_salt), access=tenancy.access)
    )
    return await respond(
        run,
        request,
        CompletionsEncoder(model.id, with_logprobs=body.logprobs is not None),
        stream=body.stream,
        stream_options=body.stream_options,
        shutdown_grace_seconds=grace,
    )


def completion_spec(
    body: CompletionRequest, routing: ClientChoice, move_after: int | None
) -> RequestSpec:
    prompts = body.prompts()
    options = sampling_options(
        body, body.max_tokens, body.json_schema(), body.logprobs, bool(body.echo)
    )
    return RequestSpec(
        endpoint="completions",
        model=body.model,
        prompts=list(prompts),
        options=options,
        # Token-id prompts have no text to classify; they route on sampling alone.
        routing_text="\n".join(prompt for prompt in prompts if isinstance(prompt, str)),
        choice=routing,
        move_after=move_after,
        prediction=body.prediction.text() if body.prediction else None,
    )
