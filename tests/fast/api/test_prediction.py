"""Predicted Outputs over the fake engines: the field's errors, its route, its usage figures
(streamed and not); and vLLM's per-request `metrics`, checked with vLLM's own model. What the
engine counts is tests/engine_suffix/test_prediction.py's."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from vllm.entrypoints.generate.base.protocol import SpeculativeDecodingMetrics

from tests.conftest import MODEL
from tests.fast.api.test_http import assert_openai_error, chat_body
from tests.fast.api.test_streaming import sse_payloads

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
PREDICTION = {"type": "content", "content": "alpha beta gamma"}


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        (CHAT, chat_body(prediction="alpha"), "prediction"),
        (CHAT, chat_body(prediction={"type": "content", "content": ""}), "prediction"),
        (CHAT, chat_body(prediction={"type": "content", "content": []}), "prediction"),
        (CHAT, chat_body(prediction={"type": "text", "content": "a"}), "prediction"),
        (CHAT, chat_body(prediction={"type": "content"}), "prediction"),
        (CHAT, chat_body(prediction={"type": "content", "content": 5}), "prediction"),
        (CHAT, chat_body(prediction={"type": "content", "content": "a \ud800"}), "prediction"),
        (
            CHAT,
            chat_body(prediction={"type": "content", "content": [{"type": "image", "x": 1}]}),
            "prediction",
        ),
        (CHAT, chat_body(prediction=PREDICTION, n=2), "n"),
        (
            COMPLETIONS,
            {"model": MODEL, "prompt": ["a", "b"], "prediction": PREDICTION},
            "prediction",
        ),
        (COMPLETIONS, {"model": MODEL, "prompt": "a", "prediction": [1, 2]}, "prediction"),
    ],
)
async def test_a_bad_prediction_is_a_400_naming_it(
    client: httpx.AsyncClient, path: str, body: dict[str, Any], param: str
) -> None:
    # ASCII-escaped JSON, as clients send a lone surrogate.
    sent = json.dumps(body)
    response = await client.post(path, content=sent, headers={"content-type": "application/json"})
    assert_openai_error(response, 400, param)


async def test_a_prediction_in_text_parts_drafts_and_is_counted(client: httpx.AsyncClient) -> None:
    parts = {"type": "content", "content": [{"type": "text", "text": "alpha beta"}]}
    response = await client.post(CHAT, json=chat_body(prediction=parts, max_tokens=4))
    assert response.status_code == 200, response.text
    # Under auto, a prediction is evidence of predictable work: the route that drafts.
    assert response.headers["x-specgate-route"] == "speculative"
    assert response.json()["specgate"]["reason"].startswith("prediction")
    details = response.json()["usage"]["completion_tokens_details"]
    assert details["accepted_prediction_tokens"] == 2  # the fake lands its two words
    assert details["rejected_prediction_tokens"] == 0


async def test_without_drafting_a_prediction_lands_nothing(client: httpx.AsyncClient) -> None:
    response = await client.post(
        COMPLETIONS,
        json={"model": MODEL, "prompt": "one two", "max_tokens": 3, "prediction": PREDICTION},
        headers={"X-Speculative": "off"},
    )
    assert response.status_code == 200, response.text
    assert response.json()["usage"]["completion_tokens_details"] == {
        "accepted_prediction_tokens": 0,
        "rejected_prediction_tokens": 3,
        "reasoning_tokens": 0,
        "audio_tokens": 0,
    }


async def test_a_stream_reports_the_figures_in_its_usage_chunk(client: httpx.AsyncClient) -> None:
    body = chat_body(
        prediction=PREDICTION, stream=True, stream_options={"include_usage": True}, max_tokens=2
    )
    async with client.stream("POST", CHAT, json=body) as response:
        assert response.status_code == 200
        payloads = await sse_payloads(response)
    assert payloads[-1] == "[DONE]"
    usage = json.loads(payloads[-2])["usage"]
    assert usage["completion_tokens_details"]["accepted_prediction_tokens"] == 2
    assert usage["completion_tokens_details"]["rejected_prediction_tokens"] == 1


async def test_a_request_without_a_prediction_has_no_details(client: httpx.AsyncClient) -> None:
    response = await client.post(CHAT, json=chat_body())
    assert "completion_tokens_details" not in response.json()["usage"]


async def test_drafting_responses_carry_vllm_s_metrics_in_its_own_model(
    client: httpx.AsyncClient,
) -> None:
    body = chat_body(max_tokens=3)
    whole = (await client.post(CHAT, json=body, headers={"X-Speculative": "on"})).json()
    streamed = {**body, "stream": True, "stream_options": {"include_usage": True}}
    async with client.stream(
        "POST", CHAT, json=streamed, headers={"X-Speculative": "on"}
    ) as response:
        payloads = await sse_payloads(response)
    last = json.loads(payloads[-2])
    assert all("metrics" not in json.loads(p) for p in payloads[:-2])  # the usage chunk's only
    for metrics in (whole["metrics"], last["metrics"]):
        figures = SpeculativeDecodingMetrics.model_validate(metrics["speculative_decoding"])
        assert figures.num_spec_tokens == 2 and figures.acceptance_histogram == [0, 3, 0]
        assert figures.num_spec_steps == 3 and figures.num_accepted_draft_tokens == 3
        assert figures.mean_acceptance_length == 2.0 and figures.draft_acceptance_rate == 0.5
    plain = (await client.post(CHAT, json=body, headers={"X-Speculative": "off"})).json()
    assert "metrics" not in plain
    several = await client.post(CHAT, json={**body, "n": 2}, headers={"X-Speculative": "on"})
    assert "metrics" not in several.json()  # as vLLM: single-choice requests only
