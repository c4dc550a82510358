"""Predicted Outputs on the real engine (one engine, suffix drafting), with the real `openai`
SDK's `prediction=` argument: answers are token for token those without a prediction, a
right prediction is verified many tokens a step, and the usage figures follow the counting
rule (docs/api.md) on a prediction that is half right. Every request names a cache_salt of
its own: the keys' own trees are test_tenants.py's, which compares what they draft."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from openai import OpenAI

from tests.engine.prompts import CODE, MODEL
from tests.engine.server import ServerProcess
from tests.engine_suffix.conftest import KEYS, client_for
from tests.engine_suffix.test_answers import REQUESTS

UNRELATED = (
    "\nThe river bends twice before the old mill, where herons wait in the reeds and the "
    "ferry bell rings at noon for travellers heading north across the valley."
)


def predicted_chat(
    client: OpenAI, header: str, body: dict[str, Any], prediction: str | None, salt: str
) -> tuple[str, dict[str, Any]]:
    """The answer as the client sees it (text, or the calls' names and arguments) and its
    usage."""
    extra = {"prediction": {"type": "content", "content": prediction}} if prediction else {}
    completion = client.chat.completions.create(
        model=MODEL,
        temperature=0,
        extra_headers={"X-Speculative": header},
        extra_body={"cache_salt": salt},
        **body,
        **extra,
    )
    message = completion.choices[0].message
    calls = [(call.function.name, call.function.arguments) for call in message.tool_calls or []]
    assert completion.usage is not None
    return json.dumps([message.content, calls]), completion.usage.model_dump()


def raw_text(answer: str) -> str:
    """What the model wrote: the content, or the calls' arguments (near the envelope)."""
    content, calls = json.loads(answer)
    return content if content else "".join(arguments for _, arguments in calls)


@pytest.mark.parametrize("kind", sorted(REQUESTS))
def test_greedy_answers_with_a_prediction_are_those_without(
    server: ServerProcess, kind: str
) -> None:
    client = client_for(server, KEYS[0])
    body = REQUESTS[kind]
    plain, _ = predicted_chat(client, "off", body, None, f"prediction-{kind}-off")
    text = raw_text(plain)
    half = text[: len(text) // 2]
    for name, prediction in {"right": text, "half right": half + UNRELATED}.items():
        answer, usage = predicted_chat(
            client, "auto", body, prediction, f"prediction-{kind}-{name}"
        )
        assert answer == plain, (kind, name)
        details = usage["completion_tokens_details"]
        assert details["accepted_prediction_tokens"] + details["rejected_prediction_tokens"] > 0


def tokens(server: ServerProcess, text: str) -> list[int]:
    answer = httpx.post(
        f"{server.base_url}/tokenize",
        json={"model": MODEL, "prompt": text, "add_special_tokens": False},
        headers={"Authorization": f"Bearer {KEYS[0]}"},
        timeout=60,
    )
    answer.raise_for_status()
    return list(answer.json()["tokens"])


def test_a_right_prediction_is_verified_many_tokens_a_step(server: ServerProcess) -> None:
    client = client_for(server, KEYS[1])
    body = {"messages": CODE, "max_tokens": 64}
    plain, _ = predicted_chat(client, "off", body, None, "verified-off")
    text = raw_text(plain)
    answer, usage = predicted_chat(client, "on", body, text, "verified-on")
    assert answer == plain
    spec = usage["speculative_decoding"]
    produced = usage["completion_tokens"]
    # The first token comes from the prompt's pass; the rest in steps of up to K + 1.
    assert spec["drafts"] <= produced / 4, spec
    assert spec["accepted_tokens"] >= produced / 2, spec
    details = usage["completion_tokens_details"]
    assert details["accepted_prediction_tokens"] >= len(tokens(server, text)) - 2, details


def test_a_half_right_prediction_is_counted_by_the_rule(server: ServerProcess) -> None:
    client = client_for(server, KEYS[1])
    body = {"messages": CODE, "max_tokens": 64}
    plain, _ = predicted_chat(client, "off", body, None, "counted-off")
    text = raw_text(plain)
    # The right part ends at a line's end where the answer's tokens and the prediction's
    # agree (not inside a "\n\n" the answer writes as one token).
    answer_tokens = tokens(server, text)
    for cut in (i + 1 for i, c in enumerate(text) if c == "\n" and i >= len(text) // 3):
        prediction = text[:cut] + UNRELATED.lstrip("\n")
        right = tokens(server, text[:cut])
        if answer_tokens[: len(right)] == right == tokens(server, prediction)[: len(right)]:
            break
    else:
        raise AssertionError(f"no line end to cut the answer at: {text!r}")
    right_tokens, whole = len(right), len(tokens(server, prediction))
    assert 0 < right_tokens < whole
    answer, usage = predicted_chat(client, "on", body, prediction, "counted-on")
    assert answer == plain
    details = usage["completion_tokens_details"]
    # Every token of the right half lands at its place (the first from the prompt's pass,
    # the rest as drafts); the unrelated rest lands nowhere.
    assert details["accepted_prediction_tokens"] == right_tokens, (details, right_tokens, whole)
    assert details["rejected_prediction_tokens"] == whole - right_tokens
    # Never drafting, the same prediction lands nothing.
    _, usage = predicted_chat(client, "off", body, prediction, "counted-never")
    assert usage["completion_tokens_details"]["accepted_prediction_tokens"] == 0
    assert usage["completion_tokens_details"]["rejected_prediction_tokens"] == whole


def test_a_streamed_completion_with_a_prediction_is_the_unpredicted_one(
    server: ServerProcess,
) -> None:
    client = client_for(server, KEYS[0])
    prompt = "def fibonacci(n):\n"
    common: dict[str, Any] = {"model": MODEL, "prompt": prompt, "max_tokens": 48, "temperature": 0}
    plain = client.completions.create(
        **common, extra_headers={"X-Speculative": "off"}, extra_body={"cache_salt": "streamed-off"}
    )
    text = plain.choices[0].text
    stream = client.completions.create(
        **common,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={
            "prediction": {"type": "content", "content": text},
            "cache_salt": "streamed-on",
        },
    )
    chunks = list(stream)
    assert "".join(c.choices[0].text for c in chunks if c.choices) == text
    usage = chunks[-1].usage
    assert usage is not None and usage.completion_tokens == plain.usage.completion_tokens  # type: ignore[union-attr]
    details = usage.completion_tokens_details
    assert details is not None and details.accepted_prediction_tokens is not None
    assert details.accepted_prediction_tokens > usage.completion_tokens / 2, details


def test_the_sdk_s_prediction_argument_and_its_usage_details(server: ServerProcess) -> None:
    client = client_for(server, KEYS[0])
    plain = client.chat.completions.create(
        model=MODEL,
        messages=CODE,  # type: ignore[arg-type]
        max_tokens=32,
        temperature=0,
        extra_body={"cache_salt": "sdk-plain"},
    )
    text = plain.choices[0].message.content or ""
    predicted = client.chat.completions.create(
        model=MODEL,
        messages=CODE,  # type: ignore[arg-type]
        max_tokens=32,
        temperature=0,
        prediction={"type": "content", "content": text},
        extra_body={"cache_salt": "sdk-predicted"},
    )
    assert predicted.choices[0].message.content == text
    assert predicted.usage is not None and predicted.usage.completion_tokens_details is not None
    details = predicted.usage.completion_tokens_details
    assert details.accepted_prediction_tokens and details.accepted_prediction_tokens > 0
    assert details.rejected_prediction_tokens is not None
