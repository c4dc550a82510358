"""Suffix drafting with a tree of earlier answers per tenant
(app/engine/vllm/worker/suffix_drafter.py), driven step by step as vLLM's runner drives it,
over arctic-inference's real suffix trees. Starts no engine."""

from __future__ import annotations

import pickle
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from vllm.v1.outputs import DraftTokenIds

from app.engine.vllm.extra_args import (
    CACHE_TOKENS_KEY,
    CONFIDENCE_ATTRIBUTE,
    DRAFT_LENGTH_KEY,
    TENANT_KEY,
)
from app.engine.vllm.worker import drafting_patches
from app.engine.vllm.worker.suffix_drafter import TenantSuffixDrafter

K = 8
PROMPT = [5, 6, 7, 8]
# An answer with no repeats inside it: only an earlier copy of it can be drafted from.
ANSWER = [40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51]


def vllm_config(max_cached_requests: int = 100, cache_tokens: int = 10_000) -> Any:
    speculative = SimpleNamespace(
        method="suffix",
        num_speculative_tokens=K,
        suffix_decoding_max_tree_depth=24,
        suffix_decoding_max_spec_factor=1.0,
        suffix_decoding_min_token_prob=0.1,
        suffix_decoding_max_cached_requests=max_cached_requests,
    )
    return SimpleNamespace(
        speculative_config=speculative,
        model_config=SimpleNamespace(max_model_len=4096),
        additional_config={CACHE_TOKENS_KEY: cache_tokens},
    )


@dataclass
class Runner:
    """The parts of vLLM's runner the drafter reads: its requests and each step's batch."""

    drafter: TenantSuffixDrafter
    requests: dict[str, Any]
    tokens: dict[str, list[int]] = field(default_factory=dict)
    prompt_lengths: dict[str, int] = field(default_factory=dict)

    def add(self, request_id: str, tenant: str | None, draft_length: int | None = None) -> None:
        extra: dict[str, Any] = {}
        if tenant is not None:
            extra[TENANT_KEY] = tenant
        if draft_length is not None:
            extra[DRAFT_LENGTH_KEY] = draft_length
        self.requests[request_id] = SimpleNamespace(
            sampling_params=SimpleNamespace(extra_args=extra or None)
        )
        self.tokens[request_id] = list(PROMPT)
        self.prompt_lengths[request_id] = len(PROMPT)

    def step(self, sampled: dict[str, list[int]]) -> dict[str, list[int]]:
        """One step: each running request's new tokens in, its draft out."""
        ids = list(sampled)
        for request_id in ids:
            self.tokens[request_id] += sampled[request_id]
        width = max(len(self.tokens[r]) for r in ids)
        rows = np.zeros((len(ids), width), dtype=np.int32)
        for row, request_id in enumerate(ids):
            rows[row, : len(self.tokens[request_id])] = self.tokens[request_id]
        batch = SimpleNamespace(
            req_ids=ids,
            req_id_to_index={r: i for i, r in enumerate(ids)},
            num_tokens_no_spec=np.array([len(self.tokens[r]) for r in ids]),
            num_prompt_tokens=np.array([self.prompt_lengths[r] for r in ids]),
            token_ids_cpu=rows,
        )
        drafts = self.drafter.propose(K, batch, [sampled[r] for r in ids])  # type: ignore[arg-type]
        return dict(zip(ids, drafts, strict=True))


def runner(**config: int) -> Runner:
    requests: dict[str, Any] = {}
    return Runner(TenantSuffixDrafter(vllm_config(**config), requests), requests)


def answer(run: Runner, request_id: str, tenant: str | None, **extra: int) -> None:
    """A whole answer, one token a step (it leaves the batch at the next request's step)."""
    run.add(request_id, tenant, **extra)
    for token in ANSWER:
        run.step({request_id: [token]})


# A suffix draft runs at most as long as the context it matched (vLLM's default
# suffix_decoding_max_spec_factor, 1.0): after the answer's first four tokens, four.
SEEN = 4
EXPECTED = ANSWER[SEEN : 2 * SEEN]


