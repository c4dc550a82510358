"""What vLLM loads in the worker process: every embedded engine on a CPU, and every
speculative engine, names `WorkerExtension` as its `worker_extension_cls`
(app/engine/vllm/vllm_engine.py: WORKER_EXTENSION_QUALNAME).

vLLM offers no call into an extension at start-up, only the import of its module, so this
module's import installs the worker's changes, and nothing else imports it:
- app/engine/vllm/worker/drafting_patches.py: per-request draft lengths (each change passes
  through on an engine that does not draft);
- app/engine/vllm/worker/cpu_kernels.py: one-pass RMSNorm kernels on CPUs;
- app/engine/vllm/worker/eager_logprobs.py: logprobs' ranks counted without a compile on CPUs.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from app.engine.generation import SuffixCacheCounts
from app.engine.vllm.worker import cpu_kernels, drafting_patches, eager_logprobs

drafting_patches.install()
cpu_kernels.install()
eager_logprobs.install()


class WorkerExtension:
    """Loading it installs the changes in the worker; its methods answer the engine's
    `collective_rpc` calls (mixed into vLLM's worker, whose `model_runner` they read)."""

    model_runner: Any

    def suffix_cache_counts(self) -> dict[str, int] | None:
        """The suffix drafter's counts, or None where the engine drafts otherwise. A plain
        dict: the engine core passes answers on to the gateway with msgpack, which turns a
        dataclass into something else."""
        counts = getattr(getattr(self.model_runner, "drafter", None), "counts", None)
        return asdict(counts) if isinstance(counts, SuffixCacheCounts) else None
