"""What the picker reads of a request: the OpenAI body's prompt and sampling fields, and the
client's X-Speculative header, turned into the features specgate's classifier takes.

The picker sees the body as the client sent it, before any server has checked it: nothing
here refuses a request. A body that is not an OpenAI completion (GET /v1/models, a typo in
the JSON) reads as a request with no prompt, and still goes to an endpoint, which answers it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from app.placement.prefix_table import Prompt
from app.routing.choice_header import MalformedChoice, read_choice
from app.routing.classify import WorkloadClass, classify
from app.routing.features import RequestFeatures, extract_features
from app.routing.policy import ClientChoice

SPECULATIVE_HEADER = "x-speculative"


@dataclass(frozen=True)
class RequestFacts:
    # None: the body held no prompt (not a completion request).
    workload_class: WorkloadClass | None
    features: RequestFeatures | None
    prompt: Prompt
    max_tokens: int | None
    stream: bool
    # What the client asked with X-Speculative; None where it left the choice (auto) or
    # sent a value specgate would refuse (the endpoint says why, as it would without us).
    choice: ClientChoice | None
    # Whose drafter history the request shares (a tenant's class): cache_salt or the key.
    tenant: str | None

    @property
    def history(self) -> str | None:
        if self.workload_class is None:
            return None
        return f"{self.tenant or ''}|{self.workload_class}"


def read_request(headers: Mapping[str, str], body: bytes) -> RequestFacts:
    """`headers` with lower-case names, as HTTP/2 and Envoy give them."""
    choice = _client_choice(headers.get(SPECULATIVE_HEADER))
    tenant = _tenant(headers.get("authorization"))
    try:
        fields = json.loads(body) if body else {}
    except (UnicodeDecodeError, json.JSONDecodeError):
        fields = {}
    if not isinstance(fields, dict):
        fields = {}
    prompt, text = _prompt(fields)
    max_tokens = _whole(
        fields.get(
            "max_completion_tokens", fields.get("max_tokens", fields.get("max_output_tokens"))
        )
    )
    salt = fields.get("cache_salt")
    if isinstance(salt, str) and salt:
        tenant = f"salt:{_digest(salt)}"
    if text is None:
        return RequestFacts(None, None, prompt, max_tokens, False, choice, tenant)
    format_type = fields.get("response_format")
    wants_json = bool(fields.get("tools")) or (
        isinstance(format_type, dict) and format_type.get("type") in ("json_object", "json_schema")
    )
    features = extract_features(
        text,
        wants_json=wants_json,
        temperature=_number(fields.get("temperature")),
        top_p=_number(fields.get("top_p")),
        max_tokens=max_tokens,
    )
    stream = fields.get("stream") is True
    return RequestFacts(classify(features), features, prompt, max_tokens, stream, choice, tenant)


def _client_choice(value: str | None) -> ClientChoice | None:
    if value is None:
        return None
    try:
        choice = read_choice(value)
    except MalformedChoice:
        return None
    return None if choice.preference == "auto" and choice.draft_length is None else choice


def _prompt(fields: Mapping[str, Any]) -> tuple[Prompt, str | None]:
    """The prompt as the prefix table keys it, and the text the classifier reads (as specgate
    joins a chat's turns); (empty, None) where the body holds none."""
    messages = fields.get("messages")
    if messages is None and isinstance(fields.get("input"), list):
        messages = fields["input"]  # the Responses API's turns
    if isinstance(messages, list):
        turns = [
            {"role": str(turn.get("role", "")), "content": _text(turn.get("content"))}
            for turn in messages
            if isinstance(turn, dict)
        ]
        return turns, "\n".join(turn["content"] for turn in turns)
    prompt = fields.get("prompt", fields.get("input"))
    if isinstance(prompt, list) and prompt and all(isinstance(item, str) for item in prompt):
        prompt = prompt[0]  # several prompts: the first stands for the batch
    if isinstance(prompt, str):
        return prompt, prompt
    if isinstance(prompt, list) and prompt and all(isinstance(item, int) for item in prompt):
        return prompt, ""  # token ids: no text to classify
    return "", None


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, Mapping))
    return ""


def _whole(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _number(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return None


def _tenant(authorization: str | None) -> str | None:
    return f"key:{_digest(authorization)}" if authorization else None


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()[:16]
