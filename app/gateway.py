"""The gateway's state for one app: the engines, the served model and metrics."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from app.engine.base import Engine
from app.engine.types import GenerationRequest, Prompt, Route, SamplingOptions
from app.errors import EngineUnavailableError, ModelNotFoundError
from app.generation import Endpoint, Run
from app.metrics import GatewayMetrics
from app.routing.classify import classify
from app.routing.policy import RouteDecision, decide, parse_preference


@dataclass
class Gateway:
    model_id: str
    engines: Mapping[Route, Engine]
    metrics: GatewayMetrics
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
        prompt_text: str,
        wants_json: bool,
        temperature: float | None,
    ) -> RouteDecision:
        preference = parse_preference(route_header)
        return decide(preference, classify(prompt_text, wants_json), temperature)

    async def start(
        self,
        decision: RouteDecision,
        request_id: str,
        prompt: Prompt,
        options: SamplingOptions,
        endpoint: Endpoint,
    ) -> Run:
        engine = self.engines.get(decision.route)
        if engine is None:
            raise EngineUnavailableError(f"the {decision.route} engine is not running")
        request = GenerationRequest(request_id, prompt, options)
        return await Run.start(engine, request, decision, endpoint, self.metrics)
