"""/v1/responses encoded: the Response object, and its typed stream of events.

A stream follows OpenAI's sequence: response.created, response.in_progress, then per
output item .output_item.added, (for text) .content_part.added, .output_text.delta ...
.output_text.done, .content_part.done, (for a call) .function_call_arguments.delta ...
.done, then .output_item.done, and last response.completed (or .incomplete when
max_output_tokens cut it). Every event carries a sequence_number. A failure mid-stream is
an `error` event; the stream then ends.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any, Literal

from pydantic import BaseModel

from app.encoders.common import route_info, usage
from app.errors import SpecgateError, error_body
from app.request_run import Run
from app.schemas.responses import (
    FunctionCallItem,
    IncompleteDetails,
    OutputItem,
    OutputMessage,
    OutputText,
    ResponseObject,
    ResponseRequest,
    ResponseUsage,
    TextConfig,
)
from app.tools.tool_calls import (
    CallParser,
    ToolCall,
    ToolCallDelta,
    ToolCallMode,
    ToolCallStream,
    parse_calls,
)

logger = logging.getLogger("specgate.streaming")


def item_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


class ResponsesEncoder:
    def __init__(
        self,
        body: ResponseRequest,
        model: str,
        tool_mode: ToolCallMode | None,
        on_done: Callable[[ResponseObject], None] = lambda response: None,
        call_parser: Callable[[], CallParser] | None = None,
    ) -> None:
        self.body = body
        self.model = model
        self.tool_mode = tool_mode
        # "auto" with a parser: text and calls the model wrote in its own format.
        self.call_parser = call_parser
        # Called with the final response (to store it), streamed or not.
        self.on_done = on_done
        self._message_id = item_id("msg")

    def response(self, run: Run) -> ResponseObject:
        response = self._final(run)
        self.on_done(response)
        return response

    def _final(self, run: Run) -> ResponseObject:
        status = _final_status(run)
        choice = run.choices.get(0)
        text = choice.text if choice is not None else ""
        return self._object(run, status, self._output(text, status == "incomplete"))

    def _output(self, text: str, cut: bool) -> list[OutputItem]:
        status: Literal["incomplete", "completed"] = "incomplete" if cut else "completed"
        if self.tool_mode is not None:
            return [_call_item(call) for call in parse_calls(self.tool_mode, text)]
        if self.call_parser is not None:
            content, calls = self.call_parser().parse(text)
            items: list[OutputItem] = [_call_item(call) for call in calls]
            if content or not calls:
                items.insert(0, self._message(content or "", status))
            return items
        return [self._message(text, status)]

    def _message(self, text: str, status: Literal["incomplete", "completed"]) -> OutputMessage:
        return OutputMessage(id=self._message_id, status=status, content=[OutputText(text=text)])

    def _object(self, run: Run, status: Any, output: list[OutputItem]) -> ResponseObject:
        body = self.body
        done = status != "in_progress"
        return ResponseObject(
            id=run.request_id,
            created_at=run.created,
            status=status,
            incomplete_details=(
                IncompleteDetails(reason="max_output_tokens") if status == "incomplete" else None
            ),
            instructions=body.instructions,
            max_output_tokens=body.max_output_tokens,
            model=self.model,
            output=output,
            parallel_tool_calls=body.parallel_tool_calls is not False,
            previous_response_id=body.previous_response_id,
            temperature=body.temperature,
            top_p=body.top_p,
            tool_choice=_dumped(body.tool_choice) or ("auto" if body.tools else "none"),
            tools=[_function_tool(tool) for tool in body.tools or ()],
            text=body.text or TextConfig(),
            usage=self._usage(run) if done else None,
            metadata=body.metadata or {},
            user=body.user,
            store=body.store,
            specgate=route_info(run) if done else None,
        )

    @staticmethod
    def _usage(run: Run) -> ResponseUsage:
        # The chat usage under the Responses API's names.
        counts = usage(run)
        return ResponseUsage(
            input_tokens=counts.prompt_tokens,
            output_tokens=counts.completion_tokens,
            total_tokens=counts.total_tokens,
            speculative_decoding=counts.speculative_decoding,
        )

    async def events(self, run: Run) -> AsyncIterator[dict[str, str]]:
        """The typed events of a streamed response. Closing it early aborts the request."""
        events = _Events()
        text = _TextWriter(self._message_id, events)
        calls = _CallWriter(events)
        constrained = ToolCallStream(self.tool_mode) if self.tool_mode is not None else None
        parser = self.call_parser() if self.call_parser is not None else None
        try:
            yield events.next("response.created", response=self._object(run, "in_progress", []))
            yield events.next("response.in_progress", response=self._object(run, "in_progress", []))
            if constrained is None and parser is None:
                for event in text.open():  # a text answer's message opens at once, as OpenAI's
                    yield event
            async for step in run.steps():
                for delta in step.choices:
                    if constrained is not None:
                        out = calls.feed(constrained.feed(delta.text))
                    elif parser is not None:
                        content, pieces = parser.feed(delta.text)
                        out = text.feed(content or "") + calls.feed(pieces)
                    else:
                        out = text.feed(delta.text)
                    for event in out:
                        yield event
            # The final output is what streamed: the same items, ids and call ids (not a
            # second parse of the whole text).
            status = _final_status(run)
            opened = [*text.items(status), *calls.items()]
            output = [item for _, item in sorted(opened, key=lambda pair: pair[0])]
            final = self._object(run, status, output)
            for event in [*text.close(final.output), *calls.close()]:
                yield event
            self.on_done(final)
            kind = "response.incomplete" if final.status == "incomplete" else "response.completed"
            yield events.next(kind, response=final)
        except SpecgateError as exc:
            yield events.error(exc.body()["error"])
        except Exception:
            logger.exception("stream failed")
            failure = error_body("internal error while streaming", "server_error")
            yield events.error(failure["error"])
        finally:
            await run.close()


class _Events:
    """Numbers the events of one stream, and the output items as they open."""

    def __init__(self) -> None:
        self.sequence = 0
        self.output_items = 0

    def next_output_index(self) -> int:
        self.output_items += 1
        return self.output_items - 1

    def next(self, kind: str, **fields: Any) -> dict[str, str]:
        data = {"type": kind, "sequence_number": self.sequence}
        data.update({name: _dumped(value) for name, value in fields.items()})
        self.sequence += 1
        return {"event": kind, "data": _json(data)}

    def error(self, error: dict[str, Any]) -> dict[str, str]:
        code = error.get("code") or error.get("type")
        return self.next("error", code=code, message=error["message"], param=error.get("param"))


class _TextWriter:
    """The answer's text: one output message with one output_text part, opened at the first
    text (or at once, for an answer that can only be text)."""

    def __init__(self, message_id: str, events: _Events) -> None:
        self.id = message_id
        self.events = events
        self.text = ""
        self.index: int | None = None

    def open(self) -> list[dict[str, str]]:
        self.index = self.events.next_output_index()
        item = OutputMessage(id=self.id, status="in_progress", content=[])
        return [
            self.events.next("response.output_item.added", output_index=self.index, item=item),
            self.events.next(
                "response.content_part.added",
                item_id=self.id,
                output_index=self.index,
                content_index=0,
                part=OutputText(text=""),
            ),
        ]

    def feed(self, text: str) -> list[dict[str, str]]:
        if not text:
            return []
        opened = self.open() if self.index is None else []
        self.text += text
        return [
            *opened,
            self.events.next(
                "response.output_text.delta",
                item_id=self.id,
                output_index=self.index,
                content_index=0,
                delta=text,
                logprobs=[],
            ),
        ]

    def items(self, status: Literal["incomplete", "completed"]) -> list[tuple[int, OutputItem]]:
        """The message, with its output index (none if no text came)."""
        if self.index is None:
            return []
        message = OutputMessage(id=self.id, status=status, content=[OutputText(text=self.text)])
        return [(self.index, message)]

    def close(self, output: list[OutputItem]) -> list[dict[str, str]]:
        if self.index is None:
            return []
        item = next(i for i in output if isinstance(i, OutputMessage))
        place = {"item_id": self.id, "output_index": self.index, "content_index": 0}
        return [
            self.events.next("response.output_text.done", **place, text=self.text, logprobs=[]),
            self.events.next(
                "response.content_part.done", **place, part=OutputText(text=self.text)
            ),
            self.events.next("response.output_item.done", output_index=self.index, item=item),
        ]


class _CallWriter:
    """Function-call items, from pieces of calls: each opens with its header (id and name)."""

    def __init__(self, events: _Events) -> None:
        self.events = events
        self._items: list[FunctionCallItem] = []
        self._indices: list[int] = []
        self._arguments: list[str] = []

    def feed(self, pieces: list[ToolCallDelta]) -> list[dict[str, str]]:
        out = []
        for piece in pieces:
            if piece.id is not None:  # a new call: the previous one is complete
                if self._items:
                    out += self._close(len(self._items) - 1)
                item = FunctionCallItem(
                    id=item_id("fc"),
                    call_id=piece.id,
                    name=piece.name or "",
                    arguments="",
                    status="in_progress",
                )
                self._items.append(item)
                self._indices.append(self.events.next_output_index())
                self._arguments.append("")
                out.append(
                    self.events.next(
                        "response.output_item.added", output_index=self._indices[-1], item=item
                    )
                )
            if piece.arguments and self._items:
                self._arguments[-1] += piece.arguments
                out.append(
                    self.events.next(
                        "response.function_call_arguments.delta",
                        item_id=self._items[-1].id,
                        output_index=self._indices[-1],
                        delta=piece.arguments,
                    )
                )
        return out

    def items(self) -> list[tuple[int, OutputItem]]:
        """The calls, complete, each with its output index."""
        return [(index, item) for index, item in zip(self._indices, self._done(), strict=True)]

    def _done(self) -> list[FunctionCallItem]:
        return [
            item.model_copy(update={"arguments": arguments, "status": "completed"})
            for item, arguments in zip(self._items, self._arguments, strict=True)
        ]

    def close(self) -> list[dict[str, str]]:
        return self._close(len(self._items) - 1) if self._items else []

    def _close(self, index: int) -> list[dict[str, str]]:
        item = self._done()[index]
        return [
            self.events.next(
                "response.function_call_arguments.done",
                item_id=item.id,
                name=item.name,
                output_index=self._indices[index],
                arguments=item.arguments,
            ),
            self.events.next(
                "response.output_item.done", output_index=self._indices[index], item=item
            ),
        ]


def _final_status(run: Run) -> Literal["incomplete", "completed"]:
    """Incomplete when max_output_tokens cut the answer."""
    choice = run.choices.get(0)
    return "incomplete" if choice is not None and choice.finish_reason == "length" else "completed"


def _call_item(call: ToolCall) -> FunctionCallItem:
    return FunctionCallItem(
        id=item_id("fc"),
        call_id=call.id,
        name=call.name,
        arguments=call.arguments,
        status="completed",
    )


def _function_tool(tool: dict[str, Any]) -> dict[str, Any]:
    # OpenAI echoes each tool with its every field; strict and parameters are required there.
    return {
        "type": "function",
        "name": tool["name"],
        "description": tool.get("description"),
        "parameters": tool.get("parameters"),
        "strict": tool.get("strict"),
    }


def _dumped(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, list):
        return [_dumped(item) for item in value]
    return value


def _json(data: dict[str, Any]) -> str:
    return json.dumps(data, separators=(",", ":"))
