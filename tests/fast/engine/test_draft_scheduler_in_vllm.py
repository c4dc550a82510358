"""Per-request draft lengths at vLLM's scheduler level, under synchronous and async
scheduling alike: the scheduler the engine arguments name is built from a small VllmConfig
and driven through schedule() / update_from_output() with model outputs made here, as
vLLM's own tests/v1/core do. No model runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from vllm.config import CacheConfig, ModelConfig, SchedulerConfig, SpeculativeConfig, VllmConfig
from vllm.sampling_params import SamplingParams
from vllm.utils.import_utils import resolve_obj_by_qualname
from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.output import SchedulerOutput
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
from vllm.v1.outputs import DraftTokenIds, ModelRunnerOutput
from vllm.v1.request import Request
from vllm.v1.structured_output import StructuredOutputManager

from app.engine.vllm.engine_config import launch_config
from app.engine.vllm.extra_args import (
    ACCEPTANCE_PRIOR_KEY,
    CLIENT_KEY,
    CLIENT_WEIGHT_KEY,
    DRAFT_LENGTH_KEY,
    PREDICTED_ATTRIBUTE,
    PREDICTION_ACCEPTED_KEY,
)
from app.engine.vllm.vllm_engine import engine_args
from app.settings import Settings
from tests.tiny_llama import tiny_llama_folder

K = 5
BLOCK = 16


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_llama_folder(tmp_path_factory.mktemp("tiny-llama"))


def scheduler(model_folder: Path, async_scheduling: bool, max_num_seqs: int = 16) -> Any:
    """The scheduler the speculative engine's arguments name, as vLLM's engine core builds
    it, with async scheduling as vLLM would settle it on a GPU (CPUs turn it off)."""
    model = ModelConfig(model=str(model_folder), skip_tokenizer_init=True, max_model_len=1024)
    config = VllmConfig(
        model_config=model,
        scheduler_config=SchedulerConfig(
            max_num_seqs=max_num_seqs,
            max_num_batched_tokens=1024,
            max_model_len=1024,
            is_encoder_decoder=False,
        ),
        cache_config=CacheConfig(block_size=BLOCK, enable_prefix_caching=False),
        speculative_config=SpeculativeConfig(
            method="ngram", num_speculative_tokens=K, prompt_lookup_min=2, prompt_lookup_max=5
        ),
    )
    config.scheduler_config.async_scheduling = async_scheduling
    config.cache_config.num_gpu_blocks = 1000
    kv_cache = KVCacheConfig(
        num_blocks=1000,
        kv_cache_tensors=[],
        kv_cache_groups=[
            KVCacheGroupSpec(
                ["layer"],
                FullAttentionSpec(
                    block_size=BLOCK, num_kv_heads=1, head_size=1, dtype=torch.float32
                ),
            )
        ],
    )
    named = engine_args(
        launch_config(Settings()).engines["speculative"], str(model_folder)
    ).scheduler_cls
    assert isinstance(named, str)
    build = resolve_obj_by_qualname(named)
    return build(
        vllm_config=config,
        kv_cache_config=kv_cache,
        structured_output_manager=StructuredOutputManager(config),
        log_stats=True,
        block_size=BLOCK,
    )


def add(made: Any, request_id: str, **extra_args: float) -> None:
    params = SamplingParams(max_tokens=500, extra_args=extra_args or None)
    made.add_request(Request(request_id, list(range(1, 21)), params, None))


PROPOSAL = [11, 12, 13, 14, 15]


def step(made: Any, output: SchedulerOutput, accepted: int = 0, copying: str = "") -> None:
    """The model's answer to a scheduled step: each request's first `accepted` verified
    drafts (the drafter's proposal; for `copying` alone, when named) and then a token of its
    own."""
    ids = list(output.num_scheduled_tokens)
    sampled = []
    for i in ids:
        lands = accepted if not copying or i == copying else 0
        landed = min(lands, len(output.scheduled_spec_decode_tokens.get(i, ())))
        sampled.append([*PROPOSAL[:landed], 99 if landed < lands or not lands else 7])
    runner = ModelRunnerOutput(
        req_ids=ids, req_id_to_index={i: n for n, i in enumerate(ids)}, sampled_token_ids=sampled
    )
    made.update_from_output(output, runner)
    if not made.scheduler_config.async_scheduling:
        # Synchronous: the engine core hands the drafter's proposals over after the step
        # (vllm/v1/engine/core.py, post_step); under async scheduling it never does.
        made.update_draft_token_ids(DraftTokenIds(ids, [list(PROPOSAL) for _ in ids]))


@pytest.mark.parametrize("async_scheduling", [False, True], ids=["sync", "async"])
def test_each_request_verifies_at_most_its_own_length(
    model_folder: Path, async_scheduling: bool
) -> None:
    made = scheduler(model_folder, async_scheduling)
    assert isinstance(made, AsyncScheduler) == async_scheduling
    add(made, "two", **{DRAFT_LENGTH_KEY: 2})
    add(made, "never", **{DRAFT_LENGTH_KEY: 0})
    add(made, "engine-k")
    step(made, made.schedule())  # the prompts
    for _ in range(3):
        output = made.schedule()
        drafts = {i: len(d) for i, d in output.scheduled_spec_decode_tokens.items()}
        assert drafts.get("two", 0) <= 2 and drafts.get("two", 0) > 0, drafts
        assert drafts.get("never", 0) == 0, drafts
        assert drafts.get("engine-k") == K, drafts
        assert output.num_scheduled_tokens["never"] == 1
        step(made, output)


@pytest.mark.parametrize("async_scheduling", [False, True], ids=["sync", "async"])
def test_adaptive_requests_draft_more_where_drafts_land(
    model_folder: Path, async_scheduling: bool
) -> None:
    made = scheduler(model_folder, async_scheduling)
    add(made, "copying", **{ACCEPTANCE_PRIOR_KEY: 0.5})
    add(made, "fresh", **{ACCEPTANCE_PRIOR_KEY: 0.5})
    step(made, made.schedule())
    lengths: dict[str, list[int]] = {"copying": [], "fresh": []}
    for _ in range(20):
        output = made.schedule()
        for request_id, seen in lengths.items():
            seen.append(len(output.scheduled_spec_decode_tokens.get(request_id, ())))
        step(made, output, accepted=K, copying="copying")  # the copy's drafts all land
    assert lengths["fresh"][-1] < lengths["fresh"][0], lengths
    assert lengths["fresh"][-1] < lengths["copying"][-1], lengths


def test_a_prediction_s_landed_drafts_are_counted_and_handed_out_when_it_finishes(
    model_folder: Path,
) -> None:
    made = scheduler(model_folder, async_scheduling=False)
    limit = 14
    params = SamplingParams(max_tokens=limit, extra_args={ACCEPTANCE_PRIOR_KEY: 0.5})
    made.add_request(Request("predicting", list(range(1, 21)), params, None))
    add(made, "guessing", **{ACCEPTANCE_PRIOR_KEY: 0.5})
    kept = 0  # the predicting request's tokens that came from its drafts, within max_tokens
    handed_out: dict[str, Any] = {}
    output = made.schedule()
    for _ in range(40):
        ids = list(output.num_scheduled_tokens)
        sampled = []
        for i in ids:
            drafts = list(output.scheduled_spec_decode_tokens.get(i, ()))
            if i == "predicting":  # every verified draft lands; its own token is not the next
                room = limit - made.requests[i].num_output_tokens
                kept += min(len(drafts), room)
                sampled.append([*drafts, 7])
            else:
                sampled.append([99])  # the drafter's guesses never land
        runner = ModelRunnerOutput(
            req_ids=ids,
            req_id_to_index={i: n for n, i in enumerate(ids)},
            sampled_token_ids=sampled,
        )
        for outputs in made.update_from_output(output, runner).values():
            for finished in outputs.outputs:
                if finished.finish_reason is not None:
                    handed_out[finished.request_id] = finished.kv_transfer_params
        live = [i for i in ids if i in made.requests]
        proposals = [list(PROPOSAL) for _ in live]
        drafts = DraftTokenIds(live, proposals)
        setattr(drafts, PREDICTED_ATTRIBUTE, [i == "predicting" for i in live])
        made.update_draft_token_ids(drafts)
        if "predicting" in handed_out:
            break
        output = made.schedule()
    assert kept > 0
    assert handed_out["predicting"] == {PREDICTION_ACCEPTED_KEY: kept}
    assert "predicting" not in made._prediction_accepted  # forgotten with the request


def add_for(made: Any, client: str, request_id: str, prompt_length: int = 20) -> None:
    """A one-token request of `client`'s (weight 1)."""
    params = SamplingParams(max_tokens=1, extra_args={CLIENT_KEY: client, CLIENT_WEIGHT_KEY: 1.0})
    made.add_request(Request(request_id, list(range(1, prompt_length + 1)), params, None))


def start_order(made: Any, steps: int) -> list[str]:
    """The requests in the order the scheduler starts them, over `steps` steps, each request
    ending after its one token."""
    started: list[str] = []
    for _ in range(steps):
        output = made.schedule()
        started += [r.req_id for r in output.scheduled_new_reqs]
        ids = list(output.num_scheduled_tokens)
        runner = ModelRunnerOutput(
            req_ids=ids,
            req_id_to_index={i: n for n, i in enumerate(ids)},
            sampled_token_ids=[[7] for _ in ids],
        )
        made.update_from_output(output, runner)
    return started


@pytest.mark.parametrize("async_scheduling", [False, True], ids=["sync", "async"])
def test_waiting_requests_start_in_fair_share_order(
    model_folder: Path, async_scheduling: bool
) -> None:
    """Two sequences at a time: client a's six requests arrived first, b's two after; b's are
    started second and fourth, not seventh and eighth (issue 43)."""
    made = scheduler(model_folder, async_scheduling, max_num_seqs=2)
    for client, count in (("a", 6), ("b", 2)):
        for i in range(count):
            add_for(made, client, f"{client}{i}")
    assert start_order(made, 12) == ["a0", "b0", "a1", "b1", "a2", "a3", "a4", "a5"]


def test_one_client_keeps_vllm_s_own_order(model_folder: Path) -> None:
    made = scheduler(model_folder, async_scheduling=False, max_num_seqs=2)
    for i in range(5):
        add_for(made, "a", f"a{i}", prompt_length=20 + i)
    assert start_order(made, 8) == ["a0", "a1", "a2", "a3", "a4"]
