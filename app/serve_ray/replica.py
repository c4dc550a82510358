"""One specgate engine in a Ray Serve replica (app/serve_ray/app.py deploys it).

The replica owns an engine as the gateway's `one` layout does: one engine that takes a draft
length per request, so both routes send their requests here (the plain route's with length 0).
It streams the engine's steps back through Serve's deployment handle, answers the calls the
gateway makes of an engine (facts, servable, tokenizer, health), and reports what the
router ranks replicas by (`record_routing_stats`, app/placement/replica_rank.py): its running
and waiting requests, how full its KV cache is, its step-cost line as its outputs show it,
how often drafts landed here by class, and whose drafter histories it holds.

Nothing here imports Ray: Serve calls these methods by name, so the class is tested as it is.
"""

from __future__ import annotations

import importlib
import logging
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Coroutine
from contextlib import AsyncExitStack
from dataclasses import asdict, dataclass, field
from typing import Any

from app.drafting.length_rule import CPU_STEP_PRIOR, GPU_STEP_PRIOR, StepCostPrior
from app.engine.coalesce import coalesced
from app.engine.generation import GenerationRequest, GenerationStep, SamplingOptions
from app.engine.protocol import Engine, SuffixCacheReporter
from app.placement.step_watch import StepWatch
from app.schemas.tokenize import DetokenizeRequest, TokenizeRequest
from app.settings import Settings
from app.vocabulary import ChatMessage, Refusal, SpecDecodeStats

logger = logging.getLogger("specgate.replica")

# Drafter-history keys a replica reports, most recent kept.
HISTORY_KEYS = 1024


@dataclass(frozen=True)
class EngineRecipe:
    """How a replica starts its engine: specgate's embedded engine with these settings
    (Settings fields; the layout is always `one`), or a stand-in for tests and benchmarks
    named by its import path (`module:callable`, called with `fake_args`), so that serving
    code never imports the fakes (app/engine/fakes/)."""

    settings: dict[str, Any] = field(default_factory=dict)
    fake: str | None = None
    fake_args: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ReplicaFacts:
    """An engine's facts, as they cross to the gateway (no tokenizer object)."""

    max_model_len: int | None
    exposes_token_ids: bool
    per_request_draft_length: bool
    draft_replay_matches: bool
    has_tokenizer: bool
    # The sampling fields a drafting request may carry (app/engine/refusals.py).
    applies_sampling_fields_at_drafts: bool = False
    # Where the replica read its model: a gateway on the same machine (or storage) loads
    # the tokenizer from it for the tool-call parsers.
    model_path: str | None = None


def history_key(request: GenerationRequest) -> str | None:
    """Requests with the same key draft from the same earlier answers: a tenant's class."""
    if request.workload_class is None:
        return None
    return f"{request.tenant or ''}|{request.workload_class}"


class _Acceptance:
    """Draft tokens verified and landed here, by class."""

    def __init__(self) -> None:
        self.by_class: dict[str, SpecDecodeStats] = {}

    def add(self, workload_class: str, stats: SpecDecodeStats) -> None:
        before = self.by_class.get(workload_class, SpecDecodeStats(0, 0, 0))
        self.by_class[workload_class] = before + stats

    def rates(self) -> dict[str, float]:
        return {c: s.acceptance_rate for c, s in self.by_class.items() if s.draft_tokens}


