"""Which CPU cores each embedded engine computes on, when the device is the CPU.

vLLM binds a CPU engine's worker to the cores of its NUMA node minus one it reserves for the
scheduler. Two engines in one gateway both get that same list: on a 2-core machine both
workers run on core 0 while core 1 holds only schedulers, so a request on one engine halves
the other's speed and a mixed batch is slower than the same batch on either engine alone
(docs/engines.md, "Engines on CPUs"). `split` gives each engine its own half of the cores this
process may use, so both can compute at once; `shared` keeps vLLM's binding.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from typing import Literal

from app.vocabulary import Route

CpuLayout = Literal["split", "shared"]
# vLLM's ngram proposer is a numba `prange` kernel (vLLM caps it to one thread). Its first
# proposal starts numba's default threading layer, an OpenMP pool beside torch's, and from
# then on every step of the engine is slower, drafting or not: 20 plain requests took 8.5 s
# before one drafting request and 12.9 s after it, on the same server (docs/engines.md, "One
# engine or two").
# One workqueue thread does the same work and starts no pool. An operator's values win.
NUMBA_DEFAULTS = {"NUMBA_THREADING_LAYER": "workqueue", "NUMBA_NUM_THREADS": "1"}
# vLLM's own variable: a list such as "0-3" or "0,2"; an operator's value always wins.
BIND_VARIABLE = "VLLM_CPU_OMP_THREADS_BIND"


def split_cores(cores: Sequence[int], routes: Sequence[Route]) -> dict[Route, list[int]]:
    """Contiguous, disjoint shares of `cores`, one per route; empty if there are too few."""
    ordered = sorted(cores)
    if len(routes) < 2 or len(ordered) < len(routes):
        return {}
    share = len(ordered) // len(routes)
    shares: dict[Route, list[int]] = {}
    for i, route in enumerate(routes):
        end = len(ordered) if i == len(routes) - 1 else (i + 1) * share
        shares[route] = ordered[i * share : end]
    return shares


def core_plan(layout: CpuLayout, routes: Sequence[Route]) -> dict[Route, str]:
    """Each route's value for vLLM's binding variable, or {} to leave vLLM's default."""
    if layout == "shared" or os.environ.get(BIND_VARIABLE):
        return {}
    shares = split_cores(sorted(os.sched_getaffinity(0)), routes)
    return {route: ",".join(str(core) for core in cores) for route, cores in shares.items()}


def whole_machine() -> str | None:
    """The binding for an engine that is alone: every core this process may use, none
    reserved (vLLM's default keeps one core for its scheduler, which on a 2-core machine
    halves the compute). None when the operator set the binding."""
    if os.environ.get(BIND_VARIABLE):
        return None
    return ",".join(str(core) for core in sorted(os.sched_getaffinity(0)))


def keep_numba_off_the_cores() -> None:
    """Set NUMBA_DEFAULTS for the engine cores this process will spawn (they inherit it)."""
    for name, value in NUMBA_DEFAULTS.items():
        os.environ.setdefault(name, value)


@contextlib.contextmanager
def bound_to(cores: str | None) -> Iterator[None]:
    """Set vLLM's binding while an engine core process is spawned; it inherits the value."""
    if cores is None:
        yield
        return
    os.environ[BIND_VARIABLE] = cores
    try:
        yield
    finally:
        os.environ.pop(BIND_VARIABLE, None)
