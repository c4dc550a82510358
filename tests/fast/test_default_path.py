"""The default request path over HTTP, on fake engines that expose token ids as vLLM's do.

Every figure here follows from the fake's script (the prompt's words, round and round) and
vLLM's ngram settings as app/drafters.py names them (k 5, n-grams of 2 to 5): see `REPLAYED`.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
from openai import AsyncOpenAI

from app.drafters import NGRAM
from app.engine.fakes.scripted import FakeEngine, token_id
from app.engine.generation import GenerationRequest, GenerationStep, SamplingOptions
from app.main import create_app
from app.routing.classify import WorkloadClass
from app.routing.learner import PRIOR_POSITION_ACCEPTANCE
from app.settings import Settings
from tests.conftest import MODEL, ClientFactory
from tests.fast.api.test_streaming import sse_payloads

CHAT = "/v1/chat/completions"
PROMPT = "alpha beta gamma"
# What the fake says to PROMPT in 8 tokens, on either engine.
ANSWER = " alpha beta gamma alpha beta gamma alpha beta"

# The draft replay of ANSWER after PROMPT (a b g | a b g a b g a b): prefill gives the first
# a; the context a b g a repeats no 2-gram yet, so the next step drafts nothing and gives b;
# then "a b" recurs at the start and drafts g a b (cut at the context's end), all accepted,
# plus a bonus token; then "b g a b g" recurs from the second token and drafts a b g, of which
# the two tokens left (alpha beta) are accepted.
REPLAYED = {"drafts": 2, "draft_tokens": 6, "accepted_tokens": 5, "acceptance_rate": 0.8333}


def chat_body(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": MODEL,
        "messages": [{"role": "user", "content": PROMPT}],
        "max_tokens": 8,
    }
    body.update(overrides)
    return body


async def streamed(
    client: httpx.AsyncClient, body: dict[str, Any], headers: dict[str, str] | None = None
) -> tuple[str, dict[str, Any]]:
    """A streamed chat answer's text and its last chunk (with usage and route info)."""
    body = {**body, "stream": True, "stream_options": {"include_usage": True}}
    async with client.stream("POST", CHAT, json=body, headers=headers) as response:
        assert response.status_code == 200
        payloads = await sse_payloads(response)
    assert payloads[-1] == "[DONE]"
    chunks = [json.loads(payload) for payload in payloads[:-1]]
    deltas = (c["choices"][0]["delta"] for c in chunks if c["choices"])
    return "".join(delta.get("content") or "" for delta in deltas), chunks[-1]


async def steps_of(engine: FakeEngine, prompt: Any, **options: Any) -> list[GenerationStep]:
    request = GenerationRequest("r", prompt, SamplingOptions(**options))
    return [step async for step in engine.generate(request)]


async def test_the_fake_engine_gives_its_words_ids() -> None:
    engine = FakeEngine("plain")
    assert engine.facts.exposes_token_ids
    alpha, beta = token_id("alpha"), token_id("beta")
    steps = await steps_of(engine, "alpha beta alpha", max_tokens=2)
    assert [step.prompt_token_ids for step in steps] == [(alpha, beta, alpha), None]
    assert [step.choices[0].token_ids for step in steps] == [(alpha,), (beta,)]
    # Ids it gave read back as its words; others as "t<id>", which is their id again.
    steps = await steps_of(engine, [alpha, beta, 7], max_tokens=1, echo=True)
    assert steps[0].prompt_token_ids == (alpha, beta, 7)
    echo = steps[0].choices[0].echo
    assert echo is not None and echo.text == "alpha beta t7"
    # A finite script ends with an end-of-sequence token, which has an id too.
    said = FakeEngine("plain", script=lambda request, index: [" done"])
    steps = await steps_of(said, "go", max_tokens=4)
    assert [step.choices[0].token_ids for step in steps] == [
        (token_id("done"),),
        (token_id("</s>"),),
    ]
    # Off, as for an engine that gives none.
    silent = FakeEngine("plain", token_ids=False)
    assert not silent.facts.exposes_token_ids
    steps = await steps_of(silent, "alpha beta", max_tokens=2)
    assert [step.prompt_token_ids for step in steps] == [None, None]
    assert [step.choices[0].token_ids for step in steps] == [(), ()]


