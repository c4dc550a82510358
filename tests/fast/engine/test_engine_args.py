"""`engine_args`: settings, cut at launch into one engine's config -> vLLM's AsyncEngineArgs.
Imports vllm, starts no engine."""

from __future__ import annotations

import dataclasses

import pytest
from pydantic_settings import CliApp
from vllm.engine.arg_utils import AsyncEngineArgs

from app.cli import parse_settings
from app.engine.vllm.engine_config import launch_config
from app.engine.vllm.extra_args import (
    CACHE_TOKENS_KEY,
    PREDICTION_DRAFT_TOKENS_KEY,
    STEP_COST_KEY,
)
from app.engine.vllm.vllm_engine import WORKER_EXTENSION_QUALNAME, engine_args, on_cpu
from app.settings import Settings
from app.vocabulary import Route

# Two nodes' worth of model: each engine spans TP 2 x PP 2 workers on a Ray cluster.
MULTI_NODE = [
    "--model", "meta-llama/Llama-3.1-405B-Instruct",
    "--speculative-model", "meta-llama/Llama-3.2-1B-Instruct",
    "--num-speculative-tokens", "4",
    "--tensor-parallel-size", "2",
    "--pipeline-parallel-size", "2",
    "--distributed-executor-backend", "ray",
]  # fmt: skip


def args_for(
    settings: Settings, model_path: str, route: Route, shared: bool = False
) -> AsyncEngineArgs:
    """What the launch gives vLLM for one route's engine (or the one shared engine)."""
    return engine_args(launch_config(settings).engines["shared" if shared else route], model_path)


