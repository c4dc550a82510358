"""Fields and models shared by the chat and completions APIs."""

from __future__ import annotations

import re
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)

# Shared field definitions, so both endpoints validate sampling the same way.
MaxTokensField = Field(None, ge=1, description="Upper bound on generated tokens.")
TemperatureField = Field(None, ge=0, le=2, description="Sampling temperature; 0 is greedy.")
TopPField = Field(None, ge=0, le=1, description="Nucleus sampling mass.")
PenaltyField = Field(None, ge=-2, le=2)
# vLLM hands integers to its engine core as msgpack, which holds 64 bits: a larger seed or
# top_k failed there (a 500) and left the request counted as unfinished for good.
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
SeedField = Field(None, ge=INT64_MIN, le=INT64_MAX, description="Seed for reproducible sampling.")
NField = Field(1, ge=1, le=16, description="How many choices to generate.")
StopField = Field(None, description="Up to 4 sequences that end generation.")
# The engine's limit on alternatives per token (vLLM's max_logprobs).
MAX_LOGPROBS = 20

_SURROGATE = re.compile("[\ud800-\udfff]")


def _unicode_text(value: str) -> str:
    # JSON can escape a lone surrogate ("\ud800"), which is not text: the tokenizer and the
    # UTF-8 response writer both fail on one (a 500 before this check), so it is a 400 here.
    if _SURROGATE.search(value):
        raise ValueError("must be valid Unicode text, without lone surrogates such as \\ud800")
    return value


# Client text that reaches the model, a response or an error message.
Text = Annotated[str, AfterValidator(_unicode_text)]
# Stop sequences go to the engine's detokenizer, which encodes them as UTF-8.
Stop = Text | list[Text] | None


def is_none(value: object) -> bool:
    """For `exclude_if`: fields OpenAI leaves out rather than send as null."""
    return value is None


class FieldError(ValueError):
    """A check across fields failed; `param` names the field the client should fix."""

    def __init__(self, param: str, problem: str) -> None:
        super().__init__(f"'{param}' {problem}")
        self.param = param


def _token_id(key: str) -> int | None:
    """A logit_bias key as a token id, or None if it is not one."""
    key = key.strip()
    # str.isdigit() alone passes "²", which int() refuses, and int() refuses numbers of over
    # 4300 digits: both were a 500. No vocabulary reaches 19 digits.
    if not (key.isascii() and key.isdigit()) or len(key) > 18:
        return None
    return int(key)


class StreamOptions(BaseModel):
    include_usage: bool = False
    continuous_usage_stats: bool = Field(
        False,
        description="vLLM extension: with include_usage, every chunk carries the usage so far.",
    )


class JsonSchemaFormat(BaseModel):
    name: str = "response"
    schema_: dict[str, Any] = Field(default_factory=dict, alias="schema")
    strict: bool | None = None


class ResponseFormat(BaseModel):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None

    @model_validator(mode="after")
    def _schema_when_needed(self) -> ResponseFormat:
        if self.type == "json_schema" and self.json_schema is None:
            raise FieldError("response_format.json_schema", "is required for type json_schema")
        return self


class TextPart(BaseModel):
    type: Literal["text"]
    text: Text


def joined_text(content: str | list[TextPart] | None) -> str:
    """Content given as a string or as text parts, as one string ("" for none)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(part.text for part in content)


class PredictionContent(BaseModel):
    """OpenAI's Predicted Outputs: text the answer will mostly be (a file to regenerate with a
    small change). Drafts for its own request where the engine drafts; the answer is the
    model's either way."""

    type: Literal["content"]
    content: Text | list[TextPart]

    def text(self) -> str:
        return joined_text(self.content)


def _prediction(value: object) -> PredictionContent | None:
    # Every fault in the field is reported as OpenAI reports it: param "prediction".
    if value is None:
        return None
    try:
        prediction = PredictionContent.model_validate(value)
    except ValidationError as exc:
        problem = exc.errors()[0].get("msg", "is malformed")
        raise FieldError(
            "prediction",
            f'must be {{"type": "content", "content": text or text parts}} ({problem})',
        ) from None
    if not prediction.text():
        raise FieldError("prediction", "content must not be empty")
    return prediction


