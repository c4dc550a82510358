"""specgate requests -> vLLM's OpenAI wire format, and vLLM's streams -> engine steps."""

from __future__ import annotations

import json
from typing import Any

import pytest

from app.engine.generation import GenerationRequest, GenerationStep, SamplingOptions
from app.engine.remote.codec import (
    CHAT_PATH,
    COMPLETIONS_PATH,
    SSEParser,
    StreamDecoder,
    UpstreamModel,
    model_from_list,
    not_forwarded,
    request_body,
    upstream_error,
)
from app.errors import EngineFailureError, InvalidRequestError
from app.vocabulary import SpecDecodeStats
from tests.fake_upstream import FakeUpstream

MODEL = UpstreamModel("upstream-model", max_model_len=2048)


@pytest.mark.parametrize(("name", "value"), [("logprobs", 2), ("echo", True)])
def test_options_a_remote_route_cannot_read_back_are_named(name: str, value: Any) -> None:
    assert not_forwarded(SamplingOptions(**{name: value})) == (name,)
    assert not_forwarded(SamplingOptions(n=2, top_k=5, seed=1)) == ()


def test_chat_goes_to_chat_completions_and_always_streams_with_usage() -> None:
    messages = [{"role": "user", "content": "hi"}]
    path, body = request_body(GenerationRequest("r", messages), MODEL)  # type: ignore[arg-type]
    assert path == CHAT_PATH
    assert body["messages"] == messages and "prompt" not in body
    assert body["model"] == "upstream-model"
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}


@pytest.mark.parametrize("prompt", ["Once upon", [1, 2, 3]])
def test_text_and_token_prompts_go_to_completions(prompt: str | list[int]) -> None:
    path, body = request_body(GenerationRequest("r", prompt, SamplingOptions(max_tokens=5)), MODEL)
    assert path == COMPLETIONS_PATH
    assert body["prompt"] == prompt and body["max_tokens"] == 5


def test_an_unlimited_completion_asks_for_the_whole_context() -> None:
    # vLLM reads a null max_tokens on /v1/completions as 16; it clamps a larger limit itself.
    _, body = request_body(GenerationRequest("r", "Once upon"), MODEL)
    assert body["max_tokens"] == 2048
    messages = [{"role": "user", "content": "hi"}]
    _, chat = request_body(GenerationRequest("r", messages), MODEL)  # type: ignore[arg-type]
    assert chat["max_tokens"] is None  # chat's null already means "what the context leaves"


def test_model_from_list() -> None:
    listing = {"data": [{"id": "a", "max_model_len": 100}, {"id": "b"}]}
    assert model_from_list(listing, None) == UpstreamModel("a", 100)
    assert model_from_list(listing, "b") == UpstreamModel("b", None)
    with pytest.raises(ValueError, match="'c'"):
        model_from_list(listing, "c")
    with pytest.raises(ValueError, match="no model"):
        model_from_list({"data": []}, None)


def test_upstream_errors_keep_the_upstream_message() -> None:
    body = json.dumps({"error": {"message": "too long", "param": "max_tokens", "code": 400}})
    refused = upstream_error(400, body.encode())
    assert isinstance(refused, InvalidRequestError)
    assert (refused.message, refused.param, refused.status_code) == ("too long", "max_tokens", 400)
    failed = upstream_error(500, b"Internal Server Error")
    assert isinstance(failed, EngineFailureError)
    assert "Internal Server Error" in failed.message
    assert upstream_error(422, b'{"detail": "field required"}').message == "field required"


def test_sse_parser_handles_split_chunks_crlf_and_comments() -> None:
    parser = SSEParser()
    stream = b': keep-alive\n\ndata: {"a": 1}\r\n\r\ndata: [DONE]\n\n'
    pieces = [stream[i : i + 5] for i in range(0, len(stream), 5)]
    assert [data for piece in pieces for data in parser.feed(piece)] == ['{"a": 1}', "[DONE]"]


def decode(events: list[str], n: int = 1) -> list[GenerationStep]:
    decoder = StreamDecoder(n)
    steps = [step for event in events for step in decoder.feed(event)]
    return steps + list(decoder.finish())


def test_a_chat_stream_becomes_steps_with_token_counts() -> None:
    upstream = FakeUpstream("u")
    upstream.spec_metrics = {"num_spec_steps": 2, "num_draft_tokens": 10,
                             "num_accepted_draft_tokens": 4}  # fmt: skip
    steps = decode(upstream.events({"max_tokens": 2}, chat=True))
    assert [(d.text, d.new_tokens, d.finish_reason) for s in steps for d in s.choices] == [
        ("", 0, None),
        (" one", 1, None),
        (" two", 1, "length"),
    ]
    assert all(step.prompt_tokens == 7 for step in steps)
    # The figures arrive after the finishing chunk; they ride on the final delta.
    assert steps[-1].choices[0].draft_stats == SpecDecodeStats(drafts=2, draft_tokens=10,
                                                        accepted_tokens=4)  # fmt: skip


def test_a_completions_stream_with_two_choices() -> None:
    steps = decode(FakeUpstream("u").events({"n": 2}, chat=False), n=2)
    texts: dict[int, str] = {}
    tokens: dict[int, int] = {}
    for step in steps:
        for delta in step.choices:
            texts[delta.index] = texts.get(delta.index, "") + delta.text
            tokens[delta.index] = tokens.get(delta.index, 0) + delta.new_tokens
    assert texts == {0: " one two three", 1: " one two three"}
    assert tokens == {0: 3, 1: 3}
    assert all(delta.draft_stats is None for step in steps for delta in step.choices)


def test_a_stream_that_ends_before_the_answer_is_a_failure() -> None:
    events = FakeUpstream("u").events({}, chat=False)[:2]
    with pytest.raises(EngineFailureError, match="ended"):
        decode(events)


def test_error_events_become_errors() -> None:
    bad = json.dumps({"error": {"message": "bad schema", "code": 400}})
    with pytest.raises(InvalidRequestError, match="bad schema"):
        decode([bad])
    broken = json.dumps({"error": {"message": "engine died", "code": 500}})
    with pytest.raises(EngineFailureError, match="engine died"):
        decode([broken])
    error_finish = json.dumps({"choices": [{"index": 0, "text": "", "finish_reason": "error"}]})
    with pytest.raises(EngineFailureError):
        decode([error_finish])
    with pytest.raises(EngineFailureError, match="unreadable"):
        decode(["{not json"])