async def test_the_fake_engine_continues_its_own_answer_from_its_ids() -> None:
    # As a move continues a request: the prompt's ids and the answer's first tokens' ids.
    plain, speculative = FakeEngine("plain"), FakeEngine("speculative")
    first = await steps_of(plain, PROMPT, max_tokens=4)
    context = [*(first[0].prompt_token_ids or ()), *(s.choices[0].token_ids[0] for s in first)]
    rest = await steps_of(speculative, context, max_tokens=4)
    assert "".join(s.choices[0].text for s in first + rest) == ANSWER
    # A prompt that does not extend an answer by its own tokens is a prompt like any other.
    other = await steps_of(speculative, [*context[:-1], token_id("delta")], max_tokens=2)
    assert "".join(s.choices[0].text for s in other) == " alpha beta"


async def test_the_draft_replay_is_reported(make_client: ClientFactory) -> None:
    client, _ = await make_client()
    response = await client.post(CHAT, json=chat_body())
    assert response.status_code == 200
    answer = response.json()
    assert answer["choices"][0]["message"]["content"] == ANSWER
    assert answer["specgate"]["shadow_drafting"] == REPLAYED
    # Twelve words: the answer's first two recur at the prompt's start, and the draft after
    # them is a whole k of 5 (w2 to w6), all accepted; the bonus token w7 ends the answer.
    words = " ".join(f"w{i}" for i in range(12))
    response = await client.post(
        CHAT, json=chat_body(messages=[{"role": "user", "content": words}])
    )
    shadow = response.json()["specgate"]["shadow_drafting"]
    assert shadow == {"drafts": 1, "draft_tokens": 5, "accepted_tokens": 5, "acceptance_rate": 1.0}
    # Pinned to the plain engine, the replay is what says what drafting would have given.
    response = await client.post(CHAT, json=chat_body(), headers={"X-Speculative": "off"})
    assert "speculative_decoding" not in response.json()["usage"]
    assert response.json()["specgate"]["shadow_drafting"] == REPLAYED


# The route info goes on the last content chunk, before the run closes: the replay is settled
# when the last token arrives (the draft still waiting for tokens past the answer's end, a b g
# here, two of them accepted, counts), so a stream reports what a whole response does.
async def test_a_streamed_answer_reports_the_same_replay(make_client: ClientFactory) -> None:
    client, _ = await make_client()
    text, last = await streamed(client, chat_body())
    assert text == ANSWER
    assert last["specgate"]["shadow_drafting"] == REPLAYED


# Four tokens in, not a whole number of rounds of the prompt, so that a prompt read afresh
# (alpha, ...) would say something else than the rest of the answer (beta, ...).
MOVE = {"X-Specgate-Move-After": "4"}


async def test_a_forced_move_continues_the_answer_unchanged(make_client: ClientFactory) -> None:
    client, engines = await make_client()
    response = await client.post(CHAT, json=chat_body(), headers=MOVE)
    assert response.status_code == 200
    answer = response.json()
    assert answer["choices"][0]["message"]["content"] == ANSWER
    assert answer["usage"]["completion_tokens"] == 8
    assert answer["usage"]["prompt_tokens"] == 3
    info = answer["specgate"]
    assert info["route"] == "plain"
    assert [(s["route"], s["tokens"]) for s in info["segments"]] == [
        ("plain", 4),
        ("speculative", 4),
    ]
    assert info["segments"][1]["reason"] == "plain -> speculative: X-Specgate-Move-After"
    # The moved part's figures are the speculative engine's (the fake's: t, 2t, t).
    speculative = answer["usage"]["speculative_decoding"]
    assert (speculative["drafts"], speculative["draft_tokens"]) == (4, 8)
    # The draft replay covers the whole answer, across the move.
    assert info["shadow_drafting"] == REPLAYED
    # The speculative engine was asked for the rest: the context so far as ids.
    (moved,) = engines["speculative"].requests
    ids = [token_id(word) for word in (PROMPT + ANSWER).split()]
    assert moved.prompt == ids[:7]
    assert moved.options.max_tokens == 4

    text, last = await streamed(client, chat_body(), MOVE)
    assert text == ANSWER
    segments = last["specgate"]["segments"]
    assert [(s["route"], s["tokens"]) for s in segments] == [("plain", 4), ("speculative", 4)]
    assert sum(s["tokens"] for s in segments) == last["usage"]["completion_tokens"] == 8


