"""The HTTP layer over the fake engine: shapes, headers, errors."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.conftest import MODEL
from tests.metrics_text import sample

CHAT = "/v1/chat/completions"


def chat_body(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "alpha beta gamma"}],
        "max_tokens": 4,
    }
    body.update(overrides)
    return body


async def test_chat_completion_shape(client: httpx.AsyncClient) -> None:
    response = await client.post(CHAT, json=chat_body())
    assert response.status_code == 200
    body = response.json()
    assert body["object"] == "chat.completion"
    assert body["id"].startswith("chatcmpl-")
    assert body["model"] == MODEL
    choice = body["choices"][0]
    assert choice["message"] == {
        "role": "assistant",
        "content": " alpha beta gamma alpha",
        "refusal": None,
    }
    assert choice["logprobs"] is None
    assert choice["finish_reason"] == "length"
    assert body["usage"] == {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}
    assert response.headers["x-request-id"] == body["id"]


async def test_completion_shape(client: httpx.AsyncClient) -> None:
    response = await client.post(
        "/v1/completions", json={"model": MODEL, "prompt": "one two", "max_tokens": 3}
    )
    assert response.status_code == 200
    body = response.json()
    assert body["object"] == "text_completion"
    assert body["choices"] == [
        {"index": 0, "text": " one two one", "logprobs": None, "finish_reason": "length"}
    ]
    assert body["usage"]["completion_tokens"] == 3


async def test_completion_defaults_to_16_tokens_like_openai(client: httpx.AsyncClient) -> None:
    response = await client.post("/v1/completions", json={"model": MODEL, "prompt": "a b"})
    assert response.json()["usage"]["completion_tokens"] == 16


async def test_max_completion_tokens_wins_over_max_tokens(client: httpx.AsyncClient) -> None:
    response = await client.post(CHAT, json=chat_body(max_tokens=9, max_completion_tokens=2))
    assert response.json()["usage"]["completion_tokens"] == 2


async def test_n_choices_and_stop(client: httpx.AsyncClient) -> None:
    response = await client.post(CHAT, json=chat_body(n=3, max_tokens=6, stop=["gamma"]))
    choices = response.json()["choices"]
    assert [c["index"] for c in choices] == [0, 1, 2]
    assert all(c["finish_reason"] == "stop" for c in choices)


@pytest.mark.parametrize(
    ("header", "route", "reason"),
    [
        ("on", "speculative", "header: X-Speculative on"),
        ("off", "plain", "header: X-Speculative off"),
    ],
)
async def test_route_follows_the_header(
    client: httpx.AsyncClient, header: str, route: str, reason: str
) -> None:
    response = await client.post(CHAT, json=chat_body(), headers={"X-Speculative": header})
    assert response.headers["x-specgate-route"] == route
    assert response.headers["x-specgate-class"] == "open-ended"
    assert response.headers["x-specgate-reason"] == reason
    info = response.json()["specgate"]
    assert info["route"] == route and info["reason"] == reason
    metrics = (await client.get("/metrics")).text
    labels = {"engine": route, "workload_class": "open-ended", "endpoint": "chat"}
    assert sample(metrics, "specgate_requests_total", **labels, outcome="ok") == 1
    decisions = "specgate_routing_decisions_total"
    assert (
        sample(metrics, decisions, workload_class="open-ended", engine=route, basis="header") == 1
    )


async def test_auto_routes_json_work_to_the_speculative_engine(client: httpx.AsyncClient) -> None:
    response = await client.post(CHAT, json=chat_body(response_format={"type": "json_object"}))
    assert response.headers["x-specgate-route"] == "speculative"
    assert response.headers["x-specgate-class"] == "structured"


async def test_speculative_responses_carry_acceptance_in_usage(client: httpx.AsyncClient) -> None:
    response = await client.post(CHAT, json=chat_body(), headers={"X-Speculative": "on"})
    spec = response.json()["usage"]["speculative_decoding"]
    assert spec == {"drafts": 4, "draft_tokens": 8, "accepted_tokens": 4, "acceptance_rate": 0.5}
    plain = await client.post(CHAT, json=chat_body(), headers={"X-Speculative": "off"})
    assert "speculative_decoding" not in plain.json()["usage"]


async def test_metrics_count_speculative_tokens(client: httpx.AsyncClient) -> None:
    await client.post(CHAT, json=chat_body(), headers={"X-Speculative": "on"})
    metrics = (await client.get("/metrics")).text
    assert sample(metrics, "specgate_spec_decode_draft_tokens_total", engine="speculative") == 8
    assert sample(metrics, "specgate_spec_decode_accepted_tokens_total", engine="speculative") == 4
    assert sample(metrics, "specgate_spec_decode_drafts_total", engine="speculative") == 4
    latency = "specgate_request_duration_seconds_count"
    assert sample(metrics, latency, endpoint="chat", engine="speculative") == 1
    # By class: the fake accepts half its drafts, one bonus token per step.
    rates = "specgate_acceptance_rate_sum"
    assert sample(metrics, rates, workload_class="open-ended") == 0.5
    lengths = "specgate_mean_accepted_length_sum"
    assert sample(metrics, lengths, workload_class="open-ended") == 2.0
    assert sample(metrics, "specgate_inter_token_latency_seconds_count", engine="speculative") == 1


async def test_models_and_health(client: httpx.AsyncClient) -> None:
    models = (await client.get("/v1/models")).json()
    assert models["object"] == "list"
    assert [m["id"] for m in models["data"]] == [MODEL]
    assert (await client.get(f"/v1/models/{MODEL}")).json()["id"] == MODEL
    health = await client.get("/health")
    assert health.status_code == 200
    assert health.json()["engines"] == {"speculative": "ok", "plain": "ok"}


def assert_openai_error(response: httpx.Response, status: int, param: str | None = None) -> None:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert isinstance(error["message"], str) and error["message"]
    assert error["code"] is None or isinstance(error["code"], str)
    if param is not None:
        assert error["param"] == param


@pytest.mark.parametrize(
    ("body", "param"),
    [
        (chat_body(messages=[]), "messages"),
        (chat_body(temperature=3), "temperature"),
        (chat_body(top_p=-1), "top_p"),
        (chat_body(max_tokens=0), "max_tokens"),
        (chat_body(n=0), "n"),
        (chat_body(messages=[{"role": "wizard", "content": "hi"}]), "messages[0].role"),
        (chat_body(stop=["a", "b", "c", "d", "e"]), None),
        (chat_body(stream_options={"include_usage": True}), None),
        (chat_body(tools=[{"type": "function", "function": {"name": "f"}}]), None),
        ({"messages": [{"role": "user", "content": "hi"}]}, "model"),
    ],
)
async def test_bad_chat_requests_get_openai_errors(
    client: httpx.AsyncClient, body: dict[str, Any], param: str | None
) -> None:
    assert_openai_error(await client.post(CHAT, json=body), 400, param)


async def test_unknown_model_is_404(client: httpx.AsyncClient) -> None:
    response = await client.post(CHAT, json=chat_body(model="gpt-9"))
    assert_openai_error(response, 404, "model")
    assert response.json()["error"]["code"] == "model_not_found"


async def test_bad_header_is_400(client: httpx.AsyncClient) -> None:
    response = await client.post(CHAT, json=chat_body(), headers={"X-Speculative": "maybe"})
    assert_openai_error(response, 400, "X-Speculative")


async def test_malformed_json_is_400(client: httpx.AsyncClient) -> None:
    response = await client.post(
        CHAT, content=b'{"model": ', headers={"content-type": "application/json"}
    )
    assert_openai_error(response, 400)


async def test_context_overflow_is_400_with_its_code(client: httpx.AsyncClient) -> None:
    response = await client.post(CHAT, json=chat_body(max_tokens=100_000))
    assert_openai_error(response, 400, "max_tokens")
    assert response.json()["error"]["code"] == "context_length_exceeded"


async def test_unknown_path_and_method(client: httpx.AsyncClient) -> None:
    assert_openai_error(await client.get("/v1/nothing"), 404)
    assert_openai_error(await client.get(CHAT), 405)


@pytest.mark.parametrize(
    "prompt", [[], ["a", "b"], ""], ids=["empty list", "two prompts", "empty string"]
)
async def test_unsupported_completion_prompts_are_400(
    client: httpx.AsyncClient, prompt: object
) -> None:
    response = await client.post("/v1/completions", json={"model": MODEL, "prompt": prompt})
    assert_openai_error(response, 400)


async def test_token_id_prompts(client: httpx.AsyncClient) -> None:
    response = await client.post(
        "/v1/completions", json={"model": MODEL, "prompt": [5, 6, 7], "max_tokens": 2}
    )
    assert response.status_code == 200
    assert response.json()["usage"]["prompt_tokens"] == 3


async def test_routing_state_shows_rules_and_what_was_learned(client: httpx.AsyncClient) -> None:
    before = (await client.get("/v1/routing")).json()
    assert before["rules"]["exploration"] == 0
    structured = before["classes"]["structured"]
    assert structured["expected_speedup"] > 1  # the CPU priors
    assert structured["speculative_samples"] == 0
    body = chat_body(response_format={"type": "json_object"})
    await client.post(CHAT, json=body, headers={"X-Speculative": "on"})
    after = (await client.get("/v1/routing")).json()["classes"]["structured"]
    assert after["speculative_samples"] == 1
    assert after["acceptance_samples"] == 1
    assert after["acceptance_rate"] == 0.5
