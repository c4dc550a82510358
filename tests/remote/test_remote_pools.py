"""Each route through its remote pool, with the real openai SDK, against vLLM's own answers."""

from __future__ import annotations

import time

import httpx
import pytest
from openai import BadRequestError, OpenAI

from tests.engine.prompts import CODE, JSON_CONTINUATION, MODEL
from tests.remote.conftest import Site
from tests.remote.upstream_metrics import running_requests

ROUTES = {"on": "speculative", "off": "plain"}


def upstream_of(site: Site, header: str) -> OpenAI:
    return site.client(site.speculative if header == "on" else site.plain)


def test_health_lists_both_pools(site: Site) -> None:
    health = httpx.get(f"{site.gateway.base_url}/health", timeout=10)
    assert health.status_code == 200
    assert health.json()["upstreams"] == {
        "speculative": {site.speculative.base_url: "ok"},
        "plain": {site.plain.base_url: "ok"},
    }


def test_specgate_runs_no_engine_of_its_own(site: Site) -> None:
    assert site.gateway.descendants() == []
    # ...while each upstream has its engine core under it.
    for upstream in (site.speculative, site.plain):
        processes = upstream.descendants()
        assert any("EngineCore" in " ".join(p.cmdline()) or "VLLM" in p.name() for p in processes)


@pytest.mark.parametrize("header", ["on", "off"])
def test_chat_equals_the_upstreams_own_answer(site: Site, header: str) -> None:
    kwargs = {"model": MODEL, "messages": CODE, "max_tokens": 24, "temperature": 0}
    direct = upstream_of(site, header).chat.completions.create(**kwargs)  # type: ignore[call-overload]
    raw = site.client(site.gateway).chat.completions.with_raw_response.create(
        **kwargs, extra_headers={"X-Speculative": header}
    )
    assert raw.headers["x-specgate-route"] == ROUTES[header]
    through = raw.parse()
    assert through.choices[0].message.content == direct.choices[0].message.content
    assert through.choices[0].finish_reason == direct.choices[0].finish_reason == "length"
    assert through.usage is not None and direct.usage is not None
    assert through.usage.prompt_tokens == direct.usage.prompt_tokens
    assert through.usage.completion_tokens == direct.usage.completion_tokens == 24


@pytest.mark.parametrize("header", ["on", "off"])
def test_streamed_chat_equals_the_whole_answer_and_counts_usage(site: Site, header: str) -> None:
    client = site.client(site.gateway)
    kwargs = {"model": MODEL, "messages": CODE, "max_tokens": 20, "temperature": 0,
              "extra_headers": {"X-Speculative": header}}  # fmt: skip
    whole = client.chat.completions.create(**kwargs)  # type: ignore[call-overload]
    stream = client.chat.completions.create(
        **kwargs, stream=True, stream_options={"include_usage": True}
    )  # type: ignore[call-overload]
    text, usage = "", None
    for chunk in stream:
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
        if chunk.usage is not None:
            usage = chunk.usage
    assert text == whole.choices[0].message.content
    assert usage is not None and whole.usage is not None
    assert usage.prompt_tokens == whole.usage.prompt_tokens
    assert usage.completion_tokens == whole.usage.completion_tokens == 20


@pytest.mark.parametrize("header", ["on", "off"])
def test_completions_equal_the_upstreams_own_answer(site: Site, header: str) -> None:
    kwargs = {"model": MODEL, "prompt": "def fibonacci(n):", "max_tokens": 20, "temperature": 0}
    direct = upstream_of(site, header).completions.create(**kwargs)  # type: ignore[call-overload]
    client = site.client(site.gateway)
    headers = {"X-Speculative": header}
    whole = client.completions.create(**kwargs, extra_headers=headers)  # type: ignore[call-overload]
    stream = client.completions.create(**kwargs, extra_headers=headers, stream=True)  # type: ignore[call-overload]
    streamed = "".join(chunk.choices[0].text for chunk in stream if chunk.choices)
    assert whole.choices[0].text == streamed == direct.choices[0].text
    assert whole.usage is not None and direct.usage is not None
    assert whole.usage.prompt_tokens == direct.usage.prompt_tokens
    assert whole.usage.completion_tokens == direct.usage.completion_tokens == 20


def test_token_id_prompts_and_the_routes_agree(site: Site) -> None:
    client = site.client(site.gateway)
    tokens = [504, 3458, 288, 253, 1345, 30, 216, 198]
    texts = set()
    for header in ("on", "off"):
        completion = client.completions.create(
            model=MODEL, prompt=tokens, max_tokens=8, temperature=0,
            extra_headers={"X-Speculative": header},
        )  # fmt: skip
        assert completion.usage is not None and completion.usage.prompt_tokens == len(tokens)
        texts.add(completion.choices[0].text)
    assert len(texts) == 1  # both pools run the same model in the same dtype


