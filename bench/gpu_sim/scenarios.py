"""The simulated machines, arms and traffic of the GPU-scale comparison (issue 21)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path

from bench.gpu_sim.arms import BatchTable, FixedK, NoSpeculation, Oracle, Specgate
from bench.gpu_sim.costs import StepPricer, system_memory_bytes
from bench.gpu_sim.engine import (
    GPU_MEMORY_UTILIZATION,
    Arm,
    Drafter,
    EngineSetup,
    ModelDrafter,
    NgramDrafter,
    SuffixDrafter,
)
from bench.gpu_sim.workload import Phase

GPU = "h200_sxm"
K = 5  # the speculative engines' num_speculative_tokens
DRAFT_1B = str(Path(__file__).resolve().parent / "model_configs" / "llama-3.2-1b")
# What vLLM keeps free of weights and KV for activations and CUDA graphs: an assumption.
ACTIVATION_SHARE = 0.05


@dataclass(frozen=True)
class Machine:
    name: str
    model: str
    tp: int
    method: str  # ngram, draft_model or eagle
    # How much slower than the 8B on one H200 a request runs alone (scales the traffic).
    pace: float = 1.0


MACHINES = (
    Machine("llama-8b-h200-ngram", "meta-llama/Meta-Llama-3.1-8B", 1, "ngram"),
    Machine("llama-8b-h200-draft1b", "meta-llama/Meta-Llama-3.1-8B", 1, "draft_model"),
    Machine("llama-8b-h200-eagle", "meta-llama/Meta-Llama-3.1-8B", 1, "eagle"),
    # The seed's example; aiconfigurator bundles Llama-3.1-70B, the same shape as Llama-3-70B.
    Machine("llama-70b-4xh200-draft1b", "meta-llama/Meta-Llama-3.1-70B", 4, "draft_model", 2.5),
    Machine("llama-8b-h200-suffix", "meta-llama/Meta-Llama-3.1-8B", 1, "suffix"),
    Machine("llama-70b-4xh200-suffix", "meta-llama/Meta-Llama-3.1-70B", 4, "suffix", 2.5),
)
# vLLM's suffix arm at its defaults: num_speculative_tokens defaults to the tree depth, and
# each request verifies whatever its trees offer (their own lengths, up to 12 with the
# defaults), every step, at every batch size.
SUFFIX_DEFAULTS = "suffix-defaults"
# Deeper trees that draft further from long matches (SGLang's suffix example: depth 64,
# factor 2, 16 draft tokens): up to 32 tokens a draft. specgate runs over these, its rule
# cutting each draft to what pays; vLLM's arm over the same trees verifies every one.
DEEP_SUFFIX = SuffixDrafter(depth=64, factor=2.0)
DEEP_SUFFIX_K = 32
SUFFIX_DEEP = "suffix-deep"


@cache
def pricer(model: str, tp: int) -> StepPricer:
    return StepPricer(model, GPU, tp)


def setup(machine: Machine, upper_bound: bool = False) -> EngineSetup:
    target = pricer(machine.model, machine.tp)
    drafter: Drafter
    weights = 2 * target.shape.parameters()
    kv_per_token = target.shape.kv_bytes_per_token(tp=1)
    k = K
    if machine.method == "ngram":
        drafter = NgramDrafter()
    elif machine.method == "suffix":
        drafter, k = SuffixDrafter(), SuffixDrafter().depth
    elif machine.method == "eagle":
        drafter = ModelDrafter("eagle", target)
    else:
        draft = pricer(DRAFT_1B, machine.tp)
        drafter = ModelDrafter("draft_model", draft)
        weights += 2 * draft.shape.parameters()
        kv_per_token += draft.shape.kv_bytes_per_token(tp=1)
    memory = machine.tp * system_memory_bytes(GPU) * (GPU_MEMORY_UTILIZATION - ACTIVATION_SHARE)
    kv_tokens = int((memory - weights) / kv_per_token)
    return EngineSetup(machine.name, target, drafter, k, kv_tokens, upper_bound=upper_bound)


# vLLM's speculation by batch size, [[min, max, K], ...]: a family from "draft long only when
# alone" to "draft a little at every size"; the best per scenario is the strongest static peer.
TABLES: dict[str, tuple[tuple[int, int, int], ...]] = {
    "table-alone5": ((1, 1, 5), (2, 1024, 0)),
    "table-5to0@8": ((1, 8, 5), (9, 1024, 0)),
    "table-5to2@16": ((1, 16, 5), (17, 1024, 2)),
    "table-5-3-2-1": ((1, 3, 5), (4, 16, 3), (17, 64, 2), (65, 1024, 1)),
    "table-5-4-3-2": ((1, 8, 5), (9, 32, 4), (33, 128, 3), (129, 1024, 2)),
    "table-5-3-2@64": ((1, 16, 5), (17, 64, 3), (65, 256, 2), (257, 1024, 1)),
    "table-4to2@32": ((1, 32, 4), (33, 1024, 2)),
    "table-3to1@64": ((1, 64, 3), (65, 1024, 1)),
}


def arms(engine: EngineSetup) -> dict[str, Callable[[], Arm]]:
    """Fresh arms by name (each run starts from nothing learned, as after a restart)."""
    made: dict[str, Callable[[], Arm]] = {"no-spec": lambda: NoSpeculation(engine, "no-spec")}
    for k in range(1, K + 1):
        made[f"k{k}"] = lambda k=k: FixedK(engine, f"k{k}", k=k)  # type: ignore[misc]
    for name, table in TABLES.items():
        made[name] = lambda name=name, table=table: BatchTable(engine, name, table=table)  # type: ignore[misc]
    ruled = engine
    if engine.drafter.method == "suffix":
        ruled = replace(engine, drafter=DEEP_SUFFIX, k=DEEP_SUFFIX_K)
        made[SUFFIX_DEFAULTS] = lambda: FixedK(engine, SUFFIX_DEFAULTS, k=engine.k)
        made[SUFFIX_DEEP] = lambda: FixedK(ruled, SUFFIX_DEEP, k=ruled.k)
    made["oracle"] = lambda: Oracle(ruled, "oracle")
    made["specgate"] = lambda: Specgate(ruled, "specgate")
    made["specgate-sized"] = lambda: Specgate(ruled, "specgate-sized", sized=True)
    return made


def changing_load(pace: float, scale: float = 1.0) -> list[Phase]:
    """Quiet (about two in flight), a burst (well over a hundred), quiet again."""
    n = lambda count: max(4, int(count * scale))  # noqa: E731
    return [
        Phase("quiet1", n(60), rate_per_s=0.8 / pace),
        Phase("burst", n(300), rate_per_s=40.0 / pace),
        Phase("quiet2", n(60), rate_per_s=0.8 / pace),
    ]


STEADY = (1, 2, 4, 8, 16, 32, 64, 128, 256)
MIX_CONCURRENCY = 16


def steady(concurrency: int, scale: float = 1.0) -> list[Phase]:
    requests = max(8, int(max(40, 3 * concurrency) * scale))
    return [Phase(f"c{concurrency}", requests, concurrency=concurrency)]
