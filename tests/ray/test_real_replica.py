"""One real engine replica (vLLM on the CPU, the embedded model) on Ray Serve behind the
gateway as Serve's ingress: streaming through the SDK, the tokenizer, and drafting per request
as in the `one` layout."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from openai import OpenAI

from app.settings import Settings
from tests.ray.conftest import Cluster

PROMPT = [{"role": "user", "content": "Count from 1 to 20, separated by commas."}]


@pytest.fixture(scope="module")
def site(cluster: Cluster) -> Iterator[Cluster]:
    # The replica reserves no logical CPU: its engine computes on every core, as a lone
    # engine on this machine does.
    cluster.deploy(Settings(ray_replicas=1, ray_replica_cpus=0, routing_exploration=0))
    cluster.wait_for_replicas(1, seconds=300)
    try:
        yield cluster
    finally:
        cluster.undeploy()


def test_a_real_replica_streams_through_serve(site: Cluster) -> None:
    sdk = OpenAI(base_url=f"{site.base_url}/v1", api_key="-", max_retries=0, timeout=300)
    model = sdk.models.list().data[0].id
    whole = sdk.chat.completions.create(model=model, messages=PROMPT, max_tokens=40, temperature=0)
    text = whole.choices[0].message.content or ""
    assert all(number in text for number in ("1", "2", "3"))
    assert whole.usage is not None and 0 < whole.usage.completion_tokens <= 40
    chunks = sdk.chat.completions.create(
        model=model,
        messages=PROMPT,
        max_tokens=40,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    pieces, usage = [], None
    for chunk in chunks:
        if chunk.choices and chunk.choices[0].delta.content:
            pieces.append(chunk.choices[0].delta.content)
        usage = chunk.usage or usage
    # Greedy: the stream says what the whole answer said, each token once.
    assert "".join(pieces) == text
    assert usage is not None and usage.completion_tokens == whole.usage.completion_tokens


def test_drafting_is_per_request_and_the_tokenizer_answers(site: Cluster) -> None:
    sdk = OpenAI(base_url=f"{site.base_url}/v1", api_key="-", max_retries=0, timeout=300)
    model = sdk.models.list().data[0].id
    drafting = sdk.chat.completions.with_raw_response.create(
        model=model,
        messages=PROMPT,
        max_tokens=30,
        temperature=0,
        extra_headers={"X-Speculative": "on;k=4"},
    )
    plain = sdk.chat.completions.with_raw_response.create(
        model=model,
        messages=PROMPT,
        max_tokens=30,
        temperature=0,
        extra_headers={"X-Speculative": "off"},
    )
    assert drafting.headers["x-specgate-route"] == "speculative"
    assert plain.headers["x-specgate-route"] == "plain"
    drafted, not_drafted = drafting.parse(), plain.parse()
    assert drafted.choices[0].message.content == not_drafted.choices[0].message.content
    figures = (drafted.usage.model_extra or {}).get("speculative_decoding")  # type: ignore[union-attr]
    assert figures is not None and figures["draft_tokens"] > 0
    tokens = httpx.post(
        f"{site.base_url}/tokenize", json={"model": model, "prompt": "Hello world"}, timeout=60
    )
    assert tokens.status_code == 200 and tokens.json()["count"] >= 2
