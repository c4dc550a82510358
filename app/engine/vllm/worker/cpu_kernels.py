"""One-pass C++ kernels for RMSNorm on CPUs, installed in vLLM's worker process.

An eager CPU engine (specgate's default there) runs vLLM 0.32's RMSNorm as its PyTorch
reference: a cast, an add, a square, a mean, an rsqrt and two products, each its own pass
over the activations and its own OpenMP region. vLLM ships one-pass kernels for both norms
in its CPU extension (`torch.ops._C.rms_norm`, `fused_add_rms_norm`) but dispatches them
only on GPUs (vllm/kernels/vllm_c.py); under torch.compile Inductor fuses the reference
instead. Profiled in a burst on the 2-core CPU, the reference was 8 % of the worker's time
(bench/RESULTS.md, "Never drafting, against vLLM's plain server").

The kernels compute in float32 like the reference; their sums run in another order, so a
norm may differ from the reference's in the last bits (within 1e-5 of it,
tests/fast/engine/test_cpu_kernels.py) while the residual stream is the same sum. Both
routes of an engine run the same kernels, so a request's route never changes its answer.
Inputs they do not take (a variance over part of the row, a weight of another dtype,
strided views) keep the reference.

`SPECGATE_CPU_KERNELS=reference` in the environment the engine is started with keeps vLLM's
own choice, for comparisons.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from vllm.model_executor.layers.layernorm import RMSNorm
from vllm.platforms import current_platform

VARIABLE = "SPECGATE_CPU_KERNELS"

_reference_forward_cpu = RMSNorm.forward_cpu


def enabled() -> bool:
    return current_platform.is_cpu() and os.environ.get(VARIABLE, "fused") != "reference"


def _takes(norm: RMSNorm, x: torch.Tensor, residual: torch.Tensor | None) -> bool:
    weight = norm.weight
    return (
        norm.has_weight
        and norm.variance_size_override is None
        and weight.dtype == x.dtype
        and x.is_contiguous()
        and (residual is None or (residual.is_contiguous() and residual.dtype == x.dtype))
    )


def _rms_norm_in_one_pass(
    self: RMSNorm, x: torch.Tensor, residual: torch.Tensor | None = None
) -> Any:
    if not _takes(self, x, residual):
        return _reference_forward_cpu(self, x, residual)  # type: ignore[no-untyped-call]
    weight = self.weight.data
    if residual is None:
        out = torch.empty_like(x)
        torch.ops._C.rms_norm(out, x, weight, self.variance_epsilon)
        return out
    # In place, as vLLM's GPU kernel: residual <- x + residual, x <- norm(residual) * weight.
    torch.ops._C.fused_add_rms_norm(x, residual, weight, self.variance_epsilon)
    return x, residual


def install() -> None:
    """Use the one-pass kernels in this process's RMSNorm layers built from now on (vLLM binds
    a layer's forward when it builds it). Twice is the same as once."""
    if enabled():
        RMSNorm.forward_cpu = _rms_norm_in_one_pass  # type: ignore[method-assign,assignment]
