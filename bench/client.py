"""One streamed request, timed: time to first token, per-token latency, end-to-end latency,
completion tokens, the route that served it and its draft acceptance."""

from __future__ import annotations

import json
import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Literal

import httpx

from app.engine.remote.codec import SSEParser

Endpoint = Literal["chat", "completions"]
PATHS: dict[Endpoint, str] = {"chat": "/v1/chat/completions", "completions": "/v1/completions"}


@dataclass(frozen=True)
class Prompt:
    id: str
    cls: str
    endpoint: Endpoint
    # The request's own fields (messages or prompt, temperature, max_tokens, ...), as written
    # in the prompt file; the runner adds model, stream and its overrides.
    fields: dict[str, Any]

    @property
    def path(self) -> str:
        return PATHS[self.endpoint]


@dataclass(frozen=True)
class Arm:
    name: str
    server: str  # the server that plays this arm
    header: str | None  # X-Speculative value; None for vLLM's own server, which has no such header
    route: str | None = None  # the route by construction, where no header reports it
    scrape_spec_metrics: bool = False  # acceptance only in /metrics (vLLM's own server)


@dataclass
class SpecCounters:
    drafts: int = 0
    draft_tokens: int = 0
    accepted_tokens: int = 0

    @classmethod
    def from_json(cls, figures: dict[str, Any]) -> SpecCounters:
        """From a `speculative_decoding` or `shadow_drafting` object."""
        return cls(
            int(figures["drafts"]), int(figures["draft_tokens"]), int(figures["accepted_tokens"])
        )

    def __sub__(self, other: SpecCounters) -> SpecCounters:
        return SpecCounters(
            self.drafts - other.drafts,
            self.draft_tokens - other.draft_tokens,
            self.accepted_tokens - other.accepted_tokens,
        )


@dataclass
class Sample:
    arm: str
    concurrency: int
    repeat: int
    prompt_id: str
    cls: str
    ok: bool = False
    error: str | None = None
    ttft_s: float | None = None
    # Per output token after the first: (e2e - ttft) / (tokens - 1). Comparable across routes,
    # unlike the gap between chunks: a speculative step can emit several tokens in one chunk.
    itl_s: float | None = None
    chunk_gap_s: float | None = None  # mean gap between content chunks after the first
    e2e_s: float | None = None
    completion_tokens: int | None = None
    content_chunks: int = 0
    route: str | None = None
    served_class: str | None = None  # specgate's own workload class (x-specgate-class)
    reason: str | None = None
    spec: SpecCounters | None = None  # drafting figures, when the speculative engine served
    finish_reason: str | None = None
    # The route segments of a response that changed engine mid-stream, from the `segments`
    # list of the last `specgate` object in the stream; None where the server sends none.
    segments: list[Any] | None = None
    # What ngram drafting would have drafted and accepted for this output (either route),
    # from the specgate object's `shadow_drafting`: acceptance free of batching effects.
    shadow: SpecCounters | None = None

    @property
    def switches(self) -> int:
        """Mid-stream engine switches: one fewer than the segments, 0 where none are reported."""
        return max(len(self.segments) - 1, 0) if self.segments else 0


def request_body(
    prompt: Prompt, model: str, max_tokens: int | None, seed: int | None
) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model, **prompt.fields}
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    if seed is not None and body.get("temperature", 1.0) != 0:
        # A fixed seed keeps sampled (T > 0) outputs, and so their lengths, steadier across
        # repeats; the prompt's own seed wins. Greedy requests get none: it would change
        # nothing but keep them from moving between engines mid-stream.
        body.setdefault("seed", seed)
    return body


def headers_for(arm: Arm) -> dict[str, str]:
    return {} if arm.header is None else {"X-Speculative": arm.header}


async def prime(client: httpx.AsyncClient, arm: Arm, prompt: Prompt, body: dict[str, Any]) -> None:
    """Send the prompt once with max_tokens=1, unrecorded, to the engine the arm will use.

    Both vLLM engines keep a prefix cache. At concurrency 1 the auto arm always runs right
    after a forced arm that used the same engine, so without this its prompt would be cached
    and its TTFT flattered. Priming every measured request levels that: all arms measure a
    warm prefix.
    """
    primer = {k: v for k, v in body.items() if k not in ("stream", "stream_options")}
    primer["max_tokens"] = 1
    response = await client.post(prompt.path, json=primer, headers=headers_for(arm))
    response.raise_for_status()