class RequestBase(BaseModel):
    """Fields and checks common to chat and completion requests."""

    # Clients send many optional fields; unknown ones are ignored, known unsupported ones refused.
    model_config = ConfigDict(extra="allow")
    # Known OpenAI fields this server cannot honour: refused unless null/false/empty.
    unsupported_fields: ClassVar[tuple[str, ...]] = ()

    model: Text
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int = NField
    temperature: float | None = TemperatureField
    top_p: float | None = TopPField
    presence_penalty: float | None = PenaltyField
    frequency_penalty: float | None = PenaltyField
    seed: int | None = SeedField
    stop: Stop = StopField
    logit_bias: dict[str, float] | None = Field(
        None, description="Token id -> bias in [-100, 100] added to its logit."
    )
    user: str | None = None
    # vLLM's sampling extensions.
    top_k: int | None = Field(
        None, ge=-1, le=INT64_MAX, description="vLLM extension: sample from the k best."
    )
    min_p: float | None = Field(
        None, ge=0, le=1, description="vLLM extension: drop tokens below min_p x the best."
    )
    repetition_penalty: float | None = Field(
        None, gt=0, le=2, description="vLLM extension: >1 discourages repeating tokens."
    )
    ignore_eos: bool = Field(
        False,
        description="vLLM extension: go on past the end-of-sequence token, up to max_tokens "
        "(for benchmarks that need an exact length).",
    )
    cache_salt: str | None = Field(
        None,
        max_length=256,
        description="vLLM extension: whose work this request may share. Suffix drafting "
        "draws only on earlier answers with the same salt (by default the same API key).",
    )
    # OpenAI's chat field; on completions a vLLM extension, honoured the same way.
    response_format: ResponseFormat | None = None
    # OpenAI's chat field (Predicted Outputs); on completions a specgate extension, the same.
    prediction: Annotated[PredictionContent | None, BeforeValidator(_prediction)] = Field(
        None,
        description="Text the answer will mostly be: drafts for this request where the engine "
        "drafts (usage.completion_tokens_details says how much of it landed).",
    )

    @model_validator(mode="after")
    def _check_common(self) -> RequestBase:
        if self.stream_options is not None and not self.stream:
            raise FieldError("stream_options", "is only allowed when stream is true")
        if self.prediction is not None and self.n > 1:
            raise FieldError("n", "greater than 1 is not supported with prediction")
        # How many stop strings a request may hold is the server's setting (the gateway checks
        # it): OpenAI allows 4, vLLM any number, and lm-eval sends 5 for some tasks.
        stops = [self.stop] if isinstance(self.stop, str) else (self.stop or [])
        if any(not s for s in stops):
            raise FieldError("stop", "sequences must not be empty")
        for token, bias in (self.logit_bias or {}).items():
            if _token_id(token) is None:
                raise FieldError("logit_bias", f"keys must be token ids, got {token!r}")
            if not -100 <= bias <= 100:
                raise FieldError("logit_bias", f"values must lie in [-100, 100], got {bias}")
        for name in self.unsupported_fields:
            value = (self.model_extra or {}).get(name)
            if value not in (None, False, [], {}):
                raise FieldError(name, "is not supported by this server")
        return self

    def json_schema(self) -> dict[str, Any] | None:
        """The structured-output constraint: a schema, {} for any JSON object, None for text."""
        if self.response_format is None or self.response_format.type == "text":
            return None
        if self.response_format.json_schema is not None:
            return self.response_format.json_schema.schema_
        return {}

    def token_biases(self) -> dict[int, float] | None:
        if not self.logit_bias:
            return None
        # Every key passed _token_id in validation.
        return {int(token): bias for token, bias in self.logit_bias.items()}

    def stop_sequences(self) -> tuple[str, ...]:
        if self.stop is None:
            return ()
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)


class SpeculativeUsage(BaseModel):
    """Acceptance figures of a response served by the speculative engine."""

    drafts: int = Field(description="Verification steps that checked a draft.")
    draft_tokens: int = Field(description="Tokens the drafter proposed.")
    accepted_tokens: int = Field(description="Proposed tokens the target model accepted.")
    acceptance_rate: float = Field(description="accepted_tokens / draft_tokens (0 if none).")
    draft_lengths: list[int] | None = Field(
        None,
        description="Verification steps by draft length: element i counts the steps that "
        "checked i+1 draft tokens (an embedded engine chooses the length per step).",
        exclude_if=is_none,
    )


class CompletionTokensDetails(BaseModel):
    """OpenAI's breakdown of the completion's tokens; sent when the request brought a
    prediction. Counting rule (docs/api.md): a prediction token is accepted when the engine
    drafted it from the prediction and the answer produced it at that place; every other
    token of the prediction is rejected."""

    accepted_prediction_tokens: int = 0
    rejected_prediction_tokens: int = 0
    reasoning_tokens: int = 0
    audio_tokens: int = 0


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    completion_tokens_details: CompletionTokensDetails | None = Field(None, exclude_if=is_none)
    speculative_decoding: SpeculativeUsage | None = Field(
        None,
        description="specgate extension: present when the speculative engine served.",
        exclude_if=is_none,
    )


class SpeculativeDecodingMetrics(BaseModel):
    """vLLM 0.32's per-request speculation figures (`metrics.speculative_decoding`, its
    SpeculativeDecodingMetrics), for clients that read vLLM's (AIPerf's per-request columns)."""

    mean_acceptance_length: float = Field(description="Tokens per verify step, bonus included.")
    draft_acceptance_rate: float
    acceptance_histogram: list[int] = Field(
        description="Element j: verify steps that accepted exactly j drafts (0..K)."
    )
    num_spec_steps: int
    num_accepted_draft_tokens: int
    num_draft_tokens: int
    num_spec_tokens: int = Field(description="The engine's K.")


class RequestMetrics(BaseModel):
    """vLLM's per-request `metrics` object: its speculation figures, on a response a drafting
    engine served (single-choice requests; on a stream, the usage chunk), as vLLM sends it."""

    speculative_decoding: SpeculativeDecodingMetrics | None = Field(None, exclude_if=is_none)


class RouteSegment(BaseModel):
    """specgate extension: one engine's share of a request that may move mid-stream."""

    route: Literal["speculative", "plain"]
    tokens: int
    reason: str


class RouteInfo(BaseModel):
    """specgate extension: which engine served the request, and why."""

    route: Literal["speculative", "plain"]
    workload_class: str
    reason: str
    speculative_decoding: SpeculativeUsage | None = None
    # What vLLM's ngram drafter would have drafted and accepted for this output, replayed
    # by the gateway from the token ids (either route; engines that expose token ids).
    shadow_drafting: SpeculativeUsage | None = None
    # For a request that could move between engines: where each part of it ran, and why.
    # `route` above is where it started (the x-specgate-route header's value).
    segments: list[RouteSegment] | None = None


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None = Field(description="The request field at fault, if one is.")
    code: str | None = Field(description="A machine-readable code; a string or null.")


class ErrorResponse(BaseModel):
    """OpenAI's error body, sent with every 4xx and 5xx status."""

    error: ErrorDetail
