"""`SamplingOptions` -> vLLM's sampling parameters, for the embedded engine and remote pools.

One table: each row is a vLLM parameter (the same name in `SamplingParams` and in the body
of vLLM's OpenAI server), how it is read from the options, the value vLLM takes for "unset",
and whether a remote route sends it. A field added to `SamplingOptions` needs a row here;
tests/fast/engine/test_sampling_table.py fails until it has one. The finish-reason mapping
both sides share is here too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from app.engine.generation import FinishReason, SamplingOptions
from app.errors import EngineFailureError


@dataclass(frozen=True)
class SamplingField:
    name: str
    read: Callable[[SamplingOptions], Any]  # None: the client left it unset
    # What vLLM takes for unset. A remote route sends rows marked `always` even when unset
    # (as `off`), the others only when set, so an upstream's own defaults stay its own.
    off: Any = None
    always: bool = False
    # Remote routes cannot serve it: their chunk decoder does not read logprobs back.
    remote: bool = True
    # The options fields the row reads, when not its own name.
    reads: tuple[str, ...] = ()


def _structured(options: SamplingOptions) -> dict[str, Any] | None:
    if options.json_schema is None:
        return None
    # {} asks for any JSON object.
    return {"json": options.json_schema} if options.json_schema else {"json_object": True}


SAMPLING_TABLE: tuple[SamplingField, ...] = (
    SamplingField("n", lambda o: o.n, always=True),
    # An absent max_tokens is the server's default (engines clamp it to the context left).
    SamplingField(
        "max_tokens",
        lambda o: o.max_tokens if o.max_tokens is not None else o.default_max_tokens,
        always=True,
        reads=("max_tokens", "default_max_tokens"),
    ),
    # The embedded engine samples at 1.0 / 1.0 when these are unset. Sending them keeps a
    # remote route from applying the model's generation_config defaults instead, so the
    # route never changes the answer.
    SamplingField("temperature", lambda o: o.temperature, off=1.0, always=True),
    SamplingField("top_p", lambda o: o.top_p, off=1.0, always=True),
    SamplingField("presence_penalty", lambda o: o.presence_penalty, always=True),
    SamplingField("frequency_penalty", lambda o: o.frequency_penalty, always=True),
    SamplingField("stop", lambda o: list(o.stop), always=True),
    SamplingField("seed", lambda o: o.seed),
    SamplingField("top_k", lambda o: o.top_k, off=0),
    SamplingField("min_p", lambda o: o.min_p, off=0.0),
    SamplingField("repetition_penalty", lambda o: o.repetition_penalty, off=1.0),
    SamplingField("logit_bias", lambda o: o.logit_bias or None),
    SamplingField("ignore_eos", lambda o: o.ignore_eos or None, off=False),
    SamplingField("structured_outputs", _structured, reads=("json_schema",)),
    SamplingField("logprobs", lambda o: o.logprobs, remote=False),
    # The prompt's own logprobs, for echo with logprobs.
    SamplingField(
        "prompt_logprobs",
        lambda o: o.logprobs if o.echo else None,
        remote=False,
        reads=("echo", "logprobs"),
    ),
)


# The options a remote route cannot serve: those its unsent rows read ("logprobs", "echo").
NOT_FORWARDED: tuple[str, ...] = tuple(
    dict.fromkeys(
        name for row in SAMPLING_TABLE if not row.remote for name in (row.reads or (row.name,))
    )
)


def engine_sampling(options: SamplingOptions) -> dict[str, Any]:
    """Keyword arguments for vLLM's `SamplingParams` (structured_outputs as a plain dict)."""
    values = {row.name: row.read(options) for row in SAMPLING_TABLE}
    return {
        row.name: row.off if values[row.name] is None else values[row.name]
        for row in SAMPLING_TABLE
    }


def remote_sampling(options: SamplingOptions) -> dict[str, Any]:
    """The sampling fields of a request body for vLLM's OpenAI server."""
    fields: dict[str, Any] = {}
    for row in SAMPLING_TABLE:
        value = row.read(options)
        if not row.remote or (value is None and not row.always):
            continue
        fields[row.name] = row.off if value is None else value
    if "logit_bias" in fields:
        # JSON object keys are strings.
        fields["logit_bias"] = {str(token): bias for token, bias in fields["logit_bias"].items()}
    return fields


def finish_reason(reason: object, where: str = "the engine") -> FinishReason | None:
    """vLLM's finish reason (either side) as the gateway's; "error" raises."""
    if reason is None:
        return None
    if reason == "error":
        raise EngineFailureError(f"{where} failed while generating")
    if reason in ("length", "abort"):
        return reason
    return "stop"  # stop, and anything else an OpenAI server may say (tool_calls, ...)
