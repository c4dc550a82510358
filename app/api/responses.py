"""POST /v1/responses and GET /v1/responses/{id}: OpenAI's Responses API, over chat turns."""

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
    ResponsesDep,
    ShutdownGraceDep,
    TenancyDep,
)
from app.api.openapi_docs import ERRORS, GENERATION_RESPONSES
from app.api.respond import respond
from app.encoders.responses import ResponsesEncoder
from app.engine.generation import SamplingOptions
from app.errors import NotFoundError
from app.request_spec import RequestSpec
from app.response_store import ResponseStore, StoredResponse
from app.routing.policy import ClientChoice
from app.schemas.responses import (
    FunctionCallItem,
    FunctionCallOutputItem,
    InputMessage,
    ResponseObject,
    ResponseRequest,
    ToolChoiceFunction,
)
from app.tools.auto_tools import AutoTurn, auto_turn, constrained_schema
from app.tools.tool_calls import Function, ToolCallMode, tool_call_mode
from app.vocabulary import ChatMessage

router = APIRouter()


@router.post(
    "/v1/responses",
    response_model=ResponseObject,
    summary="Create a model response",
    responses=GENERATION_RESPONSES,
)
async def create_response(
    body: ResponseRequest,
    request: Request,
    dispatcher: DispatcherDep,
    model: ModelDep,
    auto_tools: AutoToolsDep,
    responses: ResponsesDep,
    grace: ShutdownGraceDep,
    routing: ClientChoiceDep,
    tenancy: TenancyDep,
    x_specgate_move_after: MoveAfterHeader = None,
) -> Response:
    """Create a response, streamed as typed SSE events when `stream` is true."""
    history = previous_turns(responses, body.previous_response_id)
    turns = [*history, *input_turns(body)]
    mode = responses_tool_mode(body, auto_served=auto_tools is not None)
    functions, tools = response_functions(body), response_tools(body)
    parallel = body.parallel_tool_calls is not False
    choice = responses_choice(body)
    turn = auto_turn(auto_tools, choice, turns, functions, tools, parallel)
    spec = response_spec(body, turns, mode, turn, routing, x_specgate_move_after)
    spec = replace(spec, tenant=tenancy.tenant(body.cache_salt), access=tenancy.access)
    run = await dispatcher.open(spec)
    call_parser = turn.parser if turn is not None else None

    def store(response: ResponseObject) -> None:
        if body.store:
            conversation = (*turns, *output_turns(response))
            responses.put(StoredResponse(response, conversation))

    return await respond(
        run,
        request,
        ResponsesEncoder(body, model.id, mode, on_done=store, call_parser=call_parser),
        stream=body.stream,
        stream_options=None,
        shutdown_grace_seconds=grace,
    )


@router.get(
    "/v1/responses/{response_id}",
    response_model=ResponseObject,
    summary="Retrieve a stored response",
    responses=ERRORS,
)
async def retrieve_response(response_id: str, responses: ResponsesDep) -> ResponseObject:
    """A response created with `store` (the default), while the store still holds it."""
    return stored(responses, response_id).response


def stored(responses: ResponseStore, response_id: str) -> StoredResponse:
    found = responses.get(response_id)
    if found is None:
        raise NotFoundError(
            f"No response with id '{response_id}' is stored here (unknown, not stored, or "
            "dropped from the in-memory store)",
            param="previous_response_id",
        )
    return found


def previous_turns(responses: ResponseStore, response_id: str | None) -> list[ChatMessage]:
    # The earlier response's input and output; its instructions are not carried over (as
    # OpenAI's), so they were never stored with the turns.
    return [] if response_id is None else list(stored(responses, response_id).conversation)


def input_turns(body: ResponseRequest) -> list[ChatMessage]:
    """The request's input as chat turns: instructions first, calls and outputs as tool turns."""
    turns: list[ChatMessage] = []
    if body.instructions:
        turns.append({"role": "system", "content": body.instructions})
    items = body.input
    if isinstance(items, str):
        items = [InputMessage(role="user", content=items)]
    for item in items:
        if isinstance(item, InputMessage):
            role = "system" if item.role == "developer" else item.role
            turns.append({"role": role, "content": item.text()})
        elif isinstance(item, FunctionCallItem):
            call = _call(item)
            previous = turns[-1] if turns else None
            if previous is not None and "tool_calls" in previous:
                previous["tool_calls"].append(call)  # parallel calls: one assistant turn
            else:
                turns.append({"role": "assistant", "content": "", "tool_calls": [call]})
        elif isinstance(item, FunctionCallOutputItem):
            turns.append({"role": "tool", "tool_call_id": item.call_id, "content": item.output})
    return turns


def _call(item: FunctionCallItem) -> dict[str, Any]:
    function = {"name": item.name, "arguments": item.arguments}
    return {"id": item.call_id, "type": "function", "function": function}


def output_turns(response: ResponseObject) -> list[ChatMessage]:
    calls = [_call(item) for item in response.output if isinstance(item, FunctionCallItem)]
    text = response.output_text
    turn: ChatMessage = {"role": "assistant", "content": text}
    if calls:
        turn["tool_calls"] = calls
    return [turn]


def response_functions(body: ResponseRequest) -> tuple[Function, ...]:
    return tuple(
        Function.declared(tool.name, tool.parameters, tool.description)
        for tool in body.function_tools()
    )


def response_tools(body: ResponseRequest) -> tuple[dict[str, Any], ...]:
    """The function tools in chat's `tools` shape, for the chat template."""
    return tuple(
        {"type": "function", "function": tool.model_dump(exclude_none=True, exclude={"type"})}
        for tool in body.function_tools()
    )


def responses_choice(body: ResponseRequest) -> str | ToolChoiceFunction | None:
    # No tool_choice with tools means "auto", as on chat.
    if body.tool_choice is None and body.function_tools():
        return "auto"
    return body.tool_choice


def responses_tool_mode(body: ResponseRequest, auto_served: bool = False) -> ToolCallMode | None:
    choice = responses_choice(body)
    return tool_call_mode(
        None if isinstance(choice, ToolChoiceFunction) else choice,
        response_functions(body),
        named=choice.name if isinstance(choice, ToolChoiceFunction) else None,
        parallel=body.parallel_tool_calls is not False,
        auto_served=auto_served,
    )


def response_spec(
    body: ResponseRequest,
    turns: list[ChatMessage],
    mode: ToolCallMode | None,
    turn: AutoTurn | None,
    routing: ClientChoice,
    move_after: int | None,
) -> RequestSpec:
    json_schema = constrained_schema(body.json_schema(), mode, turn, "text.format")
    if turn is not None:
        turns = turn.messages
    temperature = body.temperature
    if body.top_p == 0:
        temperature = 0.0  # only the likeliest token: greedy
    options = SamplingOptions(
        max_tokens=body.max_output_tokens,
        temperature=temperature,
        top_p=body.top_p or None,
        seed=body.seed,
        json_schema=json_schema,
    )
    tools = response_tools(body) if turn is None or turn.template_tools else ()
    return RequestSpec.of_turns(
        "responses", body.model, turns, options, routing, move_after, "max_output_tokens", tools
    )
