"""What only --engine-layout one has: draft lengths per request in one shared engine."""

from __future__ import annotations

import httpx
import pytest
from openai import BadRequestError, OpenAI

from tests.engine.prompts import JSON_CONTINUATION, MODEL, greedy_completion
from tests.engine.server import ServerProcess

DRAFTS = "specgate_spec_decode_drafts_total"


def greedy(client: OpenAI, header: str, prompt: str = JSON_CONTINUATION) -> tuple[str, dict]:
    completion = greedy_completion(client, header, prompt)
    usage = completion.usage.model_extra or {}  # type: ignore[union-attr]
    return completion.choices[0].text, usage.get("speculative_decoding") or {}


def test_one_engine_serves_both_routes(server: ServerProcess) -> None:
    health = httpx.get(f"{server.base_url}/health", timeout=10).json()
    assert health["engines"] == {"speculative": "ok", "plain": "ok"}
    log = server.log_path.read_text()
    assert log.count("KV cache size:") == 1, "one engine core, one KV cache"
    assert "shared engine ready" in log


@pytest.mark.parametrize("k", [1, 3])
def test_every_draft_length_gives_the_same_greedy_text(sync_client: OpenAI, k: int) -> None:
    full, full_spec = greedy(sync_client, "on")
    short, short_spec = greedy(sync_client, f"on;k={k}")
    plain, _ = greedy(sync_client, "off")
    assert short == full == plain
    # The scheduler cut every proposal to k tokens: no draft verified more than k.
    assert short_spec["drafts"] > 0 and full_spec["accepted_tokens"] > 0
    assert short_spec["draft_tokens"] <= k * short_spec["drafts"], short_spec
    # Uncut, the same answer's drafts run longer than k: the cut is per request.
    assert full_spec["draft_tokens"] > k * full_spec["drafts"], full_spec


def test_the_plain_route_drafts_nothing(sync_client: OpenAI, server: ServerProcess) -> None:
    before = server.metric(DRAFTS, engine="speculative")
    text, _ = greedy(sync_client, "off")  # a prompt that drafts well on the speculative route
    assert text
    assert server.metric(DRAFTS, engine="speculative") == before


def test_top_k_sampling_on_the_plain_route_keeps_the_engine_up(
    sync_client: OpenAI, server: ServerProcess
) -> None:
    # Every step of this request has no drafts, it samples, and it sets top_k without top_p:
    # vLLM's top-k step then gets an empty batch, which killed the engine core (the worker
    # extension guards it).
    completion = sync_client.completions.create(
        model=MODEL,
        prompt="Once upon a time",
        max_tokens=16,
        temperature=0.8,
        extra_body={"top_k": 20},
        extra_headers={"X-Speculative": "auto"},
    )
    assert completion.choices[0].text
    assert httpx.get(f"{server.base_url}/health", timeout=10).status_code == 200


def test_logit_bias_is_refused_clearly(sync_client: OpenAI) -> None:
    with pytest.raises(BadRequestError) as caught:
        sync_client.completions.create(
            model=MODEL, prompt="Hello", max_tokens=4, logit_bias={"12": 5}
        )
    error = caught.value.body
    assert error["code"] == "unsupported_with_speculation"  # type: ignore[index]
    assert error["param"] == "logit_bias"  # type: ignore[index]
    assert "--engine-layout two" in error["message"]  # type: ignore[index]
