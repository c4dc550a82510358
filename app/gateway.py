"""The gateway's state for one app: engines, router, learner and metrics, and their wiring."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from app.engine.base import Engine
from app.engine.types import GenerationRequest, Prompt, Route, SamplingOptions
from app.errors import EngineUnavailableError, ModelNotFoundError
from app.fanout import generate_all
from app.generation import Endpoint, Run
from app.metrics import GatewayMetrics
from app.routing.features import RequestFeatures
from app.routing.policy import RouteDecision, Router, parse_preference


@dataclass
class Gateway:
    model_id: str
    engines: Mapping[Route, Engine]
    metrics: GatewayMetrics
    router: Router
    created: int = field(default_factory=lambda: int(time.time()))

    def check_model(self, model: str) -> None:
        if model != self.model_id:
            raise ModelNotFoundError(
                f"The model '{model}' does not exist; this server serves '{self.model_id}'.",
                param="model",
            )

    def decide(
        self,
        route_header: str | None,
        features: RequestFeatures,
        options: SamplingOptions | None = None,
    ) -> RouteDecision:
        preference = parse_preference(route_header)
        # Both embedded engines share one device, so every request in flight is load on the
        # speculative one: at concurrency 8 on a CPU, drafting cost 30 % (bench/results).
        load = sum(engine.unfinished_requests() for engine in self.engines.values())
        decision = self.router.decide(preference, features, load, not_speculable(options))
        self.metrics.record_decision(decision)
        return decision

    async def start(
        self,
        decision: RouteDecision,
        request_id: str,
        prompts: list[Prompt],
        options: SamplingOptions,
        endpoint: Endpoint,
    ) -> Run:
        """Submit one engine request per prompt; returns once the first output is in."""
        engine = self.engines.get(decision.route)
        if engine is None:
            raise EngineUnavailableError(f"the {decision.route} engine is not running")
        requests = [
            GenerationRequest(request_id if len(prompts) == 1 else f"{request_id}-{i}", p, options)
            for i, p in enumerate(prompts)
        ]
        self.metrics.in_flight.labels(engine=decision.route).inc()
        steps = generate_all(engine, requests)
        return await Run.start(steps, decision, endpoint, self._finished)

    def _finished(self, run: Run) -> None:
        self.metrics.record_run(run)
        if run.outcome != "ok":
            return
        # Only finished requests teach the router: an abort says nothing about speed.
        decision, learner = run.decision, self.router.learner
        if run.inter_token_latency is not None:
            learner.observe_latency(
                decision.workload_class, decision.route, run.inter_token_latency * 1000
            )
        if run.spec is not None:
            learner.observe_acceptance(decision.workload_class, run.spec)


def not_speculable(options: SamplingOptions | None) -> str | None:
    """The sampling fields vLLM refuses on a speculative engine (vLLM 0.32), if any are set."""
    if options is None:
        return None
    # top_k is accepted there, but sampling with it alone kills the engine core on a CPU
    # (an empty tensor in the rejection sampler's top-k step; found by tests/engine fuzzing).
    fields = [name for name in ("min_p", "logit_bias", "top_k") if getattr(options, name)]
    return " and ".join(fields) or None
