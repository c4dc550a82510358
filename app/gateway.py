"""The gateway's state for one app: engines, router, learner and metrics, and their wiring."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from app.admission import Admission
from app.engine.base import Engine
from app.engine.types import GenerationRequest, Prompt, Route, SamplingOptions, other_route
from app.errors import (
    EngineUnavailableError,
    ModelNotFoundError,
    QueueTimeoutError,
    SpecgateError,
)
from app.fanout import generate_all
from app.generation import Endpoint, Run
from app.metrics import GatewayMetrics
from app.routing.features import RequestFeatures
from app.routing.policy import RouteDecision, Router, parse_preference

logger = logging.getLogger("specgate.requests")


@dataclass
class Gateway:
    model_id: str
    engines: Mapping[Route, Engine]
    admissions: Mapping[Route, Admission]
    metrics: GatewayMetrics
    router: Router
    # On shutdown, how long open streams may go on before they are cut.
    shutdown_grace_seconds: float = 0.0
    # Log prompts and outputs (off by default: they are the users' data).
    log_requests: bool = False
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
        decision = self._around_dead_engine(decision)
        self.metrics.record_decision(decision)
        return decision

    def _around_dead_engine(self, decision: RouteDecision) -> RouteDecision:
        """Fallback policy: a request the client did not pin goes to the surviving engine."""
        chosen = self.engines.get(decision.route)
        if decision.basis == "header" or (chosen is not None and chosen.is_alive()):
            return decision
        other = other_route(decision.route)
        survivor = self.engines.get(other)
        if survivor is None or not survivor.is_alive() or decision.basis == "unsupported":
            return decision  # nothing better; starting it will answer 503
        return replace(
            decision,
            route=other,
            basis="fallback",
            reason=f"fallback: the {decision.route} engine is down",
        )

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
        if engine is None or not engine.is_alive():
            raise EngineUnavailableError(f"the {decision.route} engine is not running")
        admission = self.admissions[decision.route]
        try:
            await admission.enter()
        except SpecgateError as exc:
            reason = "queue_timeout" if isinstance(exc, QueueTimeoutError) else "at_capacity"
            self.metrics.rejected.labels(engine=decision.route, reason=reason).inc()
            raise
        requests = [
            GenerationRequest(request_id if len(prompts) == 1 else f"{request_id}-{i}", p, options)
            for i, p in enumerate(prompts)
        ]
        if self.log_requests:
            logger.info("request %s to %s: prompts %r", request_id, decision.route, prompts)
        self.metrics.in_flight.labels(engine=decision.route).inc()
        steps = generate_all(engine, requests)

        def finished(run: Run) -> None:
            admission.leave()
            self._finished(run)

        return await Run.start(steps, decision, endpoint, finished, request_id)

    def _finished(self, run: Run) -> None:
        self.metrics.record_run(run)
        if self.log_requests:
            outputs = [choice.text for _, choice in sorted(run.choices.items())]
            logger.info("request %s %s: outputs %r", run.request_id, run.outcome, outputs)
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
