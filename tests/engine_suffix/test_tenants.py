"""Suffix drafting keeps tenants apart: a request drafts from its own key's earlier answers,
never from another key's, and drafting never changes a greedy answer."""

from __future__ import annotations

from typing import Any

from openai import OpenAI

from tests.engine.prompts import MODEL
from tests.engine.server import ServerProcess
from tests.engine_suffix.conftest import KEYS, client_for

# An answer the prompt does not foretell: its first telling drafts only from itself.
PROMPT = "Tell the story of a lighthouse keeper who finds a message in a bottle."
TOKENS = 64


def greedy(client: OpenAI, header: str, **extra: Any) -> tuple[str, dict[str, Any]]:
    completion = client.completions.create(
        model=MODEL,
        prompt=PROMPT,
        max_tokens=TOKENS,
        temperature=0,
        extra_body={"ignore_eos": True, **extra},
        # "on": every step verifies what the drafter proposes (up to K), so the drafts depend
        # on the tree alone, not on the length rule's learned state.
        extra_headers={"X-Speculative": header},
    )
    usage = (completion.usage.model_extra if completion.usage else None) or {}
    return completion.choices[0].text, usage.get("speculative_decoding") or {}


def test_a_key_drafts_from_its_own_answers_and_never_from_another_key_s(
    server: ServerProcess,
) -> None:
    tenant_a, tenant_b = (client_for(server, key) for key in KEYS)
    first_text, first = greedy(tenant_a, "on")  # drafts from its prompt and itself only
    other_text, other = greedy(tenant_b, "on")  # the same question from another key
    again_text, again = greedy(tenant_a, "on")  # the first key asks again
    # Last: a request that never drafts still adds its answer to its key's tree.
    plain, _ = greedy(tenant_a, "off")
    assert first_text == other_text == again_text == plain
    # Key B's tree holds none of key A's answers: it drafts exactly what A's first asking did.
    assert (other["draft_tokens"], other["accepted_tokens"]) == (
        first["draft_tokens"],
        first["accepted_tokens"],
    ), (first, other)
    # Key A's own earlier answer is there to draft from: most of the answer lands in drafts.
    assert again["accepted_tokens"] > first["accepted_tokens"], (first, again)
    assert again["accepted_tokens"] >= TOKENS // 2, again


def test_a_shared_salt_shares_answers_across_keys(server: ServerProcess) -> None:
    tenant_a, tenant_b = (client_for(server, key) for key in KEYS)
    salt = {"cache_salt": "one-team"}
    _, first = greedy(tenant_a, "on", **salt)
    _, other = greedy(tenant_b, "on", **salt)
    assert other["accepted_tokens"] > first["accepted_tokens"], (first, other)


def test_metrics_report_the_worker_s_trees(server: ServerProcess) -> None:
    # Earlier tests of the package wrote answers for two keys and one salt: the engine's
    # worker holds them, and /metrics asks it (collective_rpc) on every scrape.
    greedy(client_for(server, KEYS[0]), "on")
    assert server.metric("specgate_suffix_cache_answers") >= 1
    assert server.metric("specgate_suffix_cache_tokens") >= TOKENS
    assert server.metric("specgate_suffix_cache_tenants") >= 1
    assert server.metric("specgate_suffix_cache_hits_total") >= 1
    assert server.metric("specgate_suffix_cache_proposals_total") >= server.metric(
        "specgate_suffix_cache_hits_total"
    )
