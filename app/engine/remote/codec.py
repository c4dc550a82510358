"""The upstream codec: specgate's requests as vLLM's OpenAI server takes them, and its
streamed answers back.

Pure functions and a small stream decoder, with no I/O, so that the remote pool
(`app.engine.remote.remote_engine`) only moves bytes and the mapping can be tested on its own.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from app.engine.generation import ChoiceDelta, GenerationRequest, GenerationStep, SamplingOptions
from app.engine.sampling_table import NOT_FORWARDED, finish_reason, remote_sampling
from app.errors import EngineFailureError, InvalidRequestError, SpecgateError
from app.vocabulary import SpecDecodeStats

CHAT_PATH = "/v1/chat/completions"
COMPLETIONS_PATH = "/v1/completions"
DONE = "[DONE]"


@dataclass(frozen=True)
class UpstreamModel:
    """What an upstream serves, as its /v1/models card says."""

    name: str
    # vLLM's card has it; needed to ask /v1/completions for "as many tokens as fit".
    max_model_len: int | None = None


def not_forwarded(options: SamplingOptions) -> tuple[str, ...]:
    """The set options a remote route cannot serve."""
    # `is`, not `in (None, False)`: logprobs=0 (no alternatives) still asks for logprobs.
    return tuple(
        name
        for name in NOT_FORWARDED
        if getattr(options, name) is not None and getattr(options, name) is not False
    )


def request_body(request: GenerationRequest, model: UpstreamModel) -> tuple[str, dict[str, Any]]:
    """The path and JSON body of one streamed upstream call."""
    body: dict[str, Any] = {
        "model": model.name,
        **remote_sampling(request.options),
        "stream": True,
        # continuous_usage_stats is vLLM's: every chunk carries the running token count of its
        # choice, which is how new tokens per chunk are known without a tokenizer here.
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    prompt = request.prompt
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], dict):
        if request.tools:
            # The upstream renders the tools into its chat template; the calls themselves are
            # constrained (structured_outputs) and read here, so it must not parse them.
            body["tools"] = list(request.tools)
            body["tool_choice"] = "none"
        return CHAT_PATH, {**body, "messages": prompt}
    if body["max_tokens"] is None and model.max_model_len is not None:
        # vLLM's /v1/completions reads a null max_tokens as OpenAI's 16. The embedded engine
        # means "until the context is full"; vLLM clamps a limit to what the context leaves.
        body["max_tokens"] = model.max_model_len
    return COMPLETIONS_PATH, {**body, "prompt": prompt}


def model_from_list(listing: Any, wanted: str | None) -> UpstreamModel:
    """Pick the model to use from a /v1/models answer: `wanted`, or the first one listed."""
    cards = listing.get("data") if isinstance(listing, dict) else None
    if not isinstance(cards, list) or not cards:
        raise ValueError("/v1/models lists no model")
    for card in cards:
        if isinstance(card, dict) and (wanted is None or card.get("id") == wanted):
            length = card.get("max_model_len")
            return UpstreamModel(str(card["id"]), length if isinstance(length, int) else None)
    raise ValueError(f"/v1/models does not list {wanted!r}")


def upstream_error(status: int, body: bytes) -> SpecgateError:
    """The error for an upstream's error answer (an HTTP status, or an error event mid-stream)."""
    message, param = _error_message(body)
    if 400 <= status < 500:
        return InvalidRequestError(message, param=param)
    return EngineFailureError(f"upstream error {status}: {message}")


def _error_message(body: bytes) -> tuple[str, str | None]:
    try:
        data = json.loads(body)
    except ValueError:
        return body.decode(errors="replace").strip() or "no message", None
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, dict):
        param = error.get("param")
        return str(error.get("message", error)), param if isinstance(param, str) else None
    if isinstance(data, dict) and "detail" in data:  # FastAPI's own error shape
        return str(data["detail"]), None
    return str(data), None


