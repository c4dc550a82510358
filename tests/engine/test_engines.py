"""Routing, acceptance and metrics on the real speculative and plain engines."""

from __future__ import annotations

from pathlib import Path

import pytest
from openai import OpenAI

from app.embedded_model import prepare_embedded_model
from app.routing.policy import MIN_ACCEPTANCE_SAMPLES
from tests.engine.prompts import CODE, JSON_CONTINUATION, MODEL, greedy_completion
from tests.engine.server import ServerProcess


# auto's route depends on what the shared server has learned: the next test checks it.
@pytest.mark.parametrize(("header", "route"), [("on", "speculative"), ("off", "plain")])
def test_route_headers_follow_x_speculative(sync_client: OpenAI, header: str, route: str) -> None:
    raw = sync_client.chat.completions.with_raw_response.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Write a poem about autumn."}],
        max_tokens=4,
        extra_headers={"X-Speculative": header},
    )
    assert raw.headers["x-specgate-route"] == route
    assert raw.headers["x-specgate-class"] == "open-ended"
    completion = raw.parse()
    info = completion.model_extra["specgate"]  # type: ignore[index]
    assert info["route"] == route


def test_auto_follows_the_learned_estimate(sync_client: OpenAI, server: ServerProcess) -> None:
    import httpx

    state = httpx.get(f"{server.base_url}/v1/routing").json()
    estimates = state["classes"]["open-ended"]
    # Plain-served poems teach acceptance too (the draft replay), which can veto drafting.
    vetoed = (
        estimates["acceptance_samples"] >= MIN_ACCEPTANCE_SAMPLES
        and estimates["acceptance_rate"] < state["rules"]["min_acceptance"]
    )
    expected = "speculative" if estimates["expected_speedup"] > 1 and not vetoed else "plain"
    raw = sync_client.chat.completions.with_raw_response.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Write a poem about autumn."}],
        max_tokens=4,
        extra_headers={"X-Speculative": "auto"},
    )
    assert raw.headers["x-specgate-route"] == expected
    assert raw.headers["x-specgate-class"] == "open-ended"
    reason = "acceptance" if vetoed else "expected speed-up"
    assert reason in raw.headers["x-specgate-reason"]


def test_auto_judges_a_json_continuation_by_its_speed_up_alone(
    sync_client: OpenAI, server: ServerProcess
) -> None:
    # A copy of the prompt drafts nearly all right: acceptance never vetoes it. Whether
    # drafting then pays is the learned speed-up, from this machine's own times (a busy
    # machine can make it lose): auto follows that estimate, whatever it is.
    import httpx

    state = httpx.get(f"{server.base_url}/v1/routing").json()
    estimates = state["classes"]["structured"]
    vetoed = (
        estimates["acceptance_samples"] >= MIN_ACCEPTANCE_SAMPLES
        and estimates["acceptance_rate"] < state["rules"]["min_acceptance"]
    )
    assert not vetoed, estimates
    expected = "speculative" if estimates["expected_speedup"] > 1 else "plain"
    raw = sync_client.completions.with_raw_response.create(
        model=MODEL, prompt=JSON_CONTINUATION, max_tokens=4, temperature=0
    )
    assert raw.headers["x-specgate-class"] == "structured"
    assert raw.headers["x-specgate-route"] == expected, (estimates, raw.headers)
    assert "expected speed-up" in raw.headers["x-specgate-reason"]


@pytest.mark.parametrize("kind", ["chat", "completion"])
def test_both_engines_return_the_same_greedy_text(sync_client: OpenAI, kind: str) -> None:
    def run(header: str) -> str:
        if kind == "chat":
            chat = sync_client.chat.completions.create(
                model=MODEL, messages=CODE, max_tokens=48, temperature=0,  # type: ignore[arg-type]
                extra_headers={"X-Speculative": header},
            )  # fmt: skip
            return chat.choices[0].message.content or ""
        text = sync_client.completions.create(
            model=MODEL, prompt=JSON_CONTINUATION, max_tokens=48, temperature=0,
            extra_headers={"X-Speculative": header},
        )  # fmt: skip
        return text.choices[0].text

    speculative, plain = run("on"), run("off")
    assert speculative and speculative == plain


