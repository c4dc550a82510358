"""What only --engine-layout one has: draft lengths per request in one shared engine."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
from openai import AsyncOpenAI, BadRequestError, OpenAI

from tests.engine.prompts import JSON_CONTINUATION, MODEL, greedy_completion
from tests.engine.server import ServerProcess
from tests.engine.test_conformance import tokenizer

__all__ = ["tokenizer"]

PROSE = "Once upon a time, in a quiet village by the sea,"

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


def test_the_engine_core_runs_the_cpu_runtime_vllm_recommends(server: ServerProcess) -> None:
    """tcmalloc and Intel's OpenMP (`make install` provides both) are loaded in the engine
    core, where the steps run, and the gateway's own process is left as it started."""
    gateway = psutil.Process(server.process.pid)
    cores = [p for p in gateway.children(recursive=True) if "EngineCore" in " ".join(p.cmdline())]
    assert cores, "no engine core process found"
    mapped = {Path(m.path).name for m in cores[0].memory_maps()}
    assert "libiomp5.so" in mapped
    # A system copy maps as its versioned file (libtcmalloc_minimal.so.4.5.10).
    assert any(name.startswith("libtcmalloc_minimal.so.4") for name in mapped)
    assert "LD_PRELOAD" not in gateway.environ()
    assert "CPU engines start with LD_PRELOAD=" in server.log_path.read_text()


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
    before = server.metric(DRAFTS, route="speculative")
    text, _ = greedy(sync_client, "off")  # a prompt that drafts well on the speculative route
    assert text
    assert server.metric(DRAFTS, route="speculative") == before


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


def test_min_p_reaches_the_sampler_of_a_request_that_never_drafts(sync_client: OpenAI) -> None:
    # min_p 1 keeps only the most likely token, so sampling at temperature 1 is greedy;
    # were min_p dropped (vLLM builds no min_p processor for a speculative engine), the
    # sampled text would wander off the greedy one within a few tokens.
    greedy_text, _ = greedy(sync_client, "off", PROSE)
    raw = sync_client.completions.with_raw_response.create(
        model=MODEL,
        prompt=PROSE,
        max_tokens=48,
        temperature=1.0,
        seed=7,
        extra_body={"min_p": 1.0},
        extra_headers={"X-Speculative": "auto"},
    )
    assert raw.headers["x-specgate-route"] == "plain"
    assert raw.parse().choices[0].text == greedy_text


async def test_logit_bias_holds_while_other_requests_draft(
    async_client: AsyncOpenAI, tokenizer: Any
) -> None:
    # A request that never drafts, entering while another drafts: vLLM pads a newcomer with
    # one token to compute ("Hello" is one) to the drafting shape, which would sample its
    # first token at a draft row, where the bias does not act (the scheduler drops that
    # padding). Its later tokens are bonus tokens of steps shared with the drafting request.
    (token_id,) = tokenizer.encode(" banana")
    assert len(tokenizer.encode("Hello")) == 1
    drafting = await async_client.completions.create(
        model=MODEL,
        prompt=JSON_CONTINUATION,
        max_tokens=96,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
        extra_headers={"X-Speculative": "on"},
    )
    chunks = [await anext(drafting)]  # it is decoding now
    forced = await async_client.completions.create(
        model=MODEL,
        prompt="Hello",
        max_tokens=24,
        temperature=0,
        logit_bias={str(token_id): 100},
        extra_headers={"X-Speculative": "auto"},
    )
    chunks += [chunk async for chunk in drafting]
    assert forced.choices[0].text == tokenizer.decode([token_id]) * 24
    usage = chunks[-1].usage
    spec = (usage.model_extra or {}).get("speculative_decoding") or {}  # type: ignore[union-attr]
    assert spec.get("drafts", 0) > 0, "the other request drafted beside it"


def test_logit_bias_with_drafting_asked_for_is_refused(sync_client: OpenAI) -> None:
    with pytest.raises(BadRequestError) as caught:
        sync_client.completions.create(
            model=MODEL,
            prompt="Hello",
            max_tokens=4,
            logit_bias={"12": 5},
            extra_headers={"X-Speculative": "on;k=2"},
        )
    error = caught.value.body
    assert error["code"] == "unsupported_with_speculation"  # type: ignore[index]
    assert "logit_bias" in error["message"]  # type: ignore[index]