def test_an_engine_reads_only_its_own_part_of_the_settings() -> None:
    # The gateway's flags never reach an engine: its config is the same whatever they are.
    gateway_only = ["--port", "9999", "--max-running-requests", "3", "--api-key", "sk-x"]
    assert launch_config(parse_settings(gateway_only)) == launch_config(Settings())
    # And the engine's config is a value: nothing below the launch can change it.
    config = launch_config(Settings()).engines["speculative"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.max_model_len = 1  # type: ignore[misc]


@pytest.mark.parametrize("route", ["speculative", "plain"])
def test_parallelism_reaches_both_engines(route: str) -> None:
    settings = CliApp.run(Settings, cli_args=MULTI_NODE)
    args = args_for(settings, "/models/405b", route)  # type: ignore[arg-type]
    assert args.model == "/models/405b"
    assert args.tensor_parallel_size == 2
    assert args.pipeline_parallel_size == 2
    assert args.distributed_executor_backend == "ray"
    assert args.served_model_name == ["Llama-3.1-405B-Instruct"]


def test_only_the_speculative_engine_drafts() -> None:
    settings = CliApp.run(Settings, cli_args=MULTI_NODE)
    speculative = args_for(settings, "/models/405b", "speculative")
    plain = args_for(settings, "/models/405b", "plain")
    assert speculative.speculative_config == {
        "model": "meta-llama/Llama-3.2-1B-Instruct",
        "num_speculative_tokens": 4,
    }
    assert plain.speculative_config is None


def test_by_default_each_engine_is_one_worker_and_vllm_picks_the_backend() -> None:
    args = args_for(Settings(), "/models/small", "plain")
    assert (args.tensor_parallel_size, args.pipeline_parallel_size) == (1, 1)
    assert args.distributed_executor_backend is None


def test_speculative_engines_take_a_draft_length_per_request() -> None:
    speculative = args_for(Settings(), "/models/small", "speculative")
    plain = args_for(Settings(), "/models/small", "plain")
    assert (
        speculative.scheduler_cls == "app.engine.vllm.core.scheduler_choice.draft_length_scheduler"
    )
    assert speculative.worker_extension_cls == WORKER_EXTENSION_QUALNAME
    # On CPUs every engine loads it, for its kernels (app/engine/vllm/worker/cpu_kernels.py).
    assert plain.worker_extension_cls == (WORKER_EXTENSION_QUALNAME if on_cpu() else "")
    assert plain.scheduler_cls != speculative.scheduler_cls


def test_vllm_settles_async_scheduling_and_the_scheduler_follows_it() -> None:
    # Both schedulers take draft lengths (tests/fast/engine/test_draft_scheduler_in_vllm.py),
    # so nothing is forced.
    assert args_for(Settings(), "/models/small", "speculative").async_scheduling is None
    assert args_for(Settings(), "/models/small", "plain").async_scheduling is None


def test_a_shared_engine_gets_both_routes_memory() -> None:
    settings = Settings(kv_cache_memory_bytes=2**28, gpu_memory_utilization=0.9)
    own = args_for(settings, "/models/small", "speculative")
    shared = args_for(settings, "/models/small", "speculative", shared=True)
    assert (own.kv_cache_memory_bytes, shared.kv_cache_memory_bytes) == (2**28, 2**29)
    assert own.gpu_memory_utilization == settings.engine_memory_fraction(True)
    assert shared.gpu_memory_utilization == 0.9


@pytest.mark.parametrize(
    ("extra_args", "limit"),
    [(None, 5), ({}, 5), ({"specgate_draft_length": 0}, 0), ({"specgate_draft_length": 3}, 3),
     ({"specgate_draft_length": 9}, 5), ({"other": 1}, 5)],
)  # fmt: skip
def test_a_request_drafts_at_most_its_own_length(
    extra_args: dict[str, int] | None, limit: int
) -> None:
    from app.engine.vllm.extra_args import draft_limit

    assert draft_limit(extra_args, 5) == limit


def test_each_draft_row_gets_its_requests_sampling_value() -> None:
    # What vLLM's rejection sampler needs per draft row; its CPU kernel left the rows unset.
    import torch

    from app.engine.vllm.worker.drafting_patches import _expand_batch_to_tokens

    cu_num_drafts = torch.tensor([2, 2, 5], dtype=torch.int32)
    temperatures = torch.tensor([0.0, 1.0, 0.5])
    expanded = _expand_batch_to_tokens(temperatures, cu_num_drafts, 5, replace_from=0, replace_to=1)
    assert expanded.tolist() == [1.0, 1.0, 0.5, 0.5, 0.5]
    top_k = _expand_batch_to_tokens(torch.tensor([7, 8, 9], dtype=torch.int32), cu_num_drafts, 5)
    assert (top_k.dtype, top_k.tolist()) == (torch.int32, [7, 7, 9, 9, 9])


def test_the_load_format_reaches_both_engines() -> None:
    # dummy: random weights in the model's shape, from a folder of config.json and a tokenizer.
    settings = parse_settings(["--load-format", "dummy"])
    for route in ("speculative", "plain"):
        assert args_for(settings, "/models/shape-only", route).load_format == "dummy"
    assert args_for(Settings(), "/models/small", "plain").load_format == "auto"


def test_importing_the_worker_patches_changes_nothing() -> None:
    # Only the worker's extension module installs them (app/engine/vllm/worker/extension.py).
    from vllm.model_executor.layers.layernorm import RMSNorm
    from vllm.v1.sample import sampler
    from vllm.v1.sample.ops.logprobs import batched_count_greater_than
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    from app.engine.vllm.worker import cpu_kernels, drafting_patches, eager_logprobs

    assert GPUModelRunner._sample is drafting_patches._sample  # vLLM's own
    assert GPUModelRunner.propose_draft_token_ids is drafting_patches._propose
    assert RMSNorm.forward_cpu is cpu_kernels._reference_forward_cpu
    assert sampler.batched_count_greater_than is batched_count_greater_than
    assert eager_logprobs.count_greater_or_equal is not batched_count_greater_than


def test_logprobs_ranks_counted_eagerly_are_vllms() -> None:
    # vLLM's function as written, without its compile (the compile is what the CPU skips).
    import torch
    from vllm.v1.sample.ops.logprobs import batched_count_greater_than

    from app.engine.vllm.worker.eager_logprobs import count_greater_or_equal

    as_written = batched_count_greater_than._torchdynamo_orig_callable  # type: ignore[attr-defined]
    generator = torch.Generator().manual_seed(0)
    logprobs = torch.randn(5, 300, generator=generator).log_softmax(-1)
    chosen = logprobs.gather(-1, torch.randint(0, 300, (5, 1), generator=generator))
    eager = count_greater_or_equal(logprobs, chosen)
    assert torch.equal(eager, as_written(logprobs, chosen))
    assert bool((eager >= 1).all())  # the chosen token counts itself: rank 1 at best
    ties = torch.tensor([[0.1, 0.5, 0.3], [0.2, 0.2, 0.9]])
    assert count_greater_or_equal(ties, torch.tensor([[0.3], [0.2]])).tolist() == [2, 3]


def test_a_fixed_step_cost_line_reaches_the_speculative_engines_scheduler() -> None:
    settings = parse_settings(["--draft-step-cost", "40,0,2.4,2.9"])
    speculative = args_for(settings, "/models/small", "speculative")
    assert speculative.additional_config[STEP_COST_KEY] == [40.0, 0.0, 2.4, 2.9]
    learned = args_for(Settings(), "/models/small", "speculative")
    assert STEP_COST_KEY not in (learned.additional_config or {})


@pytest.mark.parametrize("value", ["40,0,2.4", "40,0,2.4,-1", "0,1,0,1", "a,b,c,d"])
def test_a_step_cost_line_that_cannot_price_a_step_is_refused(value: str) -> None:
    with pytest.raises(ValueError):
        parse_settings(["--draft-step-cost", value])


def test_the_workers_bounds_reach_the_speculative_engines_worker() -> None:
    settings = parse_settings(["--suffix-cache-tokens", "123456"])
    speculative = args_for(settings, "/models/small", "speculative")
    assert speculative.additional_config == {
        CACHE_TOKENS_KEY: 123456,
        PREDICTION_DRAFT_TOKENS_KEY: 32,
    }
    assert STEP_COST_KEY not in speculative.additional_config
    settings = parse_settings(["--prediction-draft-tokens", "48"])
    speculative = args_for(settings, "/models/small", "speculative")
    assert speculative.additional_config[PREDICTION_DRAFT_TOKENS_KEY] == 48
    with pytest.raises(ValueError):
        parse_settings(["--prediction-draft-tokens", "0"])
