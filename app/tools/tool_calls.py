"""Tool calls on /v1/chat/completions: what constrains them, and how output becomes calls.

A named function or `tool_choice: "required"` is constrained with a JSON schema through
structured outputs, so the arguments always parse and validate, on any model:

- a named function: the output is its arguments object, under the function's parameters
  schema;
- "required": the output is a list of `{"name": ..., "parameters": {...}}`, one item per
  call (at most one unless parallel tool calls are allowed), each item under its function's
  schema. The same shape vLLM's own server asks for.

Streamed, a named call's arguments go out as they are generated; under "required" each call
goes out whole once its item closes (its name is only known then).
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from app.errors import InvalidRequestError

# OpenAI's default for a function without parameters: an object with anything in it.
ANY_OBJECT: dict[str, Any] = {"type": "object"}


@dataclass(frozen=True)
class Function:
    name: str
    parameters: dict[str, Any] = field(default_factory=lambda: dict(ANY_OBJECT))
    description: str | None = None

    @classmethod
    def declared(
        cls, name: str, parameters: dict[str, Any] | None, description: str | None = None
    ) -> Function:
        """A function as a request declares it; no parameters schema means any object."""
        return cls(name, dict(ANY_OBJECT) if parameters is None else parameters, description)

    def declaration(self) -> dict[str, Any]:
        """The function as OpenAI's `tools` list declares it."""
        declared: dict[str, Any] = {"name": self.name}
        if self.description:
            declared["description"] = self.description
        return {**declared, "parameters": self.parameters}


@dataclass(frozen=True)
class ToolCallMode:
    """Generation constrained to tool calls: one named function, or any of `functions`."""

    kind: Literal["named", "required"]
    functions: tuple[Function, ...]
    parallel: bool = True
    # The key of a call item's arguments: vLLM's "parameters" for "required"; specgate's own
    # format for models without one says "arguments", as most call formats do.
    arguments_key: str = "parameters"

    def schema(self) -> dict[str, Any]:
        if self.kind == "named":
            return self.functions[0].parameters
        calls: dict[str, Any] = {
            "type": "array",
            "minItems": 1,
            "items": {
                "anyOf": [_call_schema(function, self.arguments_key) for function in self.functions]
            },
        }
        if not self.parallel:
            calls["maxItems"] = 1
        return calls


def _call_schema(function: Function, arguments_key: str) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "name": {"type": "string", "enum": [function.name]},
            arguments_key: function.parameters,
        },
        "required": ["name", arguments_key],
        "additionalProperties": False,
    }


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # a JSON text, as OpenAI sends it


@dataclass(frozen=True)
class ToolCallDelta:
    """A piece of a streamed tool call: its header (id and name) first, then arguments."""

    index: int
    arguments: str
    id: str | None = None
    name: str | None = None


class CallParser(Protocol):
    """Reads calls a model wrote in its own format, for "auto" (app/engine/vllm/tool_parser.py)."""

    def parse(self, text: str) -> tuple[str | None, list[ToolCall]]:
        """A whole output: its text (None when only calls), and its calls."""
        ...

    def feed(self, delta: str) -> tuple[str | None, list[ToolCallDelta]]:
        """The next piece of a streamed output: text to send, and pieces of calls."""
        ...


class CallParsers(Protocol):
    """vLLM's parser of one model's call format (app/engine/vllm/tool_parser.py)."""

    def new(self, tools: list[dict[str, Any]]) -> CallParser:
        """A parser for one choice of one request."""
        ...


def tool_call_mode(
    choice: str | None,
    functions: tuple[Function, ...],
    *,
    named: str | None = None,
    parallel: bool = True,
    field: str = "tool_choice",
    auto_served: bool = False,
) -> ToolCallMode | None:
    """The constraint for a tool choice ("none", "required", or a `named` function); None for
    free text and for "auto" when it is served (app/tools/auto_tools.py). `field` names the request
    field in errors."""
    if named is not None:
        return ToolCallMode("named", tuple(f for f in functions if f.name == named))
    if choice is None or choice == "none" or not functions or (choice == "auto" and auto_served):
        return None
    if choice == "auto":
        raise InvalidRequestError(
            f'"auto" {field} is turned off on this server (--no-enable-auto-tool-choice): '
            'send "required" or name a function, which this server constrains to valid calls',
            param=field,
        )
    return ToolCallMode("required", functions, parallel)


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def parse_calls(mode: ToolCallMode, text: str) -> list[ToolCall]:
    """The calls in a whole output. A cut-off output (finish "length") keeps what it has."""
    if mode.kind == "named":
        return [ToolCall(new_call_id(), mode.functions[0].name, text.strip())]
    return [
        ToolCall(new_call_id(), item["name"], json.dumps(item[mode.arguments_key]))
        for item in _complete_items(text)
    ]


def _complete_items(text: str) -> list[dict[str, Any]]:
    scanner = _ArrayItems()
    return [json.loads(item) for item in scanner.feed(text)]


class _ArrayItems:
    """Cuts a streamed JSON array of objects into its items' texts as each item closes."""

    def __init__(self) -> None:
        self._depth = 0
        self._in_string = False
        self._escaped = False
        self._item: list[str] = []

    def feed(self, text: str) -> list[str]:
        items = []
        for char in text:
            if self._depth >= 2 or (self._depth == 1 and char == "{"):
                self._item.append(char)
            if self._in_string:
                if self._escaped:
                    self._escaped = False
                elif char == "\\":
                    self._escaped = True
                elif char == '"':
                    self._in_string = False
                continue
            if char == '"':
                self._in_string = True
            elif char in "[{":
                self._depth += 1
            elif char in "]}":
                self._depth -= 1
                if self._depth == 1 and char == "}":
                    items.append("".join(self._item))
                    self._item = []
        return items


class ToolCallStream:
    """One choice's streamed output -> tool-call deltas, as OpenAI streams them."""

    def __init__(self, mode: ToolCallMode) -> None:
        self.mode = mode
        self.calls = 0
        self._items = _ArrayItems()

    def feed(self, text: str) -> list[ToolCallDelta]:
        if self.mode.kind == "named":
            if self.calls == 0:
                self.calls = 1
                return [ToolCallDelta(0, text, new_call_id(), self.mode.functions[0].name)]
            return [ToolCallDelta(0, text)] if text else []
        deltas = []
        for item in self._items.feed(text):
            call = json.loads(item)
            arguments = json.dumps(call[self.mode.arguments_key])
            deltas.append(ToolCallDelta(self.calls, arguments, new_call_id(), call["name"]))
            self.calls += 1
        return deltas
