"""Every endpoint through the real openai SDK, sync and async, streaming and not."""

from __future__ import annotations

import json

import openai
import pytest
from openai import AsyncOpenAI, OpenAI

from tests.engine.prompts import CODE, JSON_CONTINUATION, MODEL


def test_models(sync_client: OpenAI) -> None:
    models = sync_client.models.list()
    assert [model.id for model in models.data] == [MODEL]
    assert sync_client.models.retrieve(MODEL).id == MODEL


def test_sync_chat(sync_client: OpenAI) -> None:
    completion = sync_client.chat.completions.create(
        model=MODEL,
        messages=CODE,
        max_tokens=24,
        temperature=0,  # type: ignore[arg-type]
    )
    choice = completion.choices[0]
    assert "def" in (choice.message.content or "")
    assert choice.finish_reason == "length"
    assert completion.usage is not None and completion.usage.completion_tokens == 24


def test_sync_chat_stream_equals_non_stream(sync_client: OpenAI) -> None:
    kwargs = {"model": MODEL, "messages": CODE, "max_tokens": 24, "temperature": 0}
    whole = sync_client.chat.completions.create(**kwargs)  # type: ignore[call-overload]
    stream = sync_client.chat.completions.create(**kwargs, stream=True)  # type: ignore[call-overload]
    streamed = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert streamed == whole.choices[0].message.content


async def test_async_chat_stream_with_usage(async_client: AsyncOpenAI) -> None:
    whole = await async_client.chat.completions.create(
        model=MODEL,
        messages=CODE,
        max_tokens=20,
        temperature=0,  # type: ignore[arg-type]
    )
    stream = await async_client.chat.completions.create(
        model=MODEL,
        messages=CODE,  # type: ignore[arg-type]
        max_tokens=20,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    text, usage = "", None
    async for chunk in stream:
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
        if chunk.usage is not None:
            usage = chunk.usage
    assert text == whole.choices[0].message.content
    assert usage is not None and whole.usage is not None
    assert usage.prompt_tokens == whole.usage.prompt_tokens
    assert usage.completion_tokens == whole.usage.completion_tokens == 20


def test_sync_completions_stream_equals_non_stream(sync_client: OpenAI) -> None:
    kwargs = {"model": MODEL, "prompt": "def fibonacci(n):", "max_tokens": 20, "temperature": 0}
    whole = sync_client.completions.create(**kwargs)  # type: ignore[call-overload]
    stream = sync_client.completions.create(**kwargs, stream=True)  # type: ignore[call-overload]
    streamed = "".join(chunk.choices[0].text for chunk in stream if chunk.choices)
    assert whole.choices[0].text and streamed == whole.choices[0].text


async def test_async_completions(async_client: AsyncOpenAI) -> None:
    whole = await async_client.completions.create(
        model=MODEL, prompt=JSON_CONTINUATION, max_tokens=16, temperature=0
    )
    stream = await async_client.completions.create(
        model=MODEL, prompt=JSON_CONTINUATION, max_tokens=16, temperature=0, stream=True
    )
    streamed = "".join([chunk.choices[0].text async for chunk in stream if chunk.choices])
    assert streamed == whole.choices[0].text
    assert '"name"' in whole.choices[0].text


def test_prompt_token_ids_are_counted_exactly(sync_client: OpenAI) -> None:
    tokens = [504, 3458, 288, 253, 1345, 30, 216, 198]
    completion = sync_client.completions.create(
        model=MODEL, prompt=tokens, max_tokens=5, temperature=0
    )
    assert completion.usage is not None
    assert completion.usage.prompt_tokens == len(tokens)
    assert completion.usage.completion_tokens == 5
    assert completion.usage.total_tokens == len(tokens) + 5


def test_chat_prompt_tokens_match_the_chat_template(sync_client: OpenAI, model_dir: object) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    rendered = tokenizer.apply_chat_template(CODE, add_generation_prompt=True, tokenize=False)
    expected = len(tokenizer.encode(rendered, add_special_tokens=False))
    completion = sync_client.chat.completions.create(
        model=MODEL,
        messages=CODE,
        max_tokens=1,  # type: ignore[arg-type]
    )
    assert completion.usage is not None and completion.usage.prompt_tokens == expected


def test_seed_makes_sampling_reproducible(sync_client: OpenAI) -> None:
    def sample(seed: int) -> str:
        completion = sync_client.completions.create(
            model=MODEL, prompt="Once upon a time", max_tokens=12, temperature=1.0, seed=seed
        )
        return completion.choices[0].text

    assert sample(7) == sample(7)


def test_n_and_stop(sync_client: OpenAI) -> None:
    completion = sync_client.completions.create(
        model=MODEL, prompt="1, 2, 3, 4,", max_tokens=20, temperature=0.8, n=2, stop=["7"],
        seed=1,
    )  # fmt: skip
    assert sorted(choice.index for choice in completion.choices) == [0, 1]
    for choice in completion.choices:
        assert "7" not in choice.text
    assert completion.usage is not None
    assert completion.usage.completion_tokens >= 2


def test_structured_output(sync_client: OpenAI) -> None:
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
        "required": ["name", "age"],
        "additionalProperties": False,
    }
    completion = sync_client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Describe a person called Ada, aged 36."}],
        max_tokens=40,
        temperature=0,
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "person", "schema": schema},
        },
    )
    data = json.loads(completion.choices[0].message.content or "")
    assert set(data) == {"name", "age"} and isinstance(data["age"], int)


