"""An upstream dies mid-stream. It kills the package's plain upstream, so it runs last."""

from __future__ import annotations

import json

import httpx
import openai
import pytest

from tests.engine.prompts import CODE, MODEL
from tests.remote.conftest import Site


def test_killing_the_plain_upstream_mid_stream(site: Site) -> None:
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "Write a very long story about a ship."}],
        "max_tokens": 1500,
        "stream": True,
    }
    events: list[str] = []
    # The read timeout bounds a hang: the stream must end long before it.
    with httpx.stream(
        "POST",
        f"{site.gateway.base_url}/v1/chat/completions",
        json=body,
        headers={"X-Speculative": "off"},
        timeout=httpx.Timeout(10, read=60),
    ) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if not line.startswith("data: "):
                continue
            events.append(line.removeprefix("data: "))
            if len(events) == 5:
                site.plain.kill()
    assert events[-1] == "[DONE]"
    error = json.loads(events[-2])["error"]
    assert error["type"] == "server_error"
    assert site.plain.base_url in error["message"]
    assert all("choices" in json.loads(event) for event in events[:-2])

    client = site.client(site.gateway)
    # The dead upstream is out of the pool: a clean 503, at once.
    with pytest.raises(openai.APIStatusError) as unavailable:
        client.chat.completions.create(
            model=MODEL, messages=CODE, max_tokens=4,  # type: ignore[arg-type]
            extra_headers={"X-Speculative": "off"},
        )  # fmt: skip
    assert unavailable.value.status_code == 503
    assert unavailable.value.code == "engine_unavailable"

    health = httpx.get(f"{site.gateway.base_url}/health", timeout=10)
    assert health.status_code == 503
    assert health.json()["engines"]["speculative"] == "ok"
    assert site.plain.base_url in health.json()["engines"]["plain"]
    assert health.json()["upstreams"]["plain"][site.plain.base_url] != "ok"

    # The speculative route keeps serving.
    completion = client.chat.completions.create(
        model=MODEL, messages=CODE, max_tokens=8, temperature=0,  # type: ignore[arg-type]
        extra_headers={"X-Speculative": "on"},
    )  # fmt: skip
    assert completion.choices[0].message.content
