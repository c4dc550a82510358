"""POST /v1/chat/completions."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from app.api.deps import (
    AutoToolsDep,
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
from app.encoders.chat import ChatEncoder
from app.request_spec import RequestSpec
from app.routing.policy import ClientChoice
from app.schemas.chat import ChatCompletion, ChatCompletionRequest, ChatMessageIn, FunctionName
from app.tools.auto_tools import AutoTurn, auto_turn, constrained_schema
from app.tools.tool_calls import Function, ToolCallMode, tool_call_mode
from app.vocabulary import ChatMessage

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
    dispatcher: DispatcherDep,
    model: ModelDep,
    auto_tools: AutoToolsDep,
    grace: ShutdownGraceDep,
    routing: ClientChoiceDep,
    tenancy: TenancyDep,
    x_specgate_move_after: MoveAfterHeader = None,
) -> Response:
    """Create a chat completion, streamed over SSE when `stream` is true."""
    mode = chat_tool_mode(body, auto_served=auto_tools is not None)
    messages = [template_message(message) for message in body.messages]
    choice = body.effective_tool_choice()
    functions, tools = chat_functions(body), chat_tools(body)
    turn = auto_turn(auto_tools, choice, messages, functions, tools, parallel_calls(body))
    spec = chat_spec(body, messages, mode, turn, routing, x_specgate_move_after)
    spec = replace(spec, tenant=tenancy.tenant(body.cache_salt), access=tenancy.access)
    return await respond(
        await dispatcher.open(spec),
        request,
        ChatEncoder(
            model.id,
            mode,
            legacy_functions=body.legacy_functions,
            call_parser=turn.parser if turn is not None else None,
        ),
        stream=body.stream,
        stream_options=body.stream_options,
        shutdown_grace_seconds=grace,
    )


def chat_spec(
    body: ChatCompletionRequest,
    messages: list[ChatMessage],
    mode: ToolCallMode | None,
    turn: AutoTurn | None,
    routing: ClientChoice,
    move_after: int | None,
) -> RequestSpec:
    json_schema = constrained_schema(body.json_schema(), mode, turn, "response_format")
    if turn is not None:
        messages = turn.messages
    options = sampling_options(body, body.token_limit(), json_schema, body.logprob_count())
    tools = chat_tools(body) if turn is None or turn.template_tools else ()
    limit_field = "max_completion_tokens" if body.max_completion_tokens else "max_tokens"
    spec = RequestSpec.of_turns(
        "chat", body.model, messages, options, routing, move_after, limit_field, tools
    )
    return replace(spec, prediction=body.prediction.text() if body.prediction else None)


def chat_tools(body: ChatCompletionRequest) -> tuple[dict[str, Any], ...]:
    """The request's functions as OpenAI's `tools` list, for the chat template."""
    return tuple(
        {"type": "function", "function": function.model_dump(exclude_none=True)}
        for function in body.tool_definitions()
    )


def chat_functions(body: ChatCompletionRequest) -> tuple[Function, ...]:
    return tuple(
        Function.declared(tool.name, tool.parameters, tool.description)
        for tool in body.tool_definitions()
    )


def parallel_calls(body: ChatCompletionRequest) -> bool:
    # The legacy API makes one call at a time.
    return body.parallel_tool_calls is not False and not body.legacy_functions


def chat_tool_mode(body: ChatCompletionRequest, auto_served: bool = False) -> ToolCallMode | None:
    """The constraint for a required or named tool call; None for free text and "auto"."""
    choice = body.effective_tool_choice()
    return tool_call_mode(
        None if isinstance(choice, FunctionName) else choice,
        chat_functions(body),
        named=choice.name if isinstance(choice, FunctionName) else None,
        parallel=parallel_calls(body),
        field="function_call" if body.legacy_functions else "tool_choice",
        auto_served=auto_served,
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
