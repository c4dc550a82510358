"""`auto` over suffix drafts: each step's length follows the drafter's confidence in every
token (app/drafting/confidence.py), so an answer the tree has seen drafts long and a fresh
one short."""

from __future__ import annotations

from typing import Any

from tests.engine.prompts import MODEL
from tests.engine.server import ServerProcess
from tests.engine_suffix.conftest import KEYS, client_for

PROMPT = "Explain recursion to a child."


def mean_length(stats: dict[str, Any]) -> float:
    lengths = stats["draft_lengths"]
    steps = sum(lengths)
    return sum((i + 1) * n for i, n in enumerate(lengths)) / steps if steps else 0.0


def test_an_answer_the_tree_has_seen_drafts_long_and_a_fresh_one_short(
    server: ServerProcess,
) -> None:
    client = client_for(server, KEYS[1])
    asked = []
    for _ in range(2):
        completion = client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": PROMPT}],
            max_tokens=96,
            temperature=0,
            extra_body={"ignore_eos": True, "cache_salt": "confidence"},
            extra_headers={"X-Speculative": "auto"},
        )
        usage = (completion.usage.model_extra if completion.usage else None) or {}
        asked.append((completion.choices[0].message.content, usage["speculative_decoding"]))
    (first_text, first), (second_text, second) = asked
    assert first_text == second_text
    # Fresh: the tree's guesses come from the prompt and the answer so far, and are cut short.
    # Seen: the whole answer is in the tree, its tokens likely, and the drafts run long.
    assert mean_length(second) >= 2 * max(mean_length(first), 1.0), (first, second)
    assert second["acceptance_rate"] > 0.8, second
