"""Which vLLM model runner a speculative engine uses, decided here and reported.

vLLM 0.32 runs Model Runner V2 (vllm/v1/worker/gpu/) by default on CUDA wherever Triton is
installed, and V1 elsewhere (CPUs). specgate's speculative engines are built on V1:

- the worker patches (app/engine/vllm/worker/drafting_patches.py) target V1's runner and sampler;
- the draft replay (app/routing/draft_replay.py) replays V1's n-gram proposer, while
  V2's n-gram speculator takes the rightmost match and always proposes K;
- per-request draft lengths under async scheduling were read against V1's input
  preparation (`_prepare_input_ids` verifies, per request, the drafts scheduled).

So a speculative engine is pinned to V1 (`VLLM_USE_V2_MODEL_RUNNER=0` in the environment its
engine core is spawned with) unless the operator set that variable: an explicit choice wins,
and then what the engine may serve and whether the draft replay runs follow the runner in
use (`RunnerFacts`). Plain engines keep vLLM's default.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal

RUNNER_VARIABLE = "VLLM_USE_V2_MODEL_RUNNER"
Runner = Literal["v1", "v2"]


@contextmanager
def pinned_runner(speculative: bool) -> Iterator[None]:
    """While a speculative engine's core is spawned, its environment asks for V1."""
    if not speculative or RUNNER_VARIABLE in os.environ:
        yield
        return
    os.environ[RUNNER_VARIABLE] = "0"
    try:
        yield
    finally:
        os.environ.pop(RUNNER_VARIABLE, None)


@dataclass(frozen=True)
class RunnerFacts:
    """What follows from the runner a speculative engine got."""

    runner: Runner

    @property
    def applies_sampling_fields_at_drafts(self) -> bool:
        # V2's rejection sampler applies min_p and logit_bias at draft positions
        # (v1/worker/gpu/spec_decode/rejection_sampler.py); V1's does not.
        return self.runner == "v2"

    @property
    def draft_replay_matches(self) -> bool:
        # The draft replay mirrors V1's n-gram proposer (leftmost match, drafts only as
        # far as the match goes); V2's would be mispredicted.
        return self.runner == "v1"


def runner_of(use_v2_model_runner: bool) -> RunnerFacts:
    return RunnerFacts("v2" if use_v2_model_runner else "v1")
