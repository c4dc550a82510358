"""/v1/chat/completions encoded: the completion, its chunks, and chat-shaped logprobs."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

from app.encoders.common import closing_fields, finished_choices, id_fields, public_finish
from app.engine.generation import ChoiceDelta, TokenLogprob
from app.request_run import Run
from app.schemas.chat import (
    AssistantMessage,
    ChatChoice,
    ChatChunkChoice,
    ChatCompletion,
    ChatCompletionChunk,
    ChatDelta,
    ChatFinishReason,
    ChatLogprobs,
    FunctionCall,
    FunctionCallDelta,
    TokenLogprobOut,
    ToolCallDeltaOut,
    ToolCallOut,
    TopLogprob,
)
from app.tools.tool_calls import (
    CallParser,
    ToolCall,
    ToolCallDelta,
    ToolCallMode,
    ToolCallStream,
    parse_calls,
)

# What OpenAI reports for a token with no usable log probability.
UNLIKELY = -9999.0


class ChatEncoder:
    """Chat completions; with a tool-call mode, each choice's output is read as calls."""

    def __init__(
        self,
        model: str,
        tool_mode: ToolCallMode | None = None,
        *,
        legacy_functions: bool = False,
        call_parser: Callable[[], CallParser] | None = None,
    ) -> None:
        self.model = model
        self.tool_mode = tool_mode
        # The request used `functions`: one call, as `function_call`.
        self.legacy_functions = legacy_functions
        # "auto": a new parser per choice reads calls the model wrote in its own format.
        self.call_parser = call_parser
        self._streams: dict[int, ToolCallStream] = {}
        self._parsers: dict[int, CallParser] = {}
        self._called: set[int] = set()

    def response(self, run: Run) -> ChatCompletion:
        return ChatCompletion(
            **id_fields(run, self.model),
            choices=[
                self._choice(index, choice.text, chat_logprobs(choice.logprobs), finish)
                for index, choice, finish in finished_choices(run)
            ],
            **closing_fields(run),
        )

    def _choice(
        self,
        index: int,
        text: str,
        logprobs: ChatLogprobs | None,
        finish: Literal["stop", "length"],
    ) -> ChatChoice:
        if self.call_parser is not None:
            content, calls = self.call_parser().parse(text)
            if calls:
                message = AssistantMessage(content=content, tool_calls=_calls_out(calls))
                reason: ChatFinishReason = "tool_calls" if finish == "stop" else finish
                return ChatChoice(
                    index=index, message=message, logprobs=logprobs, finish_reason=reason
                )
            # No call: the text as the format holds it (specgate's envelope unwraps it).
            text = content if content is not None else text
        return ChatChoice(
            index=index,
            message=self._message(text),
            logprobs=logprobs,
            finish_reason=self._finish(finish) or finish,
        )

    def chunk(self, delta: ChoiceDelta, first: bool, run: Run) -> ChatCompletionChunk | None:
        # OpenAI announces the role once, in each choice's first chunk.
        role: Literal["assistant"] | None = "assistant" if first else None
        finish = self._finish(public_finish(delta.finish_reason))
        if self.call_parser is not None:
            parser = self._parsers.setdefault(delta.index, self.call_parser())
            text, calls = parser.feed(delta.text)
            if calls:
                self._called.add(delta.index)
            if finish == "stop" and delta.index in self._called:
                finish = "tool_calls"
            if text is None and not calls and not first and finish is None:
                return None  # held back: it may start a call
            content = ChatDelta(role=role, content=text, tool_calls=_call_deltas(calls) or None)
        elif self.tool_mode is None:
            content = ChatDelta(role=role, content=delta.text)
        else:
            stream = self._streams.setdefault(delta.index, ToolCallStream(self.tool_mode))
            calls = stream.feed(delta.text)
            if not calls and not first and finish is None:
                return None  # nothing to say yet: a call's name comes with its whole item
            content = self._call_delta(role, calls)
        return ChatCompletionChunk(
            **id_fields(run, self.model),
            choices=[
                ChatChunkChoice(
                    index=delta.index,
                    delta=content,
                    logprobs=chat_logprobs(delta.logprobs),
                    finish_reason=finish,
                )
            ],
        )

    def _message(self, text: str) -> AssistantMessage:
        if self.tool_mode is None:
            return AssistantMessage(content=text)
        calls = parse_calls(self.tool_mode, text)
        if self.legacy_functions:
            call = calls[0] if calls else None
            function = FunctionCall(name=call.name, arguments=call.arguments) if call else None
            return AssistantMessage(content=None, function_call=function)
        return AssistantMessage(content=None, tool_calls=_calls_out(calls))

    def _call_delta(
        self, role: Literal["assistant"] | None, calls: list[ToolCallDelta]
    ) -> ChatDelta:
        if self.legacy_functions:
            function = None
            if calls:
                arguments = "".join(call.arguments for call in calls)
                function = FunctionCallDelta(name=calls[0].name, arguments=arguments)
            return ChatDelta(role=role, function_call=function)
        return ChatDelta(role=role, tool_calls=_call_deltas(calls) or None)

    def _finish(self, finish: Literal["stop", "length"] | None) -> ChatFinishReason | None:
        # A constrained output that ended by itself is complete calls.
        if self.tool_mode is None or finish != "stop":
            return finish
        return "function_call" if self.legacy_functions else "tool_calls"

    def usage_chunk(self, run: Run) -> ChatCompletionChunk:
        return ChatCompletionChunk(
            **id_fields(run, self.model),
            choices=[],
            **closing_fields(run),
        )


def _calls_out(calls: list[ToolCall]) -> list[ToolCallOut]:
    return [
        ToolCallOut(id=c.id, function=FunctionCall(name=c.name, arguments=c.arguments))
        for c in calls
    ]


def _call_deltas(calls: list[ToolCallDelta]) -> list[ToolCallDeltaOut]:
    return [
        ToolCallDeltaOut(
            index=call.index,
            id=call.id,
            type="function" if call.id is not None else None,
            function=FunctionCallDelta(name=call.name, arguments=call.arguments),
        )
        for call in calls
    ]


def chat_logprobs(entries: Sequence[TokenLogprob] | None) -> ChatLogprobs | None:
    if entries is None:
        return None
    return ChatLogprobs(
        content=[
            TokenLogprobOut(
                token=entry.token,
                logprob=UNLIKELY if entry.logprob is None else entry.logprob,
                bytes=list(entry.token.encode()),
                top_logprobs=[
                    TopLogprob(token=token, logprob=logprob, bytes=list(token.encode()))
                    for token, logprob in entry.top
                ],
            )
            for entry in entries
        ]
    )