def test_the_speculative_route_reports_the_upstreams_acceptance(site: Site) -> None:
    completion = site.client(site.gateway).completions.create(
        model=MODEL, prompt=JSON_CONTINUATION, max_tokens=32, temperature=0,
        extra_headers={"X-Speculative": "on"},
    )  # fmt: skip
    assert completion.usage is not None
    spec = completion.usage.model_extra["speculative_decoding"]  # type: ignore[index]
    # The continuation copies its prompt: prompt lookup drafts, and some drafts are accepted.
    assert spec["drafts"] > 0
    assert 0 < spec["accepted_tokens"] <= spec["draft_tokens"]


def test_an_upstream_refusal_is_a_400_with_its_message(site: Site) -> None:
    response = httpx.post(
        f"{site.gateway.base_url}/v1/chat/completions",
        # Past the upstream's 8192-token context, within the gateway's --max-tokens-limit.
        json={"model": MODEL, "messages": CODE, "max_tokens": 9000},
        headers={"X-Speculative": "off"},
        timeout=60,
    )
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["param"] == "max_tokens" and "9000" in error["message"]


def test_a_client_disconnect_frees_the_upstream_request(site: Site) -> None:
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "Write a very long story about a ship."}],
        "max_tokens": 1500,
        "stream": True,
    }
    with httpx.stream(
        "POST",
        f"{site.gateway.base_url}/v1/chat/completions",
        json=body,
        headers={"X-Speculative": "off"},
        timeout=120,
    ) as response:
        lines = response.iter_lines()
        received = [next(lines) for _ in range(6)]
        assert any(line.startswith("data: {") for line in received)
        assert running_requests(site.plain) == 1
    deadline = time.monotonic() + 15
    while running_requests(site.plain) != 0 or site.gateway.metric(
        "specgate_engine_unfinished_requests", route="plain"
    ):
        assert time.monotonic() < deadline, "the upstream kept generating for a departed client"
        time.sleep(0.2)


def test_a_harness_batch_of_64_prompts(site: Site) -> None:
    # lm-eval's local-completions at batch_size 64: one request, every prompt. vLLM 0.32's own
    # server takes at most 4 stop strings, so a remote route does too (its 400 is passed on).
    stops = ["<stop1>", "<stop2>", "Question:", "\n\n"]
    prompts = [f"Question: What is {i} plus 1?\nAnswer:" for i in range(64)]
    completion = site.client(site.gateway).completions.create(
        model=MODEL, prompt=prompts, max_tokens=4, temperature=0, stop=stops
    )
    assert sorted(choice.index for choice in completion.choices) == list(range(64))


def test_the_tokenizer_helpers_are_the_upstreams(site: Site) -> None:
    body = {"model": MODEL, "prompt": "def add(a, b):"}
    ours = httpx.post(f"{site.gateway.base_url}/tokenize", json=body, timeout=30).json()
    theirs = httpx.post(f"{site.plain.base_url}/tokenize", json=body, timeout=30).json()
    assert ours["tokens"] == theirs["tokens"] and ours["count"] > 0
    text = httpx.post(f"{site.gateway.base_url}/detokenize", json={"tokens": ours["tokens"]})
    assert text.json() == {"prompt": "def add(a, b):"}


def test_an_agent_turn_with_the_default_tool_choice(site: Site) -> None:
    # No template at hand on remote routes: specgate's envelope, constrained upstream.
    tool = {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string", "maxLength": 40}},
        "required": ["city"]}}}  # fmt: skip
    question = [{"role": "user", "content": "What is the weather in Paris?"}]
    choice = (
        site.client(site.gateway)
        .chat.completions.create(
            model=MODEL,
            messages=question,
            tools=[tool],
            max_tokens=200,
            temperature=0,  # type: ignore[list-item]
        )
        .choices[0]
    )
    # The upstream's structured outputs may let the model pad past the envelope's end (it
    # ran to the limit here), so a complete call can come with "length".
    assert choice.finish_reason in ("tool_calls", "length"), choice
    calls = choice.message.tool_calls or []
    assert calls and all(call.function.name == "get_weather" for call in calls)  # type: ignore[union-attr]


def test_a_prediction_is_refused_by_name_before_any_upstream(site: Site) -> None:
    # vLLM's servers would drop the field without a word: the gateway says so instead.
    client = site.client(site.gateway)
    prediction = {"type": "content", "content": "def add(a, b):\n    return a + b\n"}
    with pytest.raises(BadRequestError) as refused:
        client.chat.completions.create(
            model=MODEL,
            messages=CODE,
            max_tokens=8,
            prediction=prediction,  # type: ignore[arg-type]
        )
    assert refused.value.status_code == 400
    error = refused.value.body
    assert isinstance(error, dict) and error["param"] == "prediction", error
    assert "not supported by remote upstreams" in error["message"], error
    # Without it the same request is served.
    served = client.chat.completions.create(model=MODEL, messages=CODE, max_tokens=8)
    assert served.choices[0].message.content
