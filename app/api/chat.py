"""POST /v1/chat/completions."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from app.api.openapi_docs import GENERATION_RESPONSES
from app.api.respond import respond
from app.api.sampling import sampling_options
from app.deps import GatewayDep, MoveAfterHeader, SpeculativeHeader
from app.engine.types import ChatMessage
from app.errors import InvalidRequestError
from app.request_spec import RequestSpec
from app.schemas.chat import ChatCompletion, ChatCompletionRequest, ChatMessageIn, FunctionName
from app.tool_calls import Function, ToolCallMode, auto_call_parser, tool_call_mode
from app.wire.chat import ChatShape

router = APIRouter()

# Roles chat templates know: "developer" is OpenAI's newer "system", and the legacy
# "function" role answers a call as "tool" does.
TEMPLATE_ROLES = {"developer": "system", "function": "tool"}


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
    mode = chat_tool_mode(body, parser=gateway.call_parsers is not None)
    spec = chat_spec(body, mode, x_speculative, x_specgate_move_after)
    return await respond(
        await gateway.open(spec),
        request,
        ChatShape(
            gateway.model_id,
            mode,
            legacy_functions=body.legacy_functions,
            call_parser=auto_call_parser(
                gateway.call_parsers, body.effective_tool_choice(), spec.tools
            ),
        ),
        stream=body.stream,
        stream_options=body.stream_options,
        shutdown_grace_seconds=gateway.shutdown_grace_seconds,
    )


def chat_spec(
    body: ChatCompletionRequest,
    mode: ToolCallMode | None,
    route_header: str | None,
    move_after: int | None,
) -> RequestSpec:
    messages = [template_message(message) for message in body.messages]
    json_schema = body.json_schema()
    if mode is not None:
        if json_schema is not None:
            raise InvalidRequestError(
                "response_format cannot be combined with a required or named tool call",
                param="response_format",
            )
        json_schema = mode.schema()
    options = sampling_options(body, body.token_limit(), json_schema, body.logprob_count())
    tools = tuple(
        {"type": "function", "function": function.model_dump(exclude_none=True)}
        for function in body.tool_definitions()
    )
    return RequestSpec(
        endpoint="chat",
        model=body.model,
        prompts=[messages],
        options=options,
        routing_text="\n".join(message["content"] or "" for message in messages),
        route_header=route_header,
        move_after=move_after,
        max_tokens_field="max_completion_tokens" if body.max_completion_tokens else "max_tokens",
        tools=tools or None,
    )


def chat_tool_mode(body: ChatCompletionRequest, parser: bool = False) -> ToolCallMode | None:
    """The constraint for a required or named tool call; None for free text."""
    choice = body.effective_tool_choice()
    functions = tuple(
        Function.declared(tool.name, tool.parameters) for tool in body.tool_definitions()
    )
    return tool_call_mode(
        None if isinstance(choice, FunctionName) else choice,
        functions,
        named=choice.name if isinstance(choice, FunctionName) else None,
        # The legacy API makes one call at a time.
        parallel=body.parallel_tool_calls is not False and not body.legacy_functions,
        field="function_call" if body.legacy_functions else "tool_choice",
        parser=parser,
    )


def template_message(message: ChatMessageIn) -> ChatMessage:
    role = TEMPLATE_ROLES.get(message.role, message.role)
    rendered: ChatMessage = {"role": role, "content": message.text()}
    calls: list[dict[str, Any]] = [call.model_dump() for call in message.tool_calls or ()]
    if message.function_call is not None:
        calls.append(
            {"id": "call_0", "type": "function", "function": message.function_call.model_dump()}
        )
    if calls:
        rendered["tool_calls"] = calls
    if message.tool_call_id is not None:
        rendered["tool_call_id"] = message.tool_call_id
    if message.name is not None:
        rendered["name"] = message.name
    return rendered