def test_the_speculative_engine_reports_acceptance(
    sync_client: OpenAI, server: ServerProcess
) -> None:
    counters = {
        "drafts": "specgate_spec_decode_drafts_total",
        "draft_tokens": "specgate_spec_decode_draft_tokens_total",
        "accepted_tokens": "specgate_spec_decode_accepted_tokens_total",
    }
    before = {key: server.metric(name, route="speculative") for key, name in counters.items()}
    completion = sync_client.completions.create(
        model=MODEL, prompt=JSON_CONTINUATION, max_tokens=48, temperature=0,
        extra_headers={"X-Speculative": "on"},
    )  # fmt: skip
    assert completion.usage is not None
    spec = completion.usage.model_extra["speculative_decoding"]  # type: ignore[index]
    assert spec["draft_tokens"] > 0
    assert 0 < spec["accepted_tokens"] <= spec["draft_tokens"]
    assert spec["acceptance_rate"] == pytest.approx(
        spec["accepted_tokens"] / spec["draft_tokens"], abs=1e-4
    )
    # Drafting a copy of the prompt should mostly succeed.
    assert spec["acceptance_rate"] > 0.3
    for key, name in counters.items():
        assert server.metric(name, route="speculative") - before[key] == spec[key]


def test_metrics_count_requests_and_latency_by_engine(server: ServerProcess) -> None:
    labels = {"endpoint": "chat", "route": "plain", "workload_class": "open-ended"}
    ok = server.metric("specgate_requests_total", **labels, outcome="ok")
    assert ok > 0
    for engine in ("speculative", "plain"):
        latency = "specgate_request_duration_seconds_count"
        assert server.metric(latency, endpoint="completions", route=engine) > 0
        assert server.metric("specgate_engine_unfinished_requests", route=engine) == 0


def test_the_embedded_model_cache_is_reused(model_dir: Path, server: ServerProcess) -> None:
    def must_not_convert(gguf: Path, out: Path) -> None:
        raise AssertionError("the cache was valid; it must not be converted again")

    assert prepare_embedded_model(model_dir.parent, must_not_convert) == model_dir
    assert "embedded model: using cache" in server.log_path.read_text() or (
        "embedded model: ready" in server.log_path.read_text()
    )


@pytest.mark.parametrize("header", ["on", "off"])
def test_the_draft_replay_matches_the_engines_drafting(sync_client: OpenAI, header: str) -> None:
    # Greedy: the speculative engine's own figures and the shadow replay of the same token
    # ids must agree (the replay cannot see past the output's end, so its last step may
    # count fewer accepted tokens, never more).
    completion = greedy_completion(sync_client, "on")
    info = completion.model_extra["specgate"]  # type: ignore[index]
    engine, shadow = info["speculative_decoding"], info["shadow_drafting"]
    assert engine["accepted_tokens"] > 0, engine
    assert shadow["drafts"] == engine["drafts"], (shadow, engine)
    assert 0 <= engine["draft_tokens"] - shadow["draft_tokens"] <= 5, (shadow, engine)
    assert 0 <= engine["accepted_tokens"] - shadow["accepted_tokens"] <= 5, (shadow, engine)
    # Either engine gives the same greedy text, and its replay the same figures.
    again = greedy_completion(sync_client, header)
    assert again.choices[0].text == completion.choices[0].text
    assert again.model_extra["specgate"]["shadow_drafting"] == shadow  # type: ignore[index]


def test_each_engine_computes_on_cores_of_its_own(server: ServerProcess) -> None:
    import os

    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one core: nothing to split")
    workers = [p for p in server.descendants() if "Worker" in p.name()]
    assert len(workers) == 2, [p.name() for p in server.descendants()]
    first, second = (set(worker.cpu_affinity()) for worker in workers)
    assert first and second and not first & second, (first, second)
