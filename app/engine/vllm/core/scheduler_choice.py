"""Which scheduler a speculative engine gets: vLLM's own choice of synchronous or async
scheduling, each with per-request draft lengths.

vLLM's engine core builds its scheduler by calling what `scheduler_cls` names, after it has
settled `async_scheduling` for the engine (on by default for draft models and EAGLE on a
single GPU; always off on CPUs and for CPU n-gram). A subclass of one scheduler would be
wrong for the other: under async scheduling a `Scheduler` subclass schedules no drafts at
all. So `scheduler_cls` names this function, which follows the engine's setting.
"""

from __future__ import annotations

from typing import Any

from vllm.config import VllmConfig
from vllm.v1.core.sched.scheduler import Scheduler

from app.engine.vllm.core.async_draft_length_scheduler import AsyncDraftLengthScheduler
from app.engine.vllm.core.draft_length_scheduler import DraftLengthScheduler

SCHEDULER_QUALNAME = "app.engine.vllm.core.scheduler_choice.draft_length_scheduler"


def draft_length_scheduler(vllm_config: VllmConfig, *args: Any, **kwargs: Any) -> Scheduler:
    if vllm_config.scheduler_config.async_scheduling:
        return AsyncDraftLengthScheduler(vllm_config, *args, **kwargs)
    return DraftLengthScheduler(vllm_config, *args, **kwargs)
