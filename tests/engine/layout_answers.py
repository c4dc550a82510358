"""The same greedy requests asked of any server, to compare the layouts' answers.

tests/engine asks them of its two-engine server and keeps the answers for the session;
tests/engine_one asks its one-engine server and compares, starting a two-engine server of
its own only when run without tests/engine (one server start fewer in a full run).
"""

from __future__ import annotations

from typing import Any

import pytest
from openai import OpenAI

from tests.engine.prompts import CODE, MODEL, greedy_completion

Answers = dict[str, str]
TWO_LAYOUT_ANSWERS = pytest.StashKey[Answers]()
HEADERS = ("on", "off", "on;k=2")


def biased_token(tokenizer: Any) -> int:
    (token,) = tokenizer.encode(" Paris")
    return int(token)


def answers(client: OpenAI, biased_token: int) -> Answers:
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
    for header in HEADERS:
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


def agree_across_routes(texts: Answers) -> bool:
    """Greedy text is the same whether a request drafts or not, and at any draft length."""
    return all(
        len({texts[f"{kind} {header}"] for header in HEADERS}) == 1
        for kind in ("completion", "chat")
    )
