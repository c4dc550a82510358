"""`tool_choice: "auto"`: how the served model chooses between text and calls.

Decided once, at start (app/main.py), from the chat template:

- the template shows a call format vLLM has a parser for (hermes `<tool_call>`, Llama 3
  JSON, Mistral `[TOOL_CALLS]`, ...): the model writes calls its own way, the template renders
  the tools, and that parser reads the calls (`ModelFormat`);
- it shows none (the embedded model): specgate's own envelope, constrained
  (`EnvelopeFormat`, app/tools/tool_envelope.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from app.errors import InvalidRequestError
from app.tools.tool_calls import CallParser, CallParsers, Function, ToolCallMode
from app.tools.tool_envelope import EnvelopeParser, answers_tool_results, described, envelope_schema
from app.vocabulary import ChatMessage


@dataclass(frozen=True)
class AutoTurn:
    """One request's "auto": what the model is shown, how it is constrained, how it is read."""

    messages: list[ChatMessage]
    json_schema: dict[str, Any] | None
    # A new reader per choice; None: the answer is plain text.
    parser: Callable[[], CallParser] | None
    # The chat template renders the tools (the model's own format shows them its own way).
    template_tools: bool


class AutoToolChoice(Protocol):
    @property
    def description(self) -> str:
        """For the start-up log: which format, and why."""
        ...

    def turn(
        self,
        messages: list[ChatMessage],
        functions: tuple[Function, ...],
        tools: tuple[dict[str, Any], ...],
        parallel: bool,
    ) -> AutoTurn: ...


@dataclass(frozen=True)
class ModelFormat:
    """The model writes calls in its own format; vLLM's parser for it reads them."""

    parsers: CallParsers
    description: str

    def turn(
        self,
        messages: list[ChatMessage],
        functions: tuple[Function, ...],
        tools: tuple[dict[str, Any], ...],
        parallel: bool,
    ) -> AutoTurn:
        listed = list(tools)
        return AutoTurn(messages, None, lambda: self.parsers.new(listed), template_tools=True)


@dataclass(frozen=True)
class EnvelopeFormat:
    """specgate's own format for a model with none: text or calls in a constrained envelope."""

    description: str = (
        "the chat template shows no call format vLLM parses: specgate's own "
        '{"tool_calls": [...]} or {"content": ...} envelope, constrained'
    )

    def turn(
        self,
        messages: list[ChatMessage],
        functions: tuple[Function, ...],
        tools: tuple[dict[str, Any], ...],
        parallel: bool,
    ) -> AutoTurn:
        shown = described(messages, functions)
        schema = envelope_schema(functions, parallel, calls=not answers_tool_results(messages))
        return AutoTurn(shown, schema, EnvelopeParser, template_tools=False)


def auto_turn(
    auto: AutoToolChoice | None,
    choice: object,
    messages: list[ChatMessage],
    functions: tuple[Function, ...],
    tools: tuple[dict[str, Any], ...],
    parallel: bool,
) -> AutoTurn | None:
    """How "auto" is served for one request; None without tools, with another choice, or
    with "auto" refused (then `tool_call_mode` says so)."""
    if auto is None or choice != "auto" or not functions:
        return None
    return auto.turn(messages, functions, tools, parallel)


def constrained_schema(
    requested: dict[str, Any] | None,
    mode: ToolCallMode | None,
    turn: AutoTurn | None,
    field: str,
) -> dict[str, Any] | None:
    """The JSON schema generation follows: the tool calls' constraint where there is one,
    else the client's own format (`field`, which cannot be combined with the calls')."""
    constraint = mode.schema() if mode is not None else turn.json_schema if turn else None
    if constraint is None:
        return requested
    if requested is not None:
        raise InvalidRequestError(
            f"{field} cannot be combined with a tool call this server constrains "
            "(required, named, or auto on a model without a call format of its own)",
            param=field,
        )
    return constraint
