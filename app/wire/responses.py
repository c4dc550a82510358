"""/v1/responses on the wire: the Response object, and its typed stream of events.

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

from app.errors import SpecgateError, error_body
from app.generation import Run
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
from app.tool_calls import ToolCallMode, ToolCallStream, parse_calls
from app.wire.common import route_info, speculative_usage

logger = logging.getLogger("specgate.streaming")


def item_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


class ResponsesShape:
    def __init__(
        self,
        body: ResponseRequest,
        model: str,
        tool_mode: ToolCallMode | None,
        on_done: Callable[[ResponseObject], None] = lambda response: None,
    ) -> None:
        self.body = body
        self.model = model
        self.tool_mode = tool_mode
        # Called with the final response (to store it), streamed or not.
        self.on_done = on_done
        self._message_id = item_id("msg")

    def response(self, run: Run) -> ResponseObject:
        response = self._final(run)
        self.on_done(response)
        return response

    def _final(self, run: Run) -> ResponseObject:
        choice = run.choices.get(0)
        text = choice.text if choice is not None else ""
        cut = choice is not None and choice.finish_reason == "length"
        return self._object(run, "incomplete" if cut else "completed", self._output(text, cut))

    def _output(self, text: str, cut: bool) -> list[OutputItem]:
        status: Literal["incomplete", "completed"] = "incomplete" if cut else "completed"
        if self.tool_mode is None:
            part = OutputText(text=text)
            return [OutputMessage(id=self._message_id, status=status, content=[part])]
        return [
            FunctionCallItem(
                id=item_id("fc"),
                call_id=call.id,
                name=call.name,
                arguments=call.arguments,
                status="completed",
            )
            for call in parse_calls(self.tool_mode, text)
        ]

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
        return ResponseUsage(
            input_tokens=run.prompt_tokens,
            output_tokens=run.completion_tokens,
            total_tokens=run.prompt_tokens + run.completion_tokens,
            speculative_decoding=speculative_usage(run),
        )

    async def sse(self, run: Run, include_usage: bool = False) -> AsyncIterator[dict[str, str]]:
        """The typed events of a streamed response. Closing it early aborts the request."""
        events = _Events()
        try:
            yield events.next("response.created", response=self._object(run, "in_progress", []))
            yield events.next("response.in_progress", response=self._object(run, "in_progress", []))
            writer = (
                _TextWriter(self._message_id, events)
                if self.tool_mode is None
                else _CallWriter(self.tool_mode, events)
            )
            for event in writer.start():
                yield event
            async for step in run.steps():
                for delta in step.choices:
                    for event in writer.feed(delta.text):
                        yield event
            final = self._final(run)
            for event in writer.finish(final):
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
    def __init__(self) -> None:
        self.sequence = 0

    def next(self, kind: str, **fields: Any) -> dict[str, str]:
        data = {"type": kind, "sequence_number": self.sequence}
        data.update({name: _dumped(value) for name, value in fields.items()})
        self.sequence += 1
        return {"event": kind, "data": _json(data)}

    def error(self, error: dict[str, Any]) -> dict[str, str]:
        code = error.get("code") or error.get("type")
        return self.next("error", code=code, message=error["message"], param=error.get("param"))


class _TextWriter:
    """One output message with one output_text part."""

    def __init__(self, message_id: str, events: _Events) -> None:
        self.id = message_id
        self.events = events
        self.text = ""

    def start(self) -> list[dict[str, str]]:
        item = OutputMessage(id=self.id, status="in_progress", content=[])
        return [
            self.events.next("response.output_item.added", output_index=0, item=item),
            self.events.next(
                "response.content_part.added",
                item_id=self.id,
                output_index=0,
                content_index=0,
                part=OutputText(text=""),
            ),
        ]

    def feed(self, text: str) -> list[dict[str, str]]:
        if not text:
            return []
        self.text += text
        return [
            self.events.next(
                "response.output_text.delta",
                item_id=self.id,
                output_index=0,
                content_index=0,
                delta=text,
                logprobs=[],
            )
        ]

    def finish(self, final: ResponseObject) -> list[dict[str, str]]:
        (item,) = final.output
        place = {"item_id": self.id, "output_index": 0, "content_index": 0}
        return [
            self.events.next("response.output_text.done", **place, text=self.text, logprobs=[]),
            self.events.next(
                "response.content_part.done", **place, part=OutputText(text=self.text)
            ),
            self.events.next("response.output_item.done", output_index=0, item=item),
        ]


class _CallWriter:
    """Function-call items: a named call's arguments as generated, required calls whole."""

    def __init__(self, mode: ToolCallMode, events: _Events) -> None:
        self.stream = ToolCallStream(mode)
        self.events = events
        self.items: list[FunctionCallItem] = []
        self._arguments: list[str] = []

    def start(self) -> list[dict[str, str]]:
        return []

    def feed(self, text: str) -> list[dict[str, str]]:
        out = []
        for delta in self.stream.feed(text):
            if delta.id is not None:  # a new call: its item opens
                if self.items:
                    out += self._close(len(self.items) - 1)
                item = FunctionCallItem(
                    id=item_id("fc"),
                    call_id=delta.id,
                    name=delta.name or "",
                    arguments="",
                    status="in_progress",
                )
                self.items.append(item)
                self._arguments.append("")
                out.append(
                    self.events.next(
                        "response.output_item.added", output_index=len(self.items) - 1, item=item
                    )
                )
            if delta.arguments:
                index = len(self.items) - 1
                self._arguments[index] += delta.arguments
                out.append(
                    self.events.next(
                        "response.function_call_arguments.delta",
                        item_id=self.items[index].id,
                        output_index=index,
                        delta=delta.arguments,
                    )
                )
        return out

    def finish(self, final: ResponseObject) -> list[dict[str, str]]:
        # The final response's items are the streamed ones: same ids and call ids.
        out = self._close(len(self.items) - 1) if self.items else []
        final.output = list(self._done_items())
        return out

    def _done_items(self) -> list[FunctionCallItem]:
        return [
            item.model_copy(update={"arguments": arguments, "status": "completed"})
            for item, arguments in zip(self.items, self._arguments, strict=True)
        ]

    def _close(self, index: int) -> list[dict[str, str]]:
        item = self._done_items()[index]
        return [
            self.events.next(
                "response.function_call_arguments.done",
                item_id=item.id,
                name=item.name,
                output_index=index,
                arguments=item.arguments,
            ),
            self.events.next("response.output_item.done", output_index=index, item=item),
        ]


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
