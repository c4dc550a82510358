"""Greedy answers are the same whichever layout serves them: two engines or one."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from typing import Any

import pytest
from openai import OpenAI

from tests.engine.prompts import CODE, MODEL, greedy_completion
from tests.engine.server import ServerProcess
from tests.engine.test_conformance import tokenizer

__all__ = ["tokenizer"]


@pytest.fixture(scope="module")
def two_engines(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OpenAI]:
    """A default (--engine-layout two) server beside the package's one-engine server."""
    log = tmp_path_factory.mktemp("server_two") / "specgate.log"
    process = ServerProcess(["--engine-layout", "two", "--routing-exploration", "0"], log)
    try:
        process.wait_ready()
        yield OpenAI(base_url=f"{process.base_url}/v1", api_key="-", max_retries=0, timeout=300)
    finally:
        process.stop(signal.SIGTERM)


def answers(client: OpenAI, biased_token: int) -> dict[str, str]:
    texts = {}
    # A bias that bends the answer without forcing every token: the plain route serves it,
    # on its own engine in one layout and with draft length 0 in the other.
    texts["completion logit_bias"] = (
        client.completions.create(
            model=MODEL,
            prompt="The capital of France is",
            max_tokens=24,
            temperature=0,
            logit_bias={str(biased_token): 4},
        )
        .choices[0]
        .text
    )
    for header in ("on", "off", "on;k=2"):
        texts[f"completion {header}"] = greedy_completion(client, header).choices[0].text
        chat = client.chat.completions.create(
            model=MODEL,
            messages=CODE,  # type: ignore[arg-type]
            max_tokens=48,
            temperature=0,
            extra_headers={"X-Speculative": header},
        )
        texts[f"chat {header}"] = chat.choices[0].message.content or ""
    return texts


def test_both_layouts_give_the_same_greedy_answers(
    sync_client: OpenAI, two_engines: OpenAI, tokenizer: Any
) -> None:
    (token,) = tokenizer.encode(" Paris")
    one, two = answers(sync_client, token), answers(two_engines, token)
    assert one == two
    assert len({text for key, text in one.items() if key.startswith("chat")}) == 1
