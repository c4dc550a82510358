"""OpenAI conformance on the real engines: every request feature, streamed and not.

Every body and chunk is checked against OpenAI's published schema (tests/openai_schema.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from transformers import AutoTokenizer

from tests.engine.prompts import CODE, MODEL
from tests.engine.server import ServerProcess
from tests.engine.wire import call, finish_reasons, refused, stream, streamed_texts
from tests.openai_schema import ERROR, MODEL_OBJECT, MODELS, violations

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
ROUTES = [pytest.param("on", id="speculative"), pytest.param("off", id="plain")]


def chat(**fields: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": CODE, "max_tokens": 8, "temperature": 0, **fields}


def completion(**fields: Any) -> dict[str, Any]:
    return {"model": MODEL, "prompt": "def add(a, b):", "max_tokens": 8, "temperature": 0, **fields}


@pytest.fixture(scope="module")
def tokenizer(model_dir: Path) -> Any:
    return AutoTokenizer.from_pretrained(model_dir)


@pytest.mark.parametrize("route", ROUTES)
def test_plain_requests_conform_on_both_engines(server: ServerProcess, route: str) -> None:
    whole = call(server, CHAT, chat(), **{"X-Speculative": route})
    chunks = stream(server, CHAT, chat(), **{"X-Speculative": route})
    assert streamed_texts(chunks, chat=True)[0] == whole["choices"][0]["message"]["content"]
    assert "system_fingerprint" not in whole
    text = call(server, COMPLETIONS, completion(), **{"X-Speculative": route})
    chunks = stream(server, COMPLETIONS, completion(), **{"X-Speculative": route})
    assert streamed_texts(chunks, chat=False)[0] == text["choices"][0]["text"]


def test_n_choices_each_finish(server: ServerProcess) -> None:
    body = chat(n=3, temperature=1.0, seed=7)
    whole = call(server, CHAT, body)
    assert [c["index"] for c in whole["choices"]] == [0, 1, 2]
    assert all(c["finish_reason"] == "length" for c in whole["choices"])
    assert whole["usage"]["completion_tokens"] == 24
    chunks = stream(server, COMPLETIONS, completion(n=3, temperature=1.0, seed=7))
    assert finish_reasons(chunks) == {0: "length", 1: "length", 2: "length"}


@pytest.mark.parametrize("as_list", [False, True], ids=["string", "list"])
def test_stop_ends_output_before_the_stop_text(server: ServerProcess, as_list: bool) -> None:
    free = call(server, COMPLETIONS, completion(max_tokens=16))["choices"][0]["text"]
    word = free.split()[2]
    stop: Any = [word, "never-there"] if as_list else word
    cut = call(server, COMPLETIONS, completion(max_tokens=16, stop=stop))["choices"][0]
    assert cut["finish_reason"] == "stop"
    assert cut["text"] == free[: free.index(word)]
    chunks = stream(server, CHAT, chat(max_tokens=16, stop=stop))
    assert finish_reasons(chunks)[0] in ("stop", "length")
    assert word not in streamed_texts(chunks, chat=True)[0]


def test_seed_makes_sampling_repeatable(server: ServerProcess) -> None:
    body = completion(temperature=1.0, seed=1234, max_tokens=12)
    first = call(server, COMPLETIONS, body)["choices"][0]["text"]
    assert call(server, COMPLETIONS, body)["choices"][0]["text"] == first


def test_sampling_fields_and_vllm_extensions(server: ServerProcess) -> None:
    fields = {
        "temperature": 0.8,
        "top_p": 0.9,
        "top_k": 20,
        "min_p": 0.05,
        "repetition_penalty": 1.2,
        "presence_penalty": 0.5,
        "frequency_penalty": 0.5,
        "seed": 3,
    }
    assert call(server, CHAT, chat(**fields))["usage"]["completion_tokens"] == 8
    assert finish_reasons(stream(server, COMPLETIONS, completion(**fields))) == {0: "length"}


def test_logit_bias_forces_a_token(server: ServerProcess, tokenizer: Any) -> None:
    (token_id,) = tokenizer.encode(" banana")
    forced = tokenizer.decode([token_id]) * 3
    body = completion(logit_bias={str(token_id): 100}, max_tokens=3)
    assert call(server, COMPLETIONS, body)["choices"][0]["text"] == forced
    chunks = stream(server, CHAT, chat(logit_bias={str(token_id): 100}, max_tokens=3))
    assert streamed_texts(chunks, chat=True)[0] == forced


def test_max_tokens_and_max_completion_tokens(server: ServerProcess) -> None:
    assert call(server, CHAT, chat(max_tokens=5))["usage"]["completion_tokens"] == 5
    body = chat(max_tokens=9, max_completion_tokens=3)
    assert call(server, CHAT, body)["usage"]["completion_tokens"] == 3


@pytest.mark.parametrize("route", ROUTES)
def test_chat_logprobs(server: ServerProcess, route: str) -> None:
    body = chat(logprobs=True, top_logprobs=3)
    whole = call(server, CHAT, body, **{"X-Speculative": route})
    choice = whole["choices"][0]
    content = choice["logprobs"]["content"]
    assert len(content) == whole["usage"]["completion_tokens"]
    assert "".join(entry["token"] for entry in content) == choice["message"]["content"]
    for entry in content:
        assert len(entry["top_logprobs"]) == 3
        # Greedy: the chosen token is the most likely one.
        assert entry["logprob"] == pytest.approx(entry["top_logprobs"][0]["logprob"], abs=1e-4)
    chunks = stream(server, CHAT, body, **{"X-Speculative": route})
    streamed = [e for c in chunks for ch in c["choices"] for e in ch["logprobs"]["content"]]
    assert [e["token"] for e in streamed] == [e["token"] for e in content]
    plain = call(server, CHAT, chat(logprobs=True))["choices"][0]["logprobs"]["content"]
    assert all(entry["top_logprobs"] == [] for entry in plain)


@pytest.mark.parametrize("route", ROUTES)
def test_completion_logprobs(server: ServerProcess, route: str) -> None:
    whole = call(server, COMPLETIONS, completion(logprobs=2), **{"X-Speculative": route})
    choice = whole["choices"][0]
    logprobs = choice["logprobs"]
    assert "".join(logprobs["tokens"]) == choice["text"]
    assert len(logprobs["token_logprobs"]) == whole["usage"]["completion_tokens"]
    assert all(len(top) == 2 for top in logprobs["top_logprobs"])
    offsets = [sum(len(t) for t in logprobs["tokens"][:i]) for i in range(len(logprobs["tokens"]))]
    assert logprobs["text_offset"] == offsets
    chunks = stream(server, COMPLETIONS, completion(logprobs=2), **{"X-Speculative": route})
    streamed = [ch["logprobs"] for c in chunks for ch in c["choices"]]
    assert [t for part in streamed for t in part["tokens"]] == logprobs["tokens"]
    assert [o for part in streamed for o in part["text_offset"]] == offsets


def test_echo(server: ServerProcess) -> None:
    body = completion(echo=True)
    whole = call(server, COMPLETIONS, body)["choices"][0]["text"]
    assert whole.startswith("def add(a, b):") and len(whole) > len("def add(a, b):")
    assert streamed_texts(stream(server, COMPLETIONS, body), chat=False)[0] == whole


def test_echo_with_logprobs_covers_the_prompt(server: ServerProcess, tokenizer: Any) -> None:
    body = completion(echo=True, logprobs=1, max_tokens=4)
    response = httpx.post(f"{server.base_url}{COMPLETIONS}", json=body, timeout=300)
    assert response.status_code == 200, response.text
    choice = response.json()["choices"][0]
    logprobs = choice["logprobs"]
    prompt_tokens = len(tokenizer.encode("def add(a, b):"))
    assert len(logprobs["tokens"]) == prompt_tokens + 4
    assert "".join(logprobs["tokens"]) == choice["text"]
    # As OpenAI does, the first prompt token, which nothing predicts, has null logprobs.
    assert logprobs["token_logprobs"][0] is None and logprobs["top_logprobs"][0] is None
    assert all(isinstance(value, float) for value in logprobs["token_logprobs"][1:])


@pytest.mark.parametrize(
    "prompt",
    [
        ["def add(a, b):", "The capital of France is"],
        [[504, 3725, 30], [504, 3725, 30, 9080]],
        [504, 3725, 30],
    ],
    ids=["strings", "token lists", "token ids"],
)
def test_prompt_forms(server: ServerProcess, prompt: Any) -> None:
    count = len(prompt) if isinstance(prompt[0], (str, list)) else 1
    body = completion(prompt=prompt, n=2, max_tokens=4)
    whole = call(server, COMPLETIONS, body)
    assert [c["index"] for c in whole["choices"]] == list(range(2 * count))
    assert whole["usage"]["completion_tokens"] == 8 * count
    chunks = stream(server, COMPLETIONS, {**body, "stream_options": {"include_usage": True}})
    assert finish_reasons(chunks) == dict.fromkeys(range(2 * count), "length")
    counts = ("prompt_tokens", "completion_tokens", "total_tokens")
    assert [chunks[-1]["usage"][k] for k in counts] == [whole["usage"][k] for k in counts]


def test_several_prompts_each_get_their_own_continuation(server: ServerProcess) -> None:
    prompts = ["def add(a, b):", "The capital of France is"]
    together = call(server, COMPLETIONS, completion(prompt=prompts))["choices"]
    alone = [call(server, COMPLETIONS, completion(prompt=p))["choices"][0] for p in prompts]
    assert [c["text"] for c in together] == [c["text"] for c in alone]


@pytest.mark.parametrize("route", ROUTES)
def test_response_formats(server: ServerProcess, route: str) -> None:
    header = {"X-Speculative": route}
    text = call(server, CHAT, chat(response_format={"type": "text"}), **header)
    assert text["choices"][0]["message"]["content"]
    json_object = chat(
        messages=[{"role": "user", "content": 'Reply with the JSON object {"ok": true}.'}],
        max_tokens=120,
        response_format={"type": "json_object"},
    )
    parsed = json.loads(
        call(server, CHAT, json_object, **header)["choices"][0]["message"]["content"]
    )
    assert isinstance(parsed, dict)
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string", "maxLength": 10}, "age": {"type": "integer"}},
        "required": ["name", "age"],
        "additionalProperties": False,
    }
    body = chat(
        messages=[{"role": "user", "content": "Invent a person."}],
        max_tokens=120,
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "person", "schema": schema},
        },
    )
    streamed = streamed_texts(stream(server, CHAT, body, **header), chat=True)[0]
    person = json.loads(streamed)
    assert set(person) == {"name", "age"} and isinstance(person["age"], int)


def test_include_usage_ends_with_a_usage_chunk(server: ServerProcess) -> None:
    body = chat(stream_options={"include_usage": True})
    chunks = stream(server, CHAT, body)
    assert all(chunk["usage"] is None for chunk in chunks[:-1])
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"]["completion_tokens"] == 8
    without = stream(server, CHAT, chat())
    assert all("usage" not in chunk for chunk in without)


def test_fields_that_change_nothing_are_accepted(server: ServerProcess) -> None:
    extras = {"user": "u-42", "metadata": {"team": "search"}, "store": False, "tool_choice": "none"}
    call(server, CHAT, chat(**extras))
    call(server, COMPLETIONS, completion(user="u-42"))


def test_chat_message_forms(server: ServerProcess) -> None:
    messages = [
        {"role": "system", "content": "You answer in one word."},
        {"role": "developer", "content": [{"type": "text", "text": "Be terse."}]},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Capital of "},
                {"type": "text", "text": "France?"},
            ],
        },
        {"role": "assistant", "content": "Paris."},
        {"role": "user", "content": "And of Italy?"},
    ]
    whole = call(server, CHAT, chat(messages=messages))
    assert whole["choices"][0]["message"]["content"]
    # The conversation went through the chat template: far more tokens than the text.
    assert whole["usage"]["prompt_tokens"] > 30
    stream(server, CHAT, chat(messages=messages))


@pytest.mark.parametrize("path", [CHAT, COMPLETIONS])
def test_context_overflow_names_both_numbers(server: ServerProcess, path: str) -> None:
    body = chat(max_tokens=9000) if path == CHAT else completion(max_tokens=9000)
    error = refused(server, path, body)
    assert error["code"] == "context_length_exceeded"
    assert "8192" in error["message"] and "9000" in error["message"]


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        (COMPLETIONS, completion(prompt=[10, 99_999_999]), "prompt"),
        (COMPLETIONS, completion(prompt=[[1], [-5]]), "prompt"),
        (COMPLETIONS, completion(prompt=""), "prompt"),
        (CHAT, chat(logit_bias={"99999999": 5}), "logit_bias"),
        (CHAT, chat(logprobs=True, top_logprobs=50), "top_logprobs"),
        (COMPLETIONS, completion(logprobs=50), "logprobs"),
        (CHAT, chat(stream_options={"include_usage": True}), "stream_options"),
        (CHAT, chat(messages=[{"role": "robot", "content": "hi"}]), "messages[0].role"),
        (CHAT, chat(temperature=5), "temperature"),
        (CHAT, chat(n=0), "n"),
    ],
)
def test_bad_requests_never_reach_the_engines(
    server: ServerProcess, path: str, body: dict[str, Any], param: str
) -> None:
    error = refused(server, path, body)
    assert error["param"] == param


def test_other_statuses_use_the_error_body(server: ServerProcess) -> None:
    assert refused(server, CHAT, chat(model="gpt-5"), 404)["code"] == "model_not_found"
    assert refused(server, CHAT, [chat()])["type"] == "invalid_request_error"
    base = server.base_url
    wrong_method = httpx.get(f"{base}{CHAT}", timeout=30)
    assert wrong_method.status_code == 405
    form = httpx.post(
        f"{base}{CHAT}", content=b"a=b", timeout=30, headers={"content-type": "text/plain"}
    )
    assert form.status_code == 415
    big = httpx.post(
        f"{base}{CHAT}",
        content=b" " * (9 * 1024 * 1024),
        timeout=60,
        headers={"content-type": "application/json"},
    )
    assert big.status_code == 413
    for response in (wrong_method, form, big):
        assert violations(response.json(), ERROR) == []
    assert httpx.get(f"{base}/health", timeout=30).status_code == 200


def test_models_conform(server: ServerProcess) -> None:
    listing = httpx.get(f"{server.base_url}/v1/models", timeout=30).json()
    assert violations(listing, MODELS) == []
    one = httpx.get(f"{server.base_url}/v1/models/{MODEL}", timeout=30).json()
    assert violations(one, MODEL_OBJECT) == []
    missing = httpx.get(f"{server.base_url}/v1/models/gpt-5", timeout=30)
    assert missing.status_code == 404 and violations(missing.json(), ERROR) == []


@pytest.mark.parametrize("path", [CHAT, COMPLETIONS])
def test_continuous_usage_stats_count_on_every_chunk(server: ServerProcess, path: str) -> None:
    options = {"include_usage": True, "continuous_usage_stats": True}
    body = (chat if path == CHAT else completion)(stream_options=options)
    chunks = stream(server, path, body)
    counted = [chunk["usage"]["completion_tokens"] for chunk in chunks]
    assert all(chunk["usage"] is not None for chunk in chunks)
    assert counted == sorted(counted) and counted[-1] == 8
    assert chunks[-1]["usage"]["prompt_tokens"] == chunks[0]["usage"]["prompt_tokens"] > 0


def test_sixteen_stop_strings_are_served(server: ServerProcess) -> None:
    # lm-eval's generation tasks send their stop list plus the EOS string (5 and more).
    stops = [f"<stop{i}>" for i in range(15)] + ["b)"]
    text = call(server, COMPLETIONS, completion(stop=stops, max_tokens=16))["choices"][0]["text"]
    assert "b)" not in text
    error = refused(server, COMPLETIONS, completion(stop=[*stops, "x"]))
    assert error["code"] == "too_many_stop_sequences" and "--max-stop-sequences" in error["message"]


def test_the_tokenizer_helpers_count_what_the_engine_counts(server: ServerProcess) -> None:
    counted = httpx.post(f"{server.base_url}/tokenize", json={"model": MODEL, "messages": CODE})
    usage = call(server, CHAT, chat())["usage"]
    assert counted.status_code == 200 and counted.json()["count"] == usage["prompt_tokens"]
    assert counted.json()["max_model_len"] == 8192
    prompt = httpx.post(f"{server.base_url}/tokenize", json={"prompt": "def add(a, b):"}).json()
    assert prompt["count"] == call(server, COMPLETIONS, completion())["usage"]["prompt_tokens"]
    text = httpx.post(f"{server.base_url}/detokenize", json={"tokens": prompt["tokens"]})
    assert text.json() == {"prompt": "def add(a, b):"}
    info = httpx.get(f"{server.base_url}/tokenizer_info").json()
    assert info["eos_token"] == "<|im_end|>" and "<|im_start|>" in info["chat_template"]