async def test_a_pinned_request_moves_only_when_the_client_forces_it(
    make_client: ClientFactory,
) -> None:
    client, _ = await make_client()
    pinned = {"X-Speculative": "on"}
    response = await client.post(CHAT, json=chat_body(), headers={**pinned, **MOVE})
    info = response.json()["specgate"]
    assert response.json()["choices"][0]["message"]["content"] == ANSWER
    assert [(s["route"], s["tokens"]) for s in info["segments"]] == [
        ("speculative", 4),
        ("plain", 4),
    ]
    # Unforced, the pin holds: no segments, and the engine's figures for all 8 tokens.
    response = await client.post(CHAT, json=chat_body(), headers=pinned)
    answer = response.json()
    assert answer["specgate"].get("segments") is None
    assert answer["usage"]["speculative_decoding"]["draft_tokens"] == 16
    assert answer["specgate"]["shadow_drafting"] == REPLAYED


async def test_the_openai_sdk_sees_the_move_and_the_replay(make_client: ClientFactory) -> None:
    client, _ = await make_client()
    sdk = AsyncOpenAI(base_url="http://specgate/v1", api_key="-", http_client=client)
    messages: Any = [{"role": "user", "content": PROMPT}]
    plain = await sdk.chat.completions.create(model=MODEL, messages=messages, max_tokens=8)
    moved = await sdk.chat.completions.create(
        model=MODEL, messages=messages, max_tokens=8, extra_headers=MOVE
    )
    assert plain.choices[0].message.content == moved.choices[0].message.content == ANSWER
    assert moved.usage is not None and moved.usage.completion_tokens == 8
    info = (moved.model_extra or {})["specgate"]
    assert [s["tokens"] for s in info["segments"]] == [4, 4]
    assert info["shadow_drafting"] == (plain.model_extra or {})["specgate"]["shadow_drafting"]

    stream = await sdk.chat.completions.create(
        model=MODEL,
        messages=messages,
        max_tokens=8,
        stream=True,
        stream_options={"include_usage": True},
        extra_headers=MOVE,
    )
    chunks = [chunk async for chunk in stream]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == ANSWER
    last = chunks[-1]
    assert last.usage is not None and last.usage.completion_tokens == 8
    assert [s["tokens"] for s in (last.model_extra or {})["specgate"]["segments"]] == [4, 4]


@asynccontextmanager
async def one_engine(settings: Settings) -> AsyncIterator[tuple[httpx.AsyncClient, FakeEngine]]:
    """An app over one drafting engine that serves both routes (`--engine-layout one`)."""
    engine = FakeEngine("speculative", per_request_draft_length=True)
    app = create_app(settings, {"speculative": engine, "plain": engine})
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://specgate") as client:
            yield client, engine


async def test_one_engine_chooses_the_draft_length_from_a_prior() -> None:
    async with one_engine(Settings(routing_exploration=0, speculative_config=NGRAM)) as (
        client,
        engine,
    ):
        response = await client.post(CHAT, json=chat_body())
        answer = response.json()
        assert answer["choices"][0]["message"]["content"] == ANSWER
        info = answer["specgate"]
        assert info["route"] == "speculative"
        assert info["reason"].startswith("adaptive: ")
        assert response.headers["x-specgate-reason"] == info["reason"]
        # Nothing learned yet: the class's prior, and the engine's own K.
        (request,) = engine.requests
        assert request.acceptance_prior == PRIOR_POSITION_ACCEPTANCE[WorkloadClass.OPEN_ENDED]
        assert request.draft_length is None
        # The engine drafts what it chooses; the replay says what drafting every step gives.
        assert info["shadow_drafting"] == REPLAYED
        assert info.get("segments") is None

        text, last = await streamed(client, chat_body())
        assert text == ANSWER
        assert last["specgate"]["reason"].startswith("adaptive: ")
        # The class learned from the replay (5 accepted over 5 + 2 drafts), not from the
        # engine's figures (the fake's 8 of 8 + 8): the prior moved up, towards 5/7.
        assert 0.6 < (engine.requests[1].acceptance_prior or 0) < 5 / 7