async def measure(
    client: httpx.AsyncClient,
    arm: Arm,
    prompt: Prompt,
    body: dict[str, Any],
    concurrency: int,
    repeat: int,
) -> Sample:
    """Stream one request with usage and time it. Failures become a sample with `error`."""
    sample = Sample(arm.name, concurrency, repeat, prompt.id, prompt.cls, route=arm.route)
    streamed = {**body, "stream": True, "stream_options": {"include_usage": True}}
    chunk_times: list[float] = []
    usage: dict[str, Any] | None = None
    started = time.perf_counter()
    try:
        async with client.stream(
            "POST", prompt.path, json=streamed, headers=headers_for(arm)
        ) as response:
            if response.status_code != 200:
                text = (await response.aread()).decode(errors="replace")
                sample.error = f"HTTP {response.status_code}: {text[:300]}"
                return sample
            # Headers arrive before the first token: the route actually taken.
            sample.route = response.headers.get("x-specgate-route", arm.route)
            sample.served_class = response.headers.get("x-specgate-class")
            sample.reason = response.headers.get("x-specgate-reason")
            async for event in sse_payloads(response):
                if event.get("error"):
                    sample.error = f"stream error: {json.dumps(event['error'])[:300]}"
                    continue
                if _content(event):
                    chunk_times.append(time.perf_counter())
                finish = _finish_reason(event)
                if finish:
                    sample.finish_reason = finish
                if event.get("usage"):
                    usage = event["usage"]
                info = event.get("specgate")
                if isinstance(info, dict) and isinstance(info.get("segments"), list):
                    sample.segments = info["segments"]
                shadow = info.get("shadow_drafting") if isinstance(info, dict) else None
                if isinstance(shadow, dict):
                    sample.shadow = SpecCounters.from_json(shadow)
        ended = time.perf_counter()
    except httpx.HTTPError as exc:
        sample.error = f"{type(exc).__name__}: {exc}"
        return sample
    _fill_timings(sample, started, ended, chunk_times, usage)
    sample.ok = sample.error is None
    return sample


def _fill_timings(
    sample: Sample,
    started: float,
    ended: float,
    chunk_times: list[float],
    usage: dict[str, Any] | None,
) -> None:
    sample.e2e_s = ended - started
    sample.content_chunks = len(chunk_times)
    if usage is None:
        sample.error = sample.error or "no usage chunk in the stream"
        tokens = len(chunk_times)  # a lower bound: chunks can hold several tokens
    else:
        tokens = int(usage.get("completion_tokens") or 0)
        spec = usage.get("speculative_decoding")
        if spec is not None:
            sample.spec = SpecCounters.from_json(spec)
    sample.completion_tokens = tokens
    if not chunk_times:
        return
    sample.ttft_s = chunk_times[0] - started
    if tokens > 1:
        sample.itl_s = (sample.e2e_s - sample.ttft_s) / (tokens - 1)
    if len(chunk_times) > 1:
        sample.chunk_gap_s = (chunk_times[-1] - chunk_times[0]) / (len(chunk_times) - 1)


async def sse_payloads(response: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    """The JSON payloads of an SSE stream, up to `data: [DONE]`.

    Lines split as SSE splits them (at "\n"), not as httpx's aiter_lines does: that also
    splits at U+2028, U+2029 and U+0085, which vLLM's server sends unescaped inside a text.
    """
    parser = SSEParser()
    async for chunk in response.aiter_bytes():
        for data in parser.feed(chunk):
            if data.strip() == "[DONE]":
                return
            yield json.loads(data)


def _content(event: dict[str, Any]) -> str:
    # Only choice 0: the prompt set asks for n=1. vLLM's chat stream opens with a role-only
    # chunk ("content": ""), which is not a token and must not count as the first one.
    choices = event.get("choices") or []
    if not choices:
        return ""
    choice = choices[0]
    if "delta" in choice:
        return str(choice["delta"].get("content") or "")
    return str(choice.get("text") or "")


def _finish_reason(event: dict[str, Any]) -> str | None:
    choices = event.get("choices") or []
    return choices[0].get("finish_reason") if choices else None


_COUNTER = re.compile(
    r"^vllm:spec_decode_num_(drafts|draft_tokens|accepted_tokens)_total(?:\{[^}]*\})?\s+(\S+)$",
    re.MULTILINE,
)


async def spec_counters(client: httpx.AsyncClient) -> SpecCounters:
    """vLLM's engine-wide drafting counters from /metrics, summed over label sets.

    vLLM's own server reports no per-request acceptance, so the runner reads these before and
    after a request (concurrency 1) or a pass (higher levels) and takes the difference.
    """
    response = await client.get("/metrics")
    response.raise_for_status()
    totals = {"drafts": 0.0, "draft_tokens": 0.0, "accepted_tokens": 0.0}
    for name, value in _COUNTER.findall(response.text):
        totals[name] += float(value)
    return SpecCounters(
        int(totals["drafts"]), int(totals["draft_tokens"]), int(totals["accepted_tokens"])
    )
