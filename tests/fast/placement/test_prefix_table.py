"""The router's record of which replica holds which prompt prefixes."""

from __future__ import annotations

from app.placement.prefix_table import (
    CHARS_PER_TOKEN,
    CHUNK_CHARS,
    PrefixTable,
    prompt_chunks,
    prompt_tokens,
)

SYSTEM = "You are a careful agent. " * 20


def test_a_next_turn_matches_its_conversation_on_the_replica_it_went_to() -> None:
    table = PrefixTable()
    turn1 = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "list files " * 9}]
    turn2 = [
        *turn1,
        {"role": "assistant", "content": "a.py b.py"},
        {"role": "user", "content": "open a.py " * 9},
    ]
    chunks1, per_chunk = prompt_chunks(turn1)
    table.sent("r1", chunks1)
    chunks2, _ = prompt_chunks(turn2)
    on_r1 = table.cached_tokens("r1", chunks2, per_chunk)
    assert on_r1 == len(chunks1) * per_chunk  # all of turn 1's full chunks
    assert table.cached_tokens("r2", chunks2, per_chunk) == 0
    assert 0 < on_r1 < prompt_tokens(turn2)


def test_a_match_is_a_shared_prefix_only() -> None:
    table = PrefixTable()
    text = "x" * (4 * CHUNK_CHARS)
    chunks, per_chunk = prompt_chunks(text)
    table.sent("r1", chunks)
    # The same characters after a different first chunk share no prefix.
    other, _ = prompt_chunks("y" * CHUNK_CHARS + text[CHUNK_CHARS:])
    assert table.cached_tokens("r1", other, per_chunk) == 0
    assert per_chunk == CHUNK_CHARS // CHARS_PER_TOKEN


def test_token_id_prompts_chunk_by_ids() -> None:
    chunks, per_chunk = prompt_chunks(list(range(40)))
    assert (len(chunks), per_chunk) == (2, 16)  # the last 8 ids make no full chunk
    assert prompt_tokens(list(range(40))) == 40


def test_each_replica_keeps_its_most_recent_keys_and_gone_replicas_are_forgotten() -> None:
    table = PrefixTable(keys_per_replica=2)
    old, per_chunk = prompt_chunks("a" * (2 * CHUNK_CHARS))
    new, _ = prompt_chunks("b" * (2 * CHUNK_CHARS))
    table.sent("r1", old)
    table.sent("r1", new)
    assert table.cached_tokens("r1", old, per_chunk) == 0
    assert table.cached_tokens("r1", new, per_chunk) == 2 * per_chunk
    table.keep_only(["r2"])
    assert table.cached_tokens("r1", new, per_chunk) == 0
