"""specgate's own tool-call format, for models whose chat template shows none.

A model never taught a call format cannot be parsed for calls: it writes them some way of its
own, or not at all (the embedded SmolLM2-135M never starts a hermes `<tool_call>` by itself).
For such a model, `tool_choice: "auto"` is served with an envelope the model must fill:

    {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}
    {"content": "It is sunny in Paris."}

The tools and this format are described in the system message, earlier calls are shown to the
model in the same envelope, and structured outputs constrain the answer to one of the two
shapes, each call under its function's parameters schema. So the choice between text and a
call is one the model makes on a key, and the arguments always validate.

A turn that answers tool results may only hold content: a model without a format of its own,
asked to choose again, calls again (the embedded model does, every time), which would put an
agent in a loop; left free, it writes the envelope's calls as text. Such a model makes one
round of calls per user turn.
"""

from __future__ import annotations

import json
from typing import Any

from app.tools.tool_calls import (
    Function,
    ToolCall,
    ToolCallDelta,
    ToolCallMode,
    ToolCallStream,
    new_call_id,
)
from app.vocabulary import ChatMessage

INSTRUCTIONS = (
    "You can call these functions:\n{functions}\n\n"
    "Answer with one JSON object. To call functions: "
    '{{"tool_calls": [{{"name": "<function name>", "arguments": {{<arguments>}}}}]}}. '
    'To answer the user: {{"content": "<your answer>"}}.'
)
_CONTENT_START = '"content"'


def envelope_schema(
    functions: tuple[Function, ...], parallel: bool, calls: bool = True
) -> dict[str, Any]:
    """Either calls to these functions (at most one unless parallel) or text content; only
    text content without `calls`."""
    content = _object_with("content", {"type": "string"})
    if not calls:
        return content
    items = ToolCallMode("required", functions, parallel, arguments_key="arguments").schema()
    return {"anyOf": [_object_with("tool_calls", items), content]}


def _object_with(key: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {key: schema},
        "required": [key],
        "additionalProperties": False,
    }


def described(messages: list[ChatMessage], functions: tuple[Function, ...]) -> list[ChatMessage]:
    """The conversation as the model sees it: the tools and the format in the system message,
    earlier calls in the envelope (templates without tools drop `tool_calls`)."""
    listing = "\n".join(json.dumps(function.declaration()) for function in functions)
    instructions = INSTRUCTIONS.format(functions=listing)
    shown = [_calls_as_text(message) for message in messages]
    if shown and shown[0]["role"] == "system":
        first = shown[0]
        return [{**first, "content": f"{first['content'] or ''}\n\n{instructions}"}, *shown[1:]]
    return [{"role": "system", "content": instructions}, *shown]


def answers_tool_results(messages: list[ChatMessage]) -> bool:
    return bool(messages) and messages[-1]["role"] == "tool"


def _calls_as_text(message: ChatMessage) -> ChatMessage:
    calls = message.get("tool_calls")
    if not calls:
        return message
    items = [
        {"name": call["function"]["name"], "arguments": _arguments(call["function"]["arguments"])}
        for call in calls
    ]
    shown: ChatMessage = {"role": message["role"], "content": json.dumps({"tool_calls": items})}
    return shown


def _arguments(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text  # shown as the client sent it


class EnvelopeParser:
    """Reads one choice's envelope, whole or streamed: its content, or its calls as each one
    closes. The constraint guarantees the shape; a cut-off output keeps what it has."""

    def __init__(self) -> None:
        self._text = ""
        self._content: _StringReader | None = None
        self._calls: ToolCallStream | None = None

    def parse(self, text: str) -> tuple[str | None, list[ToolCall]]:
        content, deltas = self.feed(text)
        calls = [ToolCall(d.id or new_call_id(), d.name or "", d.arguments) for d in deltas]
        if calls:
            return None, calls
        return content or "", []

    def feed(self, delta: str) -> tuple[str | None, list[ToolCallDelta]]:
        if self._content is not None:
            return self._content.feed(delta) or None, []
        if self._calls is not None:
            return None, self._calls.feed(delta)
        self._text += delta
        head = self._text.lstrip().removeprefix("{").lstrip()
        if head.startswith(_CONTENT_START):
            value = head[len(_CONTENT_START) :].lstrip().removeprefix(":").lstrip()
            if value.startswith('"'):
                self._content = _StringReader()
                return self._content.feed(value[1:]) or None, []
        elif head.startswith('"tool_calls"'):
            # The items scanner counts brackets: without the envelope's own brace, the
            # calls array is its outer level.
            self._calls = ToolCallStream(ToolCallMode("required", (), arguments_key="arguments"))
            return None, self._calls.feed(head)
        return None, []


class _StringReader:
    """A JSON string's characters as they arrive, escapes decoded, up to its closing quote."""

    def __init__(self) -> None:
        self._closed = False
        self._escape: str | None = None  # the escape being read, after its backslash
        self._high: int | None = None  # a surrogate pair's first half, waiting for its second

    def feed(self, text: str) -> str:
        out: list[str] = []
        for char in text:
            if self._closed:
                break
            if self._escape is None:
                if char == '"':
                    self._closed = True
                elif char == "\\":
                    self._escape = ""
                else:
                    out.append(self._unpaired() + char)
                continue
            self._escape += char
            if self._escape[0] != "u":
                out.append(self._unpaired() + _ESCAPES.get(char, char))
                self._escape = None
            elif len(self._escape) == 5:
                out.append(self._code_point(int(self._escape[1:], 16)))
                self._escape = None
        return "".join(out)

    def _code_point(self, code: int) -> str:
        if 0xD800 <= code <= 0xDBFF:
            unpaired, self._high = self._unpaired(), code
            return unpaired
        if 0xDC00 <= code <= 0xDFFF and self._high is not None:
            high, self._high = self._high, None
            return chr(0x10000 + ((high - 0xD800) << 10) + (code - 0xDC00))
        return self._unpaired() + chr(code)

    def _unpaired(self) -> str:
        high, self._high = self._high, None
        return "" if high is None else chr(high)


_ESCAPES = {"b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
