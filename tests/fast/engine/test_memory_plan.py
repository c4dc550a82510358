"""The engines' memory plan and layout, with the devices' facts faked: no GPU, no weights."""

from __future__ import annotations

import os
from contextlib import AsyncExitStack
from typing import Any

import pytest

from app.cli import parse_settings
from app.engine.protocol import StopsOnExit
from app.engine.vllm import launch
from app.engine.vllm.engine_config import launch_config
from app.engine.vllm.memory_plan import (
    DeviceFacts,
    MemoryPlanError,
    check_plan,
    choose_layout,
    needs,
    parameters,
)

GB = 10**9
H100 = DeviceFacts(gpu=True, memory_bytes=80 * GB)
CPU = DeviceFacts(gpu=False, memory_bytes=0)
LLAMA_70B = {
    "hidden_size": 8192,
    "intermediate_size": 28672,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "num_hidden_layers": 80,
    "vocab_size": 128256,
    "torch_dtype": "bfloat16",
}
LLAMA_8B = {**LLAMA_70B, "hidden_size": 4096, "intermediate_size": 14336,
            "num_attention_heads": 32, "num_hidden_layers": 32}  # fmt: skip
LLAMA_1B = {**LLAMA_8B, "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16,
            "head_dim": 64, "tie_word_embeddings": True}  # fmt: skip
TINY = {**LLAMA_8B, "hidden_size": 256, "intermediate_size": 512, "num_attention_heads": 4,
        "num_key_value_heads": 4, "num_hidden_layers": 2, "vocab_size": 32000}  # fmt: skip
# The seed's example: Llama-3-70B over four GPUs at 0.92, a 1B draft on one.
SEED = [
    "--tensor-parallel-size", "4", "--gpu-memory-utilization", "0.92",
    "--speculative-model", "meta-llama/Llama-3.2-1B-Instruct", "--num-speculative-tokens", "5",
    "--speculative-draft-tensor-parallel-size", "1",
]  # fmt: skip


def test_parameter_counts_match_the_published_sizes() -> None:
    assert parameters(LLAMA_70B) == pytest.approx(70.6e9, rel=0.01)
    assert parameters(LLAMA_8B) == pytest.approx(8.03e9, rel=0.01)
    assert parameters(LLAMA_1B) == pytest.approx(1.24e9, rel=0.01)


def test_the_seeds_example_gets_one_engine_and_two_is_refused_with_the_numbers() -> None:
    settings = launch_config(parse_settings(SEED))
    need = needs(settings, LLAMA_70B, LLAMA_1B)
    assert need["plain"] == pytest.approx(35.3 * GB, rel=0.01)
    assert choose_layout(settings, H100, need) == "one"
    check_plan(settings, "one", H100, need)  # 73.6 GB a GPU holds 38 GB of weights
    two = launch_config(parse_settings([*SEED, "--engine-layout", "two"]))
    with pytest.raises(MemoryPlanError) as refused:
        check_plan(two, choose_layout(two, H100, need), H100, need)
    message = str(refused.value)
    assert "the speculative engine may use 36.8 GB of each GPU's 80.0 GB" in message
    assert "weights take 37.7 GB a GPU" in message
    assert "--engine-layout one" in message and "--speculative-devices" in message


def test_two_engines_fit_on_their_own_gpus() -> None:
    split = launch_config(parse_settings(
        [*SEED, "--engine-layout", "two", "--speculative-devices", "0,1,2,3",
         "--plain-devices", "4,5,6,7"]
    ))  # fmt: skip
    need = needs(split, LLAMA_70B, LLAMA_1B)
    assert choose_layout(split, H100, need) == "two"
    check_plan(split, "two", H100, need)  # each engine has 73.6 GB a GPU


def test_auto_keeps_two_engines_only_for_weights_small_beside_the_gpu() -> None:
    settings = launch_config(parse_settings([]))
    assert choose_layout(settings, H100, needs(settings, LLAMA_8B, None)) == "one"
    assert choose_layout(settings, H100, needs(settings, TINY, None)) == "two"
    assert choose_layout(settings, CPU, {}) == "one"  # one engine measured ahead on CPUs
    pinned = launch_config(parse_settings(["--engine-layout", "two"]))
    assert choose_layout(pinned, CPU, {}) == "two"


def test_one_engine_that_cannot_hold_its_weights_is_refused() -> None:
    settings = launch_config(parse_settings(["--engine-layout", "one"]))
    with pytest.raises(MemoryPlanError, match="--tensor-parallel-size"):
        check_plan(settings, "one", H100, needs(settings, LLAMA_70B, None))


@pytest.mark.parametrize(
    "flags, problem",
    [
        (["--speculative-devices", "0"], "go together"),
        (["--speculative-devices", "0", "--plain-devices", "0"], "must not share"),
        (["--speculative-devices", "0,1", "--plain-devices", "2"], "names 2 GPUs"),
        (["--engine-layout", "one", "--speculative-devices", "0", "--plain-devices", "1"],
         "need two engines"),
    ],
)  # fmt: skip
def test_device_lists_are_checked(flags: list[str], problem: str) -> None:
    with pytest.raises(Exception, match=problem):
        parse_settings(flags)


async def test_each_routes_engine_core_is_spawned_seeing_only_its_gpus(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from app.engine.vllm import vllm_engine

    seen: dict[str, str | None] = {}

    class SpawnedEngine(StopsOnExit):
        """What VllmEngine.start would return, once the engine core was spawned."""

        @staticmethod
        def start(config: Any, model_path: str, route: str) -> Any:
            seen[route] = os.environ.get("CUDA_VISIBLE_DEVICES")
            return SpawnedEngine()

        async def aclose(self) -> None:
            pass

    monkeypatch.setattr(vllm_engine, "on_cpu", lambda: False)
    monkeypatch.setattr(vllm_engine, "VllmEngine", SpawnedEngine)
    monkeypatch.setattr(launch, "gpu_facts", lambda: H100)
    monkeypatch.setattr(launch, "model_config", lambda model: LLAMA_8B)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    settings = launch_config(
        parse_settings(
            ["--model", "/models/llama-8b", "--speculative-devices", "0", "--plain-devices", "1"]
        )
    )
    async with AsyncExitStack() as stack:
        await launch.start_vllm_engines(settings, stack)
    assert seen == {"speculative": "0", "plain": "1"}
    assert "CUDA_VISIBLE_DEVICES" not in os.environ
