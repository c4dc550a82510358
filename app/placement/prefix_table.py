"""Which replica has most of a prompt in its prefix cache: the router's record of what it sent
where (as Ray's PrefixCacheAffinityRouter keeps one), read by app/placement/replica_rank.py as
prompt tokens a replica would not compute again.

A prompt is cut into chunks, each keyed by a hash of everything up to its end (as vLLM chains
its KV blocks), so a match is always a shared prefix: an agent's next turn shares its
conversation's, a template's requests their system prompt. Each replica keeps its most recent
keys, a bound standing in for its cache's size; the replica evicts on its own, so a match is a
likelihood, not a promise, and the rule prices it as such (it only orders replicas).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

# A prompt as requests carry it: text, token ids, or chat messages (role and content).
Prompt = str | Sequence[int] | Sequence[Mapping[str, Any]]

# Characters per chunk (about 16 tokens: vLLM's block) and per token, for prompts given as text.
CHUNK_CHARS = 64
CHARS_PER_TOKEN = 4
# Token ids per chunk, for prompts given as ids.
CHUNK_IDS = 16
# Keys kept per replica: about 64k tokens of prompts (a small CPU engine's KV cache).
KEYS_PER_REPLICA = 4096


def prompt_chunks(prompt: Prompt) -> tuple[list[str], int]:
    """The prompt's chained chunk keys (full chunks only) and the tokens each chunk holds."""
    if isinstance(prompt, str):
        return _chained(_pieces(prompt, CHUNK_CHARS)), CHUNK_CHARS // CHARS_PER_TOKEN
    if prompt and all(isinstance(item, int) for item in prompt):
        ids = [str(item) for item in prompt]
        return _chained(" ".join(ids[i : i + CHUNK_IDS]) for i in _starts(len(ids))), CHUNK_IDS
    text = "".join(
        f"{item.get('role', '')}\x1f{item.get('content') or ''}\x1e"
        for item in prompt
        if isinstance(item, Mapping)
    )
    return _chained(_pieces(text, CHUNK_CHARS)), CHUNK_CHARS // CHARS_PER_TOKEN


def prompt_tokens(prompt: Prompt) -> int:
    """About how many tokens the prompt is."""
    if isinstance(prompt, str):
        return max(1, len(prompt) // CHARS_PER_TOKEN)
    if prompt and all(isinstance(item, int) for item in prompt):
        return len(prompt)
    chars = sum(len(str(item.get("content") or "")) for item in prompt if isinstance(item, Mapping))
    return max(1, chars // CHARS_PER_TOKEN)


class PrefixTable:
    """Per replica, the chunk keys of the prompts sent there, most recent kept."""

    def __init__(self, keys_per_replica: int = KEYS_PER_REPLICA) -> None:
        self.keys_per_replica = keys_per_replica
        self._keys: dict[str, OrderedDict[str, None]] = {}

    def cached_tokens(self, replica_id: str, chunks: Sequence[str], chunk_tokens: int) -> int:
        """Leading prompt tokens the replica holds, as far as this table knows."""
        held = self._keys.get(replica_id)
        if not held:
            return 0
        matched = 0
        for key in chunks:
            if key not in held:
                break
            matched += 1
        return matched * chunk_tokens

    def sent(self, replica_id: str, chunks: Sequence[str]) -> None:
        held = self._keys.setdefault(replica_id, OrderedDict())
        for key in chunks:
            held[key] = None
            held.move_to_end(key)
        while len(held) > self.keys_per_replica:
            held.popitem(last=False)

    def keep_only(self, replica_ids: Iterable[str]) -> None:
        """Forget replicas that are gone (a restarted replica starts with an empty cache)."""
        live = set(replica_ids)
        for gone in [r for r in self._keys if r not in live]:
            del self._keys[gone]


def _starts(length: int) -> range:
    return range(0, length - CHUNK_IDS + 1, CHUNK_IDS)


def _pieces(text: str, size: int) -> Iterable[str]:
    return (text[i : i + size] for i in range(0, len(text) - size + 1, size))


def _chained(pieces: Iterable[str]) -> list[str]:
    keys, running = [], hashlib.blake2b(digest_size=16)
    for piece in pieces:
        running.update(piece.encode())
        keys.append(running.copy().hexdigest())
    return keys
