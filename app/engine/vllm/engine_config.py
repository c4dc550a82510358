"""What the embedded vLLM engines read of the settings, cut once where they are started
(`launch_config`) into frozen values: the launch's own (model, layout, cores, devices, memory
plan) and one engine's (`EngineConfig`, what vLLM's AsyncEngineArgs are built from). Nothing
below the launch sees the whole `Settings`, so a change to an unrelated flag cannot reach an
engine, and a replica or a test builds an engine from these values alone.

vLLM-free: app/engine/start.py and the Ray replica build a LaunchConfig before anything of
vLLM is imported.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from app.settings import Settings
from app.vocabulary import Route

EngineRole = Literal["speculative", "plain", "shared"]


@dataclass(frozen=True)
class EngineConfig:
    """One embedded engine, its route's values resolved: a `shared` engine (layout one)
    serves both routes and holds both routes' memory."""

    model_id: str
    dtype: str
    max_model_len: int | None
    tensor_parallel_size: int
    pipeline_parallel_size: int
    distributed_executor_backend: Literal["mp", "ray"] | None
    # The share of each GPU's memory this engine may use.
    memory_fraction: float
    # Per route; a shared engine gets twice this (engine_args).
    kv_cache_memory_bytes: int | None
    enforce_eager: bool | None
    load_format: str
    # vLLM's speculative_config; None for the plain route's own engine.
    speculative_config: Mapping[str, Any] | None
    suffix_cache_tokens: int
    prediction_draft_tokens: int
    draft_step_cost: tuple[float, ...]  # empty: learned as the engine runs
    shared: bool = False


@dataclass(frozen=True)
class LaunchConfig:
    """Starting the embedded engines: which model, in which layout, on which cores or GPUs,
    with which CPU runtime, and each engine's config."""

    model: str | None  # None: the embedded default, prepared under models_dir
    models_dir: Path
    layout: Literal["auto", "one", "two"]
    engine_cpus: Literal["split", "shared"]
    recommended_cpu_runtime: bool
    speculative_devices: tuple[int, ...]
    plain_devices: tuple[int, ...]
    separate_devices: bool  # each route's engine on GPUs of its own (Settings says when)
    # The memory plan's inputs (app/engine/vllm/memory_plan.py), beside the engines' own.
    draft_tensor_parallel_size: int | None
    gpu_memory_utilization: float
    speculative_memory_share: float
    engines: Mapping[EngineRole, EngineConfig]

    @property
    def dtype(self) -> str:
        return self.engines["plain"].dtype

    @property
    def weight_ranks(self) -> int:
        """Tensor x pipeline parallel: the GPUs one engine's weights spread over."""
        plain = self.engines["plain"]
        return plain.tensor_parallel_size * plain.pipeline_parallel_size

    def devices(self, route: Route) -> tuple[int, ...]:
        return self.speculative_devices if route == "speculative" else self.plain_devices

    @property
    def speculative_config(self) -> Mapping[str, Any]:
        config = self.engines["speculative"].speculative_config
        assert config is not None  # launch_config gives the speculative engine one
        return config


def launch_config(settings: Settings) -> LaunchConfig:
    """The embedded engines' part of the settings (raises ValueError where the speculative
    flags contradict --speculative-config)."""
    speculative = settings.engine_speculative_config()

    def engine(role: EngineRole) -> EngineConfig:
        shared = role == "shared"
        return EngineConfig(
            model_id=settings.model_id,
            dtype=settings.dtype,
            max_model_len=settings.max_model_len,
            tensor_parallel_size=settings.tensor_parallel_size,
            pipeline_parallel_size=settings.pipeline_parallel_size,
            distributed_executor_backend=settings.distributed_executor_backend,
            memory_fraction=(
                settings.gpu_memory_utilization
                if shared
                else settings.engine_memory_fraction(role == "speculative")
            ),
            kv_cache_memory_bytes=settings.kv_cache_memory_bytes,
            enforce_eager=settings.enforce_eager,
            load_format=settings.load_format,
            speculative_config=None if role == "plain" else speculative,
            suffix_cache_tokens=settings.suffix_cache_tokens,
            prediction_draft_tokens=settings.prediction_draft_tokens,
            draft_step_cost=settings.draft_step_cost,
            shared=shared,
        )

    return LaunchConfig(
        model=settings.model,
        models_dir=settings.embedded_model_dir,
        layout=settings.engine_layout,
        engine_cpus=settings.engine_cpus,
        recommended_cpu_runtime=settings.cpu_runtime == "recommended",
        speculative_devices=settings.speculative_devices,
        plain_devices=settings.plain_devices,
        separate_devices=settings.separate_devices,
        draft_tensor_parallel_size=settings.speculative_draft_tensor_parallel_size,
        gpu_memory_utilization=settings.gpu_memory_utilization,
        speculative_memory_share=settings.speculative_memory_share,
        engines={role: engine(role) for role in ("speculative", "plain", "shared")},
    )