class EngineReplica:
    async def __init__(self, recipe: EngineRecipe) -> None:  # type: ignore[misc]
        self._stack = AsyncExitStack()
        self._model_path: str | None = None
        self.engine = await self._start(recipe)
        self._waiting: set[str] = set()
        self._running: dict[str, int] = {}  # request id -> tokens it holds in the KV cache
        self._acceptance = _Acceptance()
        self._histories: OrderedDict[str, None] = OrderedDict()
        self._watch = StepWatch(self._prior(recipe, self.engine))

    async def _start(self, recipe: EngineRecipe) -> Engine:
        if recipe.fake is not None:
            module, name = recipe.fake.split(":")
            make = getattr(importlib.import_module(module), name)
            return await self._stack.enter_async_context(make(**recipe.fake_args))
        from app.engine.vllm.engine_config import launch_config
        from app.engine.vllm.launch import resolve_model_path, start_vllm_engines

        config = launch_config(Settings(**{**recipe.settings, "engine_layout": "one"}))
        self._model_path = await resolve_model_path(config)
        engines = await start_vllm_engines(config, self._stack)
        return engines["speculative"]

    @staticmethod
    def _prior(recipe: EngineRecipe, engine: Engine) -> StepCostPrior:
        if recipe.fake is not None:
            # A paced fake prices its steps by a line of its own; the others by the CPU's.
            return engine.facts.step_cost_prior or CPU_STEP_PRIOR
        from app.engine.vllm.vllm_engine import on_cpu

        return CPU_STEP_PRIOR if on_cpu() else GPU_STEP_PRIOR

    async def generate(self, request: GenerationRequest) -> AsyncIterator[GenerationStep]:
        """The engine's steps for `request`, as they come."""
        request_id = request.request_id
        drafts = request.draft_length != 0
        self._waiting.add(request_id)
        key = history_key(request)
        try:
            # Steps that pile up while Serve ships the last one go as one (each shipped item
            # costs both processes a Ray message).
            async for step in coalesced(self.engine.generate(request)):
                self._note(request, step, drafts)
                yield step
        finally:
            self._waiting.discard(request_id)
            self._running.pop(request_id, None)
            if not self._running and not self._waiting:
                self._watch.idle()
            if key is not None and drafts:
                self._histories[key] = None
                self._histories.move_to_end(key)
                while len(self._histories) > HISTORY_KEYS:
                    self._histories.popitem(last=False)

    def _note(self, request: GenerationRequest, step: GenerationStep, drafts: bool) -> None:
        request_id = request.request_id
        self._waiting.discard(request_id)
        new_tokens = sum(choice.new_tokens for choice in step.choices)
        held = self._running.get(request_id, step.prompt_tokens)
        self._running[request_id] = held + new_tokens
        self._watch.output(time.monotonic(), new_tokens, drafts)
        for choice in step.choices:
            if choice.draft_stats is not None and request.workload_class is not None:
                self._acceptance.add(request.workload_class, choice.draft_stats)

    def facts(self) -> ReplicaFacts:
        facts = self.engine.facts
        return ReplicaFacts(
            facts.max_model_len,
            facts.exposes_token_ids,
            facts.per_request_draft_length,
            facts.draft_replay_matches,
            facts.tokenizing is not None,
            facts.applies_sampling_fields_at_drafts,
            self._model_path,
        )

    def servable(self, options: SamplingOptions, draft_length: int | None = None) -> Refusal | None:
        return self.engine.servable(options, draft_length)

    async def tokenize(self, request: TokenizeRequest, messages: list[ChatMessage] | None) -> Any:
        return await self._tokenizer().tokenize(request, messages)

    async def detokenize(self, request: DetokenizeRequest) -> Any:
        return await self._tokenizer().detokenize(request)

    async def tokenizer_info(self) -> Any:
        return await self._tokenizer().tokenizer_info()

    def _tokenizer(self) -> Any:
        service = self.engine.facts.tokenizing
        if service is None:
            raise RuntimeError("this replica's engine has no tokenizer")
        return service

    async def suffix_cache_counts(self) -> dict[str, int] | None:
        if not isinstance(self.engine, SuffixCacheReporter):
            return None
        counts = await self.engine.suffix_cache_counts()
        return asdict(counts) if counts is not None else None

    async def check_health(self) -> None:
        """Serve's health check: raising marks the replica unhealthy and restarts it."""
        if not self.engine.is_alive():
            raise RuntimeError("the engine has stopped")
        await self.engine.check_health()

    def record_routing_stats(self) -> dict[str, Any]:
        """What the router ranks this replica by (app/placement/replica_rank.py)."""
        line = self._watch.step_cost.snapshot()
        capacity = self.engine.facts.kv_capacity_tokens
        held = sum(self._running.values())
        return {
            "running": len(self._running),
            "waiting": len(self._waiting),
            "kv_use": min(1.0, held / capacity) if capacity else 0.0,
            "step_cost": [
                line["base_ms"],
                line["per_sequence_ms"],
                line["per_token_ms"],
                line["per_sequence_drafting_ms"],
            ],
            "step_samples": line["samples"],
            "acceptance": self._acceptance.rates(),
            "histories": list(self._histories),
            # Wall-clock time: a router reads the report against what it had sent by then.
            "reported_at": time.time(),
        }

    def __del__(self) -> Coroutine[Any, Any, None] | None:
        """Serve calls this as it stops the replica and awaits what it returns: the engine's
        stop. Python's own call, when it collects the object, then finds nothing to do."""
        stack: AsyncExitStack | None = self.__dict__.pop("_stack", None)
        return None if stack is None else stack.aclose()
