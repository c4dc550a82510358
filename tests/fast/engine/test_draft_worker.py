"""The rejection sampler's recovery noise drawn only for requests that drafted
(app/engine/vllm/worker/drafting_patches.py), against vLLM's own `sample_recovered_tokens`
on its CPU kernel. Starts no engine."""

from __future__ import annotations

import warnings
from types import SimpleNamespace

import pytest
import torch
from vllm.platforms import current_platform
from vllm.v1.sample import rejection_sampler

from app.engine.vllm.worker.drafting_patches import _sample_recovered_tokens_for_drafting_rows

VOCAB = 4096
# Three requests: the first and last drafted (2 and 3 tokens), the middle one did not.
DRAFTED = [2, 0, 3]
SEEDS = {0: 11, 1: 22, 2: 33}


@pytest.fixture(autouse=True, scope="module")
def cpu_kernels() -> None:
    # What a CPU worker does at start-up: vLLM's C++ stand-ins for its Triton kernels. The
    # registration reads every attribute of every loaded module, deprecated ones included.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        current_platform.register_triton_kernel_overrides()


def generators() -> dict[int, torch.Generator]:
    return {row: torch.Generator().manual_seed(seed) for row, seed in SEEDS.items()}


def recovered(sample: object, seeded: dict[int, torch.Generator]) -> torch.Tensor:
    torch.manual_seed(0)
    probs = torch.softmax(torch.randn(sum(DRAFTED), VOCAB) * 4, dim=-1)
    drafts = torch.randint(0, VOCAB, (sum(DRAFTED),), dtype=torch.int32)
    cumulative = torch.tensor(DRAFTED, dtype=torch.int32).cumsum(0).to(torch.int32)
    return sample(  # type: ignore[operator, no-any-return]
        max(DRAFTED),
        DRAFTED,
        cumulative,
        drafts,
        None,  # n-gram drafts carry no probabilities
        probs,
        SimpleNamespace(generators=seeded),
        torch.device("cpu"),
    )


def test_seeded_requests_recover_the_tokens_vllm_recovers() -> None:
    ours = recovered(_sample_recovered_tokens_for_drafting_rows, generators())
    vllms = recovered(rejection_sampler.sample_recovered_tokens, generators())
    assert torch.equal(ours, vllms)


def test_a_request_that_did_not_draft_draws_nothing_from_its_generator() -> None:
    seeded = generators()
    recovered(_sample_recovered_tokens_for_drafting_rows, seeded)
    untouched = torch.Generator().manual_seed(SEEDS[1])
    assert torch.equal(seeded[1].get_state(), untouched.get_state())
    advanced = torch.Generator().manual_seed(SEEDS[0])
    assert not torch.equal(seeded[0].get_state(), advanced.get_state())
