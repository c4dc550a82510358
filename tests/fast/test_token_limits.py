"""--max-tokens-default and --max-tokens-limit over the fake engine (context 256 tokens)."""

from __future__ import annotations

from typing import Any

from app.settings import Settings
from tests.conftest import MODEL, ClientFactory

CHAT = "/v1/chat/completions"


def chat(**fields: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": "alpha beta"}], **fields}


async def test_an_absent_max_tokens_means_the_default(make_client: ClientFactory) -> None:
    client, _ = await make_client(Settings(routing_exploration=0, max_tokens_default=7))
    response = await client.post(CHAT, json=chat())
    assert response.status_code == 200, response.text
    assert response.json()["usage"]["completion_tokens"] == 7
    # A client's own value is its own, up to the limit.
    asked = await client.post(CHAT, json=chat(max_tokens=9))
    assert asked.json()["usage"]["completion_tokens"] == 9


async def test_the_default_is_cut_to_what_the_context_leaves(make_client: ClientFactory) -> None:
    client, _ = await make_client(Settings(routing_exploration=0, max_tokens_default=2048))
    long = " ".join(["word"] * 250)  # the fake's context is 256 tokens
    body = {"model": MODEL, "messages": [{"role": "user", "content": long}]}
    response = await client.post(CHAT, json=body)
    assert response.status_code == 200, response.text
    assert response.json()["usage"]["completion_tokens"] == 6


async def test_asking_past_the_limit_is_a_400_that_names_it(make_client: ClientFactory) -> None:
    client, _ = await make_client(Settings(routing_exploration=0, max_tokens_limit=100))
    for field in ("max_tokens", "max_completion_tokens"):
        response = await client.post(CHAT, json=chat(**{field: 101}))
        assert response.status_code == 400
        error = response.json()["error"]
        assert (error["param"], error["code"]) == (field, "max_tokens_over_limit")
        assert "100" in error["message"]
    completions = await client.post(
        "/v1/completions", json={"model": MODEL, "prompt": "hi", "max_tokens": 500}
    )
    assert completions.json()["error"]["param"] == "max_tokens"
    responses = await client.post(
        "/v1/responses", json={"model": MODEL, "input": "hi", "max_output_tokens": 500}
    )
    assert responses.json()["error"]["param"] == "max_output_tokens"
    assert (await client.post(CHAT, json=chat(max_tokens=100))).status_code == 200
