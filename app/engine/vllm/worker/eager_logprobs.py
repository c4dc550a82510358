"""Logprobs' token ranks counted eagerly on CPUs, installed in vLLM's worker process.

vLLM 0.32 counts each returned token's rank (`batched_count_greater_than`, vllm/v1/sample/
ops/logprobs.py) in a function under `torch.compile` with the platform's simple backend, on
CPUs Inductor, even on an eager engine: the first request that asks for logprobs compiles it
(a C++ kernel) in the worker while every request in the batch waits. On the 2-core CPU that
first request took 5.0 s on the speculative engine and 3.4 s on the plain one against 0.9
and 0.7 s once compiled (8 tokens, chat; a py-spy record of the worker: 2 s in Dynamo and
Inductor under `Sampler.gather_logprobs`), and every engine start pays it again. Eagerly the
count is one comparison and one sum over a (requests x vocabulary) array, a few megabytes on
a CPU; the compile is there to spare a GPU's memory the copies.

The count is the same; GPUs keep vLLM's compiled one.
"""

from __future__ import annotations

import torch
from vllm.platforms import current_platform
from vllm.v1.sample import sampler


def count_greater_or_equal(x: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """Per row of `x`, the elements at or above that row's value (values: one per row)."""
    return (x >= values).sum(-1)


def install() -> None:
    """On CPUs, the sampler counts ranks eagerly from now on. Twice is the same as once."""
    if current_platform.is_cpu():
        sampler.batched_count_greater_than = count_greater_or_equal  # type: ignore[attr-defined]
