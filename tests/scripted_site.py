"""An app over two scripted fake engines, and a client for it, for fast wire-shape tests."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from typing import Any

import httpx

from app.engine.fakes.scripted import FakeEngine
from app.engine.generation import GenerationRequest
from app.main import create_app
from app.settings import Settings


class ScriptedSite:
    """Both engines say `output`, token by token; tests may change it between requests."""

    def __init__(self, output: list[str]) -> None:
        self.output = output
        self.engines = {
            route: FakeEngine(route, script=self.script) for route in ("speculative", "plain")
        }
        self.client: httpx.AsyncClient

    def script(self, request: GenerationRequest, index: int) -> Iterable[str]:
        return self.output

    def requests(self) -> list[GenerationRequest]:
        return [r for engine in self.engines.values() for r in engine.requests]

    def prompts(self) -> list[Any]:
        return [request.prompt for request in self.requests()]


@asynccontextmanager
async def scripted_site(
    output: list[str], settings: Settings | None = None
) -> AsyncIterator[ScriptedSite]:
    site = ScriptedSite(output)
    app = create_app(settings or Settings(routing_exploration=0), site.engines)  # type: ignore[arg-type]
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://specgate") as client:
            site.client = client
            yield site
