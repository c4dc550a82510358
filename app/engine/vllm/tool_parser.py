"""vLLM's tool-call parsers, for `tool_choice: "auto"`: calls written in a model's own format.

A model that chooses between text and a call writes the call in its own format (hermes:
`<tool_call>{"name": ..., "arguments": {...}}</tool_call>`); vLLM has a parser per format.
specgate runs vLLM's parser over the text either route produced, whole or streamed, and
hands back text and calls in its own types. `--tool-call-parser auto` (the default) picks the
parser from what the chat template writes; `--tool-call-parser NAME` names one, as on vLLM.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
from vllm.tool_parsers.abstract_tool_parser import ToolParser, ToolParserManager

from app.tools.tool_calls import ToolCall, ToolCallDelta, new_call_id


def parser_names() -> list[str]:
    return sorted(ToolParserManager.list_registered())


# What a chat template writes around a call, and vLLM's parser of that format; the first
# marker found wins, so the more specific come first (Qwen3-Coder's XML calls sit inside
# hermes' <tool_call> tags).
TEMPLATE_MARKERS: tuple[tuple[str, str], ...] = (
    ("<function=", "qwen3_coder"),
    ("<tool_call>", "hermes"),
    ("[TOOL_CALLS]", "mistral"),
    ("<|python_tag|>", "llama3_json"),
    ("respond with a JSON for a function call", "llama3_json"),
    ("<\uff5ctool\u2581calls\u2581begin\uff5c>", "deepseek_v3"),  # DeepSeek-V3's own bars
    ("<tool_calls>", "jamba"),
    ("<|tool_call|>", "granite"),
    ("functools[", "phi4_mini_json"),
    ("<|action_start|><|plugin|>", "internlm"),
)


def parser_for_template(template: str | None) -> str | None:
    """vLLM's parser for the call format a chat template writes; None if it shows none."""
    if not template:
        return None
    known = set(parser_names())
    for marker, parser in TEMPLATE_MARKERS:
        if marker in template and parser in known:
            return parser
    return None


def chat_template(tokenizer: Any) -> str | None:
    """The tokenizer's chat template text (transformers keeps several as a dict)."""
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, dict):
        return "\n".join(str(text) for text in template.values())
    return template if isinstance(template, str) else None


@dataclass(frozen=True)
class AutoToolParsing:
    """A parser by name, and the tokenizer some parsers read special tokens from."""

    name: str
    # The embedded model's tokenizer; parsers that only read text (hermes) do without it.
    tokenizer: Any = None

    def __post_init__(self) -> None:
        if self.name not in parser_names():
            known = ", ".join(parser_names())
            raise ValueError(f"--tool-call-parser {self.name!r} is not one of vLLM's: {known}")

    def new(self, tools: list[dict[str, Any]]) -> AutoToolStream:
        """A parser for one choice of one request (parsers keep per-stream state)."""
        parser_class = ToolParserManager.get_tool_parser(self.name)
        # vLLM's parsers refuse a missing tokenizer; text-only ones never read it.
        tokenizer: Any = self.tokenizer if self.tokenizer is not None else _NoTokenizer()
        request = ChatCompletionRequest.model_validate(
            {"model": "-", "messages": [{"role": "user", "content": ""}], "tools": tools}
        )
        return AutoToolStream(parser_class(tokenizer, list(request.tools or ())), request)


class AutoToolStream:
    def __init__(self, parser: ToolParser, request: ChatCompletionRequest) -> None:
        self.parser = parser
        # A chat request in, a chat request out (the other kind is for the Responses API).
        self.request = cast(ChatCompletionRequest, parser.adjust_request(request))
        self.text = ""

    def parse(self, text: str) -> tuple[str | None, list[ToolCall]]:
        """A whole output: its text part (None if only calls), and its calls."""
        found = self.parser.extract_tool_calls(text, self.request)
        if not found.tools_called:
            return text, []
        calls = [
            ToolCall(call.id or new_call_id(), call.function.name, call.function.arguments)
            for call in found.tool_calls
        ]
        return found.content, calls

    def feed(self, delta: str) -> tuple[str | None, list[ToolCallDelta]]:
        """The next piece of a streamed output: text to send, and call pieces."""
        previous, self.text = self.text, self.text + delta
        message = self.parser.extract_tool_calls_streaming(
            previous, self.text, delta, [], [], [], self.request
        )
        if message is None:
            return None, []
        calls = [
            ToolCallDelta(
                index=call.index,
                arguments=(call.function.arguments or "") if call.function else "",
                id=call.id,
                name=call.function.name if call.function else None,
            )
            for call in message.tool_calls
        ]
        return message.content, calls


class _NoTokenizer:
    """Stands in for a tokenizer where none is at hand (a remote route's model)."""

    def get_vocab(self) -> dict[str, int]:
        return {}