class SSEParser:
    """Splits a byte stream into the `data` payloads of its server-sent events."""

    def __init__(self) -> None:
        self._buffer = b""
        self._data: list[str] = []

    def feed(self, chunk: bytes) -> Iterator[str]:
        self._buffer += chunk
        *lines, self._buffer = self._buffer.split(b"\n")
        for raw in lines:
            line = raw.rstrip(b"\r").decode()
            if not line:
                if self._data:
                    yield "\n".join(self._data)
                    self._data = []
            elif line.startswith("data:"):
                self._data.append(line[5:].removeprefix(" "))
            # Comments (":" keep-alives) and the other fields carry nothing needed here.


@dataclass
class StreamDecoder:
    """vLLM's streamed chunks (chat or completions) -> `GenerationStep`s.

    The step that finishes the last choice is held back until the usage chunk that follows
    it, which may carry the request's speculative-decoding figures (vLLM's
    `--per-request-spec-decode-metrics`); they belong on that final delta.
    """

    n: int
    prompt_tokens: int = 0
    done: bool = False
    _tokens: dict[int, int] = field(default_factory=dict)
    _finished: set[int] = field(default_factory=set)
    _held: GenerationStep | None = None

    def feed(self, data: str) -> Iterator[GenerationStep]:
        if data == DONE:
            self.done = True
            yield from self._release(None)
            return
        try:
            chunk = json.loads(data)
        except ValueError:
            raise EngineFailureError(
                f"the upstream sent an unreadable event: {data[:200]!r}"
            ) from None
        if not isinstance(chunk, dict):
            raise EngineFailureError(f"the upstream sent an unexpected event: {data[:200]!r}")
        if "error" in chunk:
            error = chunk["error"]
            status = error.get("code") if isinstance(error, dict) else None
            raise upstream_error(status if isinstance(status, int) else 500, data.encode())
        usage = chunk.get("usage") or {}
        self.prompt_tokens = usage.get("prompt_tokens", self.prompt_tokens)
        choices = chunk.get("choices") or []
        if not choices:
            # The closing usage chunk.
            yield from self._release(_spec_stats(chunk.get("metrics")))
            return
        deltas = [self._delta(choice, usage) for choice in choices]
        step = GenerationStep(prompt_tokens=self.prompt_tokens, choices=deltas)
        if len(self._finished) >= self.n and any(d.finish_reason for d in deltas):
            self._held = step
        else:
            yield step

    def finish(self) -> Iterator[GenerationStep]:
        """At the end of the byte stream: what is still held, or an error if it ended early."""
        if len(self._finished) < self.n:
            raise EngineFailureError("the upstream's stream ended before the answer did")
        yield from self._release(None)

    def _delta(self, choice: dict[str, Any], usage: dict[str, Any]) -> ChoiceDelta:
        index = int(choice.get("index", 0))
        if "delta" in choice:
            text = choice["delta"].get("content") or ""
        else:
            text = choice.get("text") or ""
        # With continuous usage each chunk holds one choice and its running token count.
        total = usage.get("completion_tokens", self._tokens.get(index, 0))
        new_tokens = max(0, total - self._tokens.get(index, 0))
        self._tokens[index] = total
        finish = finish_reason(choice.get("finish_reason"), "the upstream engine")
        if finish is not None:
            self._finished.add(index)
        return ChoiceDelta(index=index, text=text, new_tokens=new_tokens, finish_reason=finish)

    def _release(self, spec: SpecDecodeStats | None) -> Iterator[GenerationStep]:
        held, self._held = self._held, None
        if held is None:
            return
        if spec is not None:
            last = held.choices[-1]
            held = replace(held, choices=[*held.choices[:-1], replace(last, draft_stats=spec)])
        yield replace(held, prompt_tokens=self.prompt_tokens)


def _spec_stats(metrics: object) -> SpecDecodeStats | None:
    spec = metrics.get("speculative_decoding") if isinstance(metrics, dict) else None
    if not isinstance(spec, dict):
        return None
    return SpecDecodeStats(
        drafts=int(spec.get("num_spec_steps", 0)),
        draft_tokens=int(spec.get("num_draft_tokens", 0)),
        accepted_tokens=int(spec.get("num_accepted_draft_tokens", 0)),
        acceptance_histogram=tuple(int(c) for c in spec.get("acceptance_histogram") or ()),
        spec_tokens=int(spec.get("num_spec_tokens", 0)),
    )
