"""The HTTP layer over the fake engine: shapes, headers, errors."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from app.settings import Settings
from tests.conftest import MODEL, ClientFactory
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
    labels = {"route": route, "workload_class": "open-ended", "endpoint": "chat"}
    assert sample(metrics, "specgate_requests_total", **labels, outcome="ok") == 1
    decisions = "specgate_routing_decisions_total"
    assert sample(metrics, decisions, workload_class="open-ended", route=route, basis="header") == 1


# JSON asked for about material in the prompt: prompt lookup has values to copy.
EXTRACTION = [
    {
        "role": "user",
        "content": "Return the fields name, age and city of each person below as JSON.\n"
        + "Ada Lovelace, 36, London. Alan Turing, 41, Manchester. Grace Hopper, 85, "
        "Arlington. Edsger Dijkstra, 72, Nuenen. Barbara Liskov, 84, Boston.",
    }
]


async def test_auto_routes_json_work_to_the_speculative_engine(client: httpx.AsyncClient) -> None:
    body = chat_body(messages=EXTRACTION, response_format={"type": "json_object"})
    response = await client.post(CHAT, json=body)
    assert response.headers["x-specgate-route"] == "speculative"
    assert response.headers["x-specgate-class"] == "structured"
    # The same format with nothing to copy is a class of its own.
    response = await client.post(CHAT, json=chat_body(response_format={"type": "json_object"}))
    assert response.headers["x-specgate-class"] == "fresh-json"


async def test_completions_honour_response_format_as_vllm_does(
    client: httpx.AsyncClient,
) -> None:
    body = {"model": MODEL, "prompt": "a b", "max_tokens": 3}
    response = await client.post(
        "/v1/completions", json={**body, "response_format": {"type": "json_object"}}
    )
    assert response.status_code == 200, response.text
    assert response.headers["x-specgate-class"] == "fresh-json"
    bad = {**body, "response_format": {"type": "json_schema"}}
    assert_openai_error(
        await client.post("/v1/completions", json=bad), 400, "response_format.json_schema"
    )


async def test_speculative_responses_carry_acceptance_in_usage(client: httpx.AsyncClient) -> None:
    response = await client.post(CHAT, json=chat_body(), headers={"X-Speculative": "on"})
    spec = response.json()["usage"]["speculative_decoding"]
    assert spec == {"drafts": 4, "draft_tokens": 8, "accepted_tokens": 4, "acceptance_rate": 0.5}
    plain = await client.post(CHAT, json=chat_body(), headers={"X-Speculative": "off"})
    assert "speculative_decoding" not in plain.json()["usage"]


async def test_metrics_count_speculative_tokens(client: httpx.AsyncClient) -> None:
    await client.post(CHAT, json=chat_body(), headers={"X-Speculative": "on"})
    metrics = (await client.get("/metrics")).text
    assert sample(metrics, "specgate_spec_decode_draft_tokens_total", route="speculative") == 8
    assert sample(metrics, "specgate_spec_decode_accepted_tokens_total", route="speculative") == 4
    assert sample(metrics, "specgate_spec_decode_drafts_total", route="speculative") == 4
    latency = "specgate_request_duration_seconds_count"
    assert sample(metrics, latency, endpoint="chat", route="speculative") == 1
    # By class: the fake accepts half its drafts, one bonus token per step.
    rates = "specgate_acceptance_rate_sum"
    assert sample(metrics, rates, workload_class="open-ended") == 0.5
    lengths = "specgate_mean_accepted_length_sum"
    assert sample(metrics, lengths, workload_class="open-ended") == 2.0
    assert sample(metrics, "specgate_inter_token_latency_seconds_count", route="speculative") == 1


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
        (chat_body(stop=[f"s{i}" for i in range(17)]), "stop"),  # over --max-stop-sequences
        (chat_body(stream_options={"include_usage": True}), None),
        (chat_body(tool_choice="required"), "tool_choice"),
        (chat_body(function_call={"name": "f"}), "function_call"),
        ({"messages": [{"role": "user", "content": "hi"}]}, "model"),
        (chat_body(logprobs=True, top_logprobs=21), "top_logprobs"),
        (chat_body(top_logprobs=2), "top_logprobs"),
        (chat_body(logit_bias={"abc": 1}), "logit_bias"),
        (chat_body(logit_bias={"5": 101}), "logit_bias"),
        # str.isdigit() takes both, int() neither: each was a 500 (found by
        # tests/fast/api/test_fuzz.py).
        (chat_body(logit_bias={"²": 1}), "logit_bias"),
        (chat_body(logit_bias={"9" * 5000: 1}), "logit_bias"),
        # Past 64 bits vLLM cannot carry them to its engine core: a 500 (test_fuzz_real.py).
        (chat_body(seed=2**64), "seed"),
        (chat_body(seed=-(2**63) - 1), "seed"),
        (chat_body(top_k=2**63), "top_k"),
        (chat_body(top_k=-2), "top_k"),
        (chat_body(min_p=1.5), "min_p"),
        (chat_body(repetition_penalty=0), "repetition_penalty"),
        (chat_body(messages=[{"role": "user", "content": [{"type": "image_url"}]}]), None),
        (chat_body(response_format={"type": "json_schema"}), "response_format.json_schema"),
    ],
)
async def test_bad_chat_requests_get_openai_errors(
    client: httpx.AsyncClient, body: dict[str, Any], param: str | None
) -> None:
    assert_openai_error(await client.post(CHAT, json=body), 400, param)


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": MODEL, "prompt": "a", "logprobs": 21}, "logprobs"),
        ({"model": MODEL, "prompt": "a", "suffix": "b"}, "suffix"),
        ({"model": MODEL, "prompt": "a", "best_of": 3}, "best_of"),
        ({"model": MODEL, "prompt": "a", "max_tokens": -1}, "max_tokens"),
    ],
)
async def test_bad_completion_requests_get_openai_errors(
    client: httpx.AsyncClient, body: dict[str, Any], param: str
) -> None:
    assert_openai_error(await client.post("/v1/completions", json=body), 400, param)


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        (CHAT, chat_body(model="\ud800"), "model"),
        (
            CHAT,
            chat_body(messages=[{"role": "user", "content": "a \ud800"}]),
            "messages[0].content",
        ),
        (
            CHAT,
            chat_body(messages=[{"role": "user", "content": [{"type": "text", "text": "\udfff"}]}]),
            "messages[0].content",  # a union: the error names the field, not the part
        ),
        ("/v1/completions", {"model": MODEL, "prompt": "\ud800"}, "prompt"),
        ("/v1/completions", {"model": MODEL, "prompt": ["ok", "\udfff"]}, "prompt"),
        # vLLM encodes stop sequences as UTF-8: a 500 there (found by test_fuzz_real.py).
        (CHAT, chat_body(stop="\ud800"), "stop"),
        ("/v1/completions", {"model": MODEL, "prompt": "a", "stop": ["x", "\udfff"]}, "stop"),
    ],
)
async def test_lone_surrogates_are_400(
    client: httpx.AsyncClient, path: str, body: dict[str, Any], param: str
) -> None:
    # JSON may escape a lone surrogate ("\ud800"), which is no text: the routing features,
    # the tokenizer and the UTF-8 error body all failed on it, a 500 (found by test_fuzz.py).
    content = json.dumps(body).encode()  # ensure_ascii: the surrogate goes out escaped
    response = await client.post(
        path, content=content, headers={"content-type": "application/json"}
    )
    assert_openai_error(response, 400, param)


async def test_seeds_and_top_k_across_64_bits_are_accepted(client: httpx.AsyncClient) -> None:
    for seed in (2**63 - 1, -(2**63)):
        response = await client.post(CHAT, json=chat_body(seed=seed, top_k=2**63 - 1))
        assert response.status_code == 200, response.text


async def test_fields_that_change_nothing_are_accepted(client: httpx.AsyncClient) -> None:
    body = chat_body(
        user="u-1", metadata={"team": "a"}, store=False, tool_choice="none", service_tier="auto"
    )
    response = await client.post(CHAT, json=body)
    assert response.status_code == 200, response.text


async def test_body_that_is_not_an_object_is_400(client: httpx.AsyncClient) -> None:
    assert_openai_error(await client.post(CHAT, json=[chat_body()]), 400)


async def test_wrong_content_type_is_415(client: httpx.AsyncClient) -> None:
    response = await client.post(
        CHAT, content=b"model=x", headers={"content-type": "application/x-www-form-urlencoded"}
    )
    assert_openai_error(response, 415)


async def test_json_content_type_with_charset_is_accepted(client: httpx.AsyncClient) -> None:
    response = await client.post(
        CHAT,
        content=json.dumps(chat_body()).encode(),
        headers={"content-type": "application/json; charset=utf-8"},
    )
    assert response.status_code == 200, response.text


async def test_oversized_body_is_413(make_client: ClientFactory) -> None:
    client, _ = await make_client(Settings(max_request_body_bytes=1000))
    response = await client.post(
        CHAT, json=chat_body(messages=[{"role": "user", "content": "x" * 2000}])
    )
    assert_openai_error(response, 413)

    # Sent without a length up front, the body is counted as it arrives.
    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(5):
            yield b" " * 300

    response = await client.post(
        CHAT, content=chunks(), headers={"content-type": "application/json"}
    )
    assert_openai_error(response, 413)


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
    # Past the fake engine's 256-token context, within --max-tokens-limit.
    response = await client.post(CHAT, json=chat_body(max_tokens=1000))
    assert_openai_error(response, 400, "max_tokens")
    assert response.json()["error"]["code"] == "context_length_exceeded"


async def test_unknown_path_and_method(client: httpx.AsyncClient) -> None:
    assert_openai_error(await client.get("/v1/nothing"), 404)
    assert_openai_error(await client.get(CHAT), 405)


@pytest.mark.parametrize(
    "prompt",
    [[], "", [""], [[]], ["a", 1]],
    ids=["empty list", "empty string", "one empty", "empty ids", "mixed"],
)
async def test_bad_completion_prompts_are_400(client: httpx.AsyncClient, prompt: object) -> None:
    response = await client.post("/v1/completions", json={"model": MODEL, "prompt": prompt})
    assert_openai_error(response, 400, "prompt")


async def test_greedy_n_repeats_the_one_answer(client: httpx.AsyncClient) -> None:
    response = await client.post(CHAT, json=chat_body(n=3, temperature=0))
    choices = response.json()["choices"]
    assert [c["index"] for c in choices] == [0, 1, 2]
    assert len({c["message"]["content"] for c in choices}) == 1
    assert response.json()["usage"]["completion_tokens"] == 12


async def test_several_prompts_number_choices_prompt_by_prompt(client: httpx.AsyncClient) -> None:
    body = {"model": MODEL, "prompt": ["a", "b"], "n": 2, "max_tokens": 2}
    response = await client.post("/v1/completions", json=body)
    assert response.status_code == 200, response.text
    data = response.json()
    assert [(c["index"], c["text"]) for c in data["choices"]] == [
        (0, " a a"),
        (1, " a a"),
        (2, " b b"),
        (3, " b b"),
    ]
    assert data["usage"] == {"prompt_tokens": 2, "completion_tokens": 8, "total_tokens": 10}


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
    body = chat_body(messages=EXTRACTION, response_format={"type": "json_object"})
    await client.post(CHAT, json=body, headers={"X-Speculative": "on"})
    after = (await client.get("/v1/routing")).json()["classes"]["structured"]
    assert after["speculative_samples"] == 1
    assert after["acceptance_samples"] == 1
    assert after["acceptance_rate"] == 0.5


async def test_fields_vllm_cannot_draft_with_go_to_the_plain_engine(
    client: httpx.AsyncClient,
) -> None:
    response = await client.post(
        CHAT, json=chat_body(min_p=0.1, response_format={"type": "json_object"})
    )
    assert response.status_code == 200, response.text
    assert response.headers["x-specgate-route"] == "plain"
    assert response.headers["x-specgate-reason"] == "min_p: not supported while drafting"
    forced = await client.post(
        CHAT, json=chat_body(logit_bias={"5": 1}), headers={"X-Speculative": "on"}
    )
    assert_openai_error(forced, 400, "X-Speculative")
    assert "logit_bias" in forced.json()["error"]["message"]
    off = await client.post(
        CHAT, json=chat_body(logit_bias={"5": 1}), headers={"X-Speculative": "off"}
    )
    assert off.status_code == 200


async def test_top_k_goes_to_the_plain_engine(client: httpx.AsyncClient) -> None:
    # Sampling with top_k alone killed the speculative engine's core (test_fuzz_real.py).
    structured = {"response_format": {"type": "json_object"}}
    response = await client.post(CHAT, json=chat_body(top_k=40, **structured))
    assert response.headers["x-specgate-route"] == "plain"
    assert response.headers["x-specgate-reason"] == "top_k: not supported while drafting"
    forced = await client.post(CHAT, json=chat_body(top_k=40), headers={"X-Speculative": "on"})
    assert_openai_error(forced, 400, "X-Speculative")
    for off in (-1, 0):  # top_k's two spellings of "no top-k" change nothing
        response = await client.post(CHAT, json=chat_body(top_k=off, **structured))
        # The route is the learner's (which has just seen the fake plain engine's instant
        # tokens), not a refusal to draft.
        assert response.headers["x-specgate-reason"].startswith("expected speed-up")


async def test_a_body_without_content_type_is_read_as_json(client: httpx.AsyncClient) -> None:
    response = await client.post(CHAT, content=json.dumps(chat_body()).encode())
    assert response.status_code == 200, response.text


async def test_harness_sized_requests_are_served(client: httpx.AsyncClient) -> None:
    # lm-eval: the task's stop list plus the EOS string (5 for humaneval), and batch_size 64
    # prompts in one request. OpenAI allows 4 stop strings; vLLM's server has no limit.
    stops = [f"stop{i}" for i in range(16)]
    response = await client.post(
        "/v1/completions", json={"model": MODEL, "prompt": ["a b"] * 64, "stop": stops}
    )
    assert response.status_code == 200, response.text
    assert len(response.json()["choices"]) == 64
    chat = await client.post(CHAT, json=chat_body(stop=stops))
    assert chat.status_code == 200, chat.text


async def test_the_limits_are_settings_and_their_refusals_name_them(
    make_client: ClientFactory,
) -> None:
    settings = Settings(routing_exploration=0, max_stop_sequences=2, max_prompts_per_request=3)
    client, _ = await make_client(settings)
    stops = await client.post(CHAT, json=chat_body(stop=["a", "b", "c"]))
    assert_openai_error(stops, 400, "stop")
    assert "--max-stop-sequences" in stops.json()["error"]["message"]
    prompts = await client.post("/v1/completions", json={"model": MODEL, "prompt": ["a"] * 4})
    assert_openai_error(prompts, 400, "prompt")
    assert "--max-prompts-per-request" in prompts.json()["error"]["message"]
    n = await client.post(CHAT, json=chat_body(n=4))
    assert_openai_error(n, 400, "n")
    within = await client.post("/v1/completions", json={"model": MODEL, "prompt": ["a"] * 3})
    assert within.status_code == 200


def test_without_a_setting_a_request_holds_what_admission_holds_at_once() -> None:
    settings = Settings(max_running_requests=8, max_queued_requests=4)
    assert settings.max_sequences_per_request == 12
    assert Settings(max_prompts_per_request=100).max_sequences_per_request == 100
    # More than admission could ever hold at once would only wait for a 429.
    assert Settings(max_prompts_per_request=500).max_sequences_per_request == 64 + 128
