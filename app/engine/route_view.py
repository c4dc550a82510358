"""One route of an engine that serves both (`--engine-layout one`).

A single speculative engine can serve the plain route too: a request there carries draft
length 0, so it never drafts. Each route gets a view of the shared engine, with its own
count of open requests (the router reads load per route); the engine itself is stopped
once, by whoever started it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import replace

from app.engine.base import Engine, EngineFacts, StopsOnExit
from app.engine.capabilities import Refusal
from app.engine.types import GenerationRequest, GenerationStep, Route, SamplingOptions


class RouteView(StopsOnExit):
    def __init__(self, engine: Engine, route: Route) -> None:
        self.route: Route = route
        self.engine = engine
        self._open = 0

    @property
    def facts(self) -> EngineFacts:
        return self.engine.facts

    async def generate(self, request: GenerationRequest) -> AsyncIterator[GenerationStep]:
        if self.route == "plain":
            request = replace(request, draft_length=0, acceptance_prior=None)
        self._open += 1
        try:
            async for step in self.engine.generate(request):
                yield step
        finally:
            self._open -= 1

    def servable(self, options: SamplingOptions, draft_length: int | None = None) -> Refusal | None:
        # The plain route's requests carry draft length 0: they sample as a plain engine does.
        return self.engine.servable(options, 0 if self.route == "plain" else draft_length)

    def unfinished_requests(self) -> int:
        return self._open

    def is_alive(self) -> bool:
        return self.engine.is_alive()

    async def check_health(self) -> None:
        await self.engine.check_health()

    async def aclose(self) -> None:
        """The shared engine outlives its views; its starter stops it."""


def route_views(engine: Engine) -> dict[Route, Engine]:
    return {route: RouteView(engine, route) for route in ("speculative", "plain")}


def shared_engine(engines: Mapping[Route, Engine]) -> Engine | None:
    """The one engine behind both routes' views, if it takes a draft length per request."""
    speculative, plain = engines.get("speculative"), engines.get("plain")
    if not isinstance(speculative, RouteView) or not isinstance(plain, RouteView):
        return None
    if speculative.engine is not plain.engine:
        return None
    engine = speculative.engine
    return engine if engine.facts.per_request_draft_length else None
