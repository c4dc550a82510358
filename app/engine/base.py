"""The engine adapter protocol: what a route needs from whatever generates tokens."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol, runtime_checkable

from app.engine.capabilities import Refusal
from app.engine.types import GenerationRequest, GenerationStep, Route, SamplingOptions


class Engine(Protocol):
    route: Route

    def generate(self, request: GenerationRequest) -> AsyncIterator[GenerationStep]:
        """Stream the request's progress. Closing the iterator early aborts the request.

        Bad requests raise `app.errors.InvalidRequestError` on the first step, before any
        output, so the HTTP layer can still answer with an error status.
        """
        ...

    def refusal(self, options: SamplingOptions) -> Refusal | None:
        """The fields of a request with these options that this engine cannot serve, if any.

        Cheap and side-effect free: the router asks every route before choosing one.
        """
        ...

    def unfinished_requests(self) -> int:
        """Requests the engine still holds (running, queued, or not yet cleaned up)."""
        ...

    def is_alive(self) -> bool:
        """False once the engine has died or stopped; cheap enough to ask per request."""
        ...

    async def check_health(self) -> None:
        """Raise if the engine cannot serve."""
        ...

    async def aclose(self) -> None:
        """Stop the engine and every process it started."""
        ...


@runtime_checkable
class UpstreamReporter(Protocol):
    """An engine made of upstream servers (a remote pool), which /health lists one by one."""

    def upstream_status(self) -> dict[str, str]:
        """Each upstream's base URL: "ok", or why it is out of the pool."""
        ...
