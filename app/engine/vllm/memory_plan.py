"""Whether the engines fit on the GPUs before anything is loaded, and which layout to use.

Two engines (`--engine-layout two`) hold two copies of the weights: on a GPU each gets its
share of `--gpu-memory-utilization` (`--speculative-memory-share`), unless each route has
devices of its own (`--speculative-devices`, `--plain-devices`). The seed's own example,
Llama-3-70B over four 80 GB GPUs at 0.92, gives each engine about 36.8 GB a GPU against
35.3 GB of weights a GPU: no room for a KV cache, found only after minutes of loading. This
module prices the plan from the model's config.json and the devices' memory, refuses a plan
that cannot fit with the numbers and the fix, and resolves `auto`: one engine wherever two
copies of the weights would take more than a small share of the memory (and on CPUs, where
one engine measured ahead: docs/engines.md, "One engine or two").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from app.engine.vllm.engine_config import LaunchConfig
from app.vocabulary import ROUTES

Layout = Literal["one", "two"]
# Two copies of the weights may take this share of the memory before `auto` picks one engine.
TWO_COPIES_SHARE = 0.1
GB = 1e9
# The least KV cache an engine must be left per device to be worth starting.
MIN_KV_BYTES = GB
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float8": 1, "int8": 1}


class MemoryPlanError(ValueError):
    """A layout whose engines cannot fit on their devices."""


@dataclass(frozen=True)
class DeviceFacts:
    """What the engines will run on, as the platform reports it."""

    gpu: bool
    memory_bytes: int  # per device


def parameters(config: dict[str, Any]) -> int:
    """A decoder-only transformer's parameter count from its Hugging Face config."""
    text = config.get("text_config") or config
    hidden = int(text["hidden_size"])
    heads = int(text["num_attention_heads"])
    kv_heads = int(text.get("num_key_value_heads") or heads)
    head_dim = int(text.get("head_dim") or hidden // heads)
    experts = int(text.get("num_local_experts") or text.get("num_experts") or 1)
    intermediate = int(text["intermediate_size"])
    if experts > 1:
        intermediate = int(text.get("moe_intermediate_size") or intermediate)
    attention = hidden * head_dim * (2 * heads + 2 * kv_heads)
    mlp = 3 * hidden * intermediate * experts
    tied = bool(text.get("tie_word_embeddings", config.get("tie_word_embeddings", False)))
    embeddings = int(text["vocab_size"]) * hidden * (1 if tied else 2)
    return int(text["num_hidden_layers"]) * (attention + mlp) + embeddings


def weight_bytes(config: dict[str, Any], dtype: str) -> int:
    """The weights' size in `dtype` ("auto": the config's own dtype)."""
    name = dtype if dtype != "auto" else str(config.get("torch_dtype") or "bfloat16")
    return parameters(config) * DTYPE_BYTES.get(name.removeprefix("torch."), 2)


def needs(
    config: LaunchConfig, target: dict[str, Any], draft: dict[str, Any] | None
) -> dict[str, float]:
    """Per route, the weights on each engine's busiest device, in bytes (the draft model sits
    on the first ranks of the speculative engine)."""
    per_device = weight_bytes(target, config.dtype) / config.weight_ranks
    draft_bytes = 0.0
    if draft is not None:
        draft_ranks = config.draft_tensor_parallel_size or 1
        draft_bytes = weight_bytes(draft, config.dtype) / draft_ranks
    return {"speculative": per_device + draft_bytes, "plain": per_device}


def choose_layout(config: LaunchConfig, facts: DeviceFacts, need: dict[str, float]) -> Layout:
    if config.layout != "auto":
        return config.layout
    if not facts.gpu:
        return "one"
    if config.separate_devices:
        return "two"
    two_copies = need["speculative"] + need["plain"]
    return "one" if two_copies > TWO_COPIES_SHARE * facts.memory_bytes else "two"


def check_plan(
    config: LaunchConfig, layout: Layout, facts: DeviceFacts, need: dict[str, float]
) -> None:
    """Refuse a plan in which an engine's weights leave it no KV cache on its devices."""
    if not facts.gpu:
        return
    memory = facts.memory_bytes
    if layout == "one":
        budgets = {"speculative": config.gpu_memory_utilization * memory}
    else:
        budgets = {route: config.engines[route].memory_fraction * memory for route in ROUTES}
    for route, budget in budgets.items():
        weights = need[route]
        if budget - weights >= MIN_KV_BYTES:
            continue
        engine = "the one engine" if layout == "one" else f"the {route} engine"
        raise MemoryPlanError(
            f"--engine-layout {layout} cannot fit: {engine} may use {budget / GB:.1f} GB of each "
            f"GPU's {memory / GB:.1f} GB (--gpu-memory-utilization "
            f"{config.gpu_memory_utilization}"
            + (
                f", --speculative-memory-share {config.speculative_memory_share}"
                if layout == "two" and not config.separate_devices
                else ""
            )
            + f") and its weights take {weights / GB:.1f} GB a GPU, leaving "
            f"{max(0.0, budget - weights) / GB:.1f} GB for the KV cache (at least "
            f"{MIN_KV_BYTES / GB:.1f} GB needed). "
            + (
                "Use --engine-layout one (one engine serves both routes: the weights once), "
                "give each route its own GPUs (--speculative-devices, --plain-devices), or "
                "raise --tensor-parallel-size."
                if layout == "two"
                else "Raise --tensor-parallel-size or --gpu-memory-utilization."
            )
        )