def first_draft(
    run: Runner, request_id: str, tenant: str | None, draft_length: int | None = None
) -> list[int]:
    """What a new request with the same prompt gets drafted after the answer's first tokens."""
    run.add(request_id, tenant, draft_length)
    drafts = [run.step({request_id: [token]})[request_id] for token in ANSWER[:SEEN]]
    return drafts[-1]


def test_a_tenant_drafts_from_its_own_earlier_answer() -> None:
    run = runner()
    answer(run, "a1", "key:a")
    assert first_draft(run, "a2", "key:a") == EXPECTED
    assert run.drafter.counts.hits >= 1


def test_another_tenant_cannot_draft_from_it() -> None:
    run = runner()
    answer(run, "a1", "key:a")
    assert first_draft(run, "b1", "key:b") == []
    assert first_draft(run, "anonymous", None) == []
    assert run.drafter.counts.tenants == 3


def test_requests_without_a_tenant_share_one_tree() -> None:
    run = runner()
    answer(run, "x1", None)
    assert first_draft(run, "x2", None) == EXPECTED


def test_a_request_that_never_drafts_is_not_proposed_for_but_its_answer_is_kept() -> None:
    run = runner()
    run.add("plain", "key:a", draft_length=0)
    drafts = [run.step({"plain": [token]})["plain"] for token in ANSWER]
    assert drafts == [[]] * len(ANSWER)
    assert run.drafter.counts.proposals == 0
    assert first_draft(run, "a2", "key:a") == EXPECTED


def test_a_draft_stops_at_the_request_s_own_limit() -> None:
    run = runner()
    answer(run, "a1", "key:a")
    assert first_draft(run, "a2", "key:a", draft_length=3) == EXPECTED[:3]


def test_the_oldest_answers_go_first_beyond_the_request_bound() -> None:
    run = runner(max_cached_requests=2)
    answer(run, "a1", "key:a")
    answer(run, "b1", "key:b")
    answer(run, "c1", "key:c")
    counts = run.drafter.counts
    assert (counts.cached_answers, counts.evictions) == (2, 1)
    # A new request's answer takes a place too: b1's, the oldest left, not c1's.
    assert first_draft(run, "c2", "key:c") == EXPECTED
    assert run.drafter.counts.evictions == 2
    # key:a's only answer went first, and its tree with it.
    assert first_draft(run, "a2", "key:a") == []


def test_the_token_bound_holds_over_all_tenants() -> None:
    run = runner(cache_tokens=len(ANSWER) * 2)
    for tenant in ("key:a", "key:b", "key:c"):
        answer(run, f"{tenant}-1", tenant)
    counts = run.drafter.counts
    assert counts.cached_tokens <= len(ANSWER) * 2
    assert counts.evictions == 1
    assert first_draft(run, "a2", "key:a") == []


def test_no_earlier_answers_are_kept_when_vllm_s_bound_is_zero() -> None:
    run = runner(max_cached_requests=0)
    answer(run, "a1", "key:a")
    assert first_draft(run, "a2", "key:a") == []
    assert run.drafter.counts.cached_answers == 0


def test_each_draft_carries_the_drafter_s_confidence_to_the_scheduler(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run = runner()
    answer(run, "a1", "key:a")
    draft = first_draft(run, "a2", "key:a")
    confidence = run.drafter.confidence["a2"]
    probabilities, match = confidence
    assert len(probabilities) == len(draft) and all(0 < p <= 1 for p in probabilities)
    assert match >= SEEN  # the answer's first tokens matched the earlier answer
    # What the worker hands the engine core: vLLM's DraftTokenIds, pickled across processes.
    taken = DraftTokenIds(["a2"], [draft])
    monkeypatch.setattr(drafting_patches, "_take_draft_token_ids", lambda runner: taken)
    runner_like = SimpleNamespace(drafter=run.drafter)
    handed = drafting_patches._take_draft_token_ids_with_confidence(runner_like)  # type: ignore[arg-type]
    received = pickle.loads(pickle.dumps(handed))
    assert getattr(received, CONFIDENCE_ATTRIBUTE) == [confidence]