def test_errors_reach_the_sdk_as_openai_errors(sync_client: OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as not_found:
        sync_client.chat.completions.create(model="gpt-nope", messages=CODE)  # type: ignore[arg-type]
    assert not_found.value.code == "model_not_found"
    with pytest.raises(openai.BadRequestError) as too_long:
        sync_client.chat.completions.create(
            model=MODEL,
            messages=CODE,
            max_tokens=9000,  # past the 8192-token context, within --max-tokens-limit
        )
    assert too_long.value.code == "context_length_exceeded"
    with pytest.raises(openai.BadRequestError):
        sync_client.completions.create(model=MODEL, prompt=[10**9], max_tokens=2)


def test_sdk_parses_every_feature(sync_client: OpenAI) -> None:
    """The OpenAI SDK, unchanged, on logprobs, n, stop, seed, prompt lists and echo."""
    chat = sync_client.chat.completions.create(
        model=MODEL,
        messages=[
            {"role": "developer", "content": "Answer briefly."},
            {"role": "user", "content": [{"type": "text", "text": "Name a colour."}]},
        ],
        max_completion_tokens=6,
        n=2,
        temperature=0.7,
        seed=5,
        stop=["\n\n"],
        logprobs=True,
        top_logprobs=2,
        user="sdk-test",
        metadata={"suite": "conformance"},
    )
    assert [choice.index for choice in chat.choices] == [0, 1]
    for choice in chat.choices:
        assert choice.logprobs is not None and choice.logprobs.content
        assert all(len(entry.top_logprobs) == 2 for entry in choice.logprobs.content)
    completion = sync_client.completions.create(
        model=MODEL,
        prompt=["def add(a, b):", "The sky is"],
        max_tokens=4,
        temperature=0,
        echo=True,
        logprobs=1,
    )
    assert [choice.index for choice in completion.choices] == [0, 1]
    assert completion.choices[1].text.startswith("The sky is")
    assert completion.choices[0].logprobs is not None
    assert completion.choices[0].logprobs.tokens is not None
    assert "".join(completion.choices[0].logprobs.tokens) == completion.choices[0].text
    stream = sync_client.completions.create(
        model=MODEL,
        prompt=[[504, 3725, 30]],
        max_tokens=4,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 4


def test_ignore_eos_generates_exactly_max_tokens(sync_client: OpenAI) -> None:
    def ask(**extra: object) -> tuple[int, str]:
        completion = sync_client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "Say hello."}],
            max_tokens=64,
            temperature=0,
            **extra,  # type: ignore[arg-type]
        )
        return completion.usage.completion_tokens, completion.choices[0].finish_reason  # type: ignore[union-attr]

    tokens, finish = ask()
    assert finish == "stop" and tokens < 64  # the model ends its greeting on its own
    assert ask(extra_body={"ignore_eos": True}) == (64, "length")
