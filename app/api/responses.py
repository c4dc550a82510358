"""POST /v1/responses and GET /v1/responses/{id}: OpenAI's Responses API, over chat turns."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from app.api.openapi_docs import ERRORS, GENERATION_RESPONSES
from app.api.respond import respond
from app.deps import GatewayDep, MoveAfterHeader, SpeculativeHeader
from app.engine.types import ChatMessage, SamplingOptions
from app.errors import NotFoundError
from app.gateway import Gateway
from app.request_spec import RequestSpec
from app.response_store import StoredResponse
from app.schemas.responses import (
    FunctionCallItem,
    FunctionCallOutputItem,
    InputMessage,
    ResponseObject,
    ResponseRequest,
    ToolChoiceFunction,
)
from app.tool_calls import Function, ToolCallMode, auto_call_parser, tool_call_mode
from app.wire.responses import ResponsesShape

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
    gateway: GatewayDep,
    x_speculative: SpeculativeHeader = None,
    x_specgate_move_after: MoveAfterHeader = None,
) -> Response:
    """Create a response, streamed as typed SSE events when `stream` is true."""
    history = previous_turns(gateway, body.previous_response_id)
    turns = [*history, *input_turns(body)]
    parsers = gateway.call_parsers
    mode = responses_tool_mode(body, parser=parsers is not None)
    spec = response_spec(body, turns, mode, x_speculative, x_specgate_move_after)
    run = await gateway.open(spec)
    # No tool_choice with tools means "auto", as on chat.
    choice = body.tool_choice if body.tool_choice is not None else "auto"
    call_parser = auto_call_parser(parsers, choice, spec.tools)

    def store(response: ResponseObject) -> None:
        if body.store:
            conversation = (*turns, *output_turns(response))
            gateway.responses.put(StoredResponse(response, conversation))

    return await respond(
        run,
        request,
        ResponsesShape(body, gateway.model_id, mode, on_done=store, call_parser=call_parser),
        stream=body.stream,
        stream_options=None,
        shutdown_grace_seconds=gateway.shutdown_grace_seconds,
    )


@router.get(
    "/v1/responses/{response_id}",
    response_model=ResponseObject,
    summary="Retrieve a stored response",
    responses=ERRORS,
)
async def retrieve_response(response_id: str, gateway: GatewayDep) -> ResponseObject:
    """A response created with `store` (the default), while the store still holds it."""
    return stored(gateway, response_id).response


def stored(gateway: Gateway, response_id: str) -> StoredResponse:
    found = gateway.responses.get(response_id)
    if found is None:
        raise NotFoundError(
            f"No response with id '{response_id}' is stored here (unknown, not stored, or "
            "dropped from the in-memory store)",
            param="previous_response_id",
        )
    return found


def previous_turns(gateway: Gateway, response_id: str | None) -> list[ChatMessage]:
    # The earlier response's input and output; its instructions are not carried over (as
    # OpenAI's), so they were never stored with the turns.
    return [] if response_id is None else list(stored(gateway, response_id).conversation)


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


def responses_tool_mode(body: ResponseRequest, parser: bool = False) -> ToolCallMode | None:
    functions = tuple(
        Function.declared(tool.name, tool.parameters) for tool in body.function_tools()
    )
    choice = body.tool_choice
    if choice is None and functions:
        choice = "auto"
    return tool_call_mode(
        None if isinstance(choice, ToolChoiceFunction) else choice,
        functions,
        named=choice.name if isinstance(choice, ToolChoiceFunction) else None,
        parallel=body.parallel_tool_calls is not False,
        parser=parser,
    )


def response_spec(
    body: ResponseRequest,
    turns: list[ChatMessage],
    mode: ToolCallMode | None,
    route_header: str | None,
    move_after: int | None,
) -> RequestSpec:
    json_schema = body.json_schema()
    if mode is not None:
        json_schema = mode.schema()
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
    tools = tuple(
        {"type": "function", "function": tool.model_dump(exclude_none=True, exclude={"type"})}
        for tool in body.function_tools()
    )
    return RequestSpec(
        endpoint="responses",
        model=body.model,
        prompts=[turns],
        options=options,
        routing_text="\n".join(turn["content"] or "" for turn in turns),
        route_header=route_header,
        move_after=move_after,
        max_tokens_field="max_output_tokens",
        tools=tools or None,
    )
