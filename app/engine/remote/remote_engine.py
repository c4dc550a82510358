"""A route served by a pool of remote OpenAI-compatible vLLM servers, over httpx.

Every call streams, whatever the client asked: the gateway needs the steps either way, and a
stream is the only way to stop the upstream early (closing the connection makes vLLM abort
the request). Retries are safe only before the upstream has sent anything; after that the
client may already have part of an answer, so a failure is reported, never papered over.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx

from app.engine.coalesce import coalesced
from app.engine.generation import GenerationRequest, GenerationStep, SamplingOptions
from app.engine.protocol import EngineFacts, StopsOnExit
from app.engine.refusals import PREDICTION_REFUSAL, combined, drafting_refusal, refusal_of
from app.engine.remote.codec import (
    SSEParser,
    StreamDecoder,
    not_forwarded,
    request_body,
    upstream_error,
)
from app.engine.remote.pool import Upstream, UpstreamPool, describe_error
from app.engine.tokenizing import RemoteTokenizer
from app.errors import (
    EngineFailureError,
    EngineUnavailableError,
    InvalidRequestError,
    NotFoundError,
    SpecgateError,
)
from app.vocabulary import Refusal, Route

logger = logging.getLogger("specgate.remote")

# Failures that say the upstream is gone, not merely slow: they eject it until it passes a
# health check again.
_CONNECTION_ERRORS = (httpx.NetworkError, httpx.ConnectTimeout, httpx.RemoteProtocolError)


class _BeforeFirstByte(Exception):
    """The upstream failed before sending anything: another upstream may take the request."""

    def __init__(self, error: SpecgateError) -> None:
        super().__init__(error.message)
        self.error = error


@dataclass(frozen=True)
class RemoteConfig:
    """What a route's pool takes from the settings, built where they are read
    (app/engine/start.py): the pool never sees the rest."""

    urls: tuple[str, ...]
    api_key: str | None
    # The upstreams' model name, where it is not the one the gateway serves.
    model: str | None
    connect_timeout: float
    read_timeout: float
    health_interval: float
    attempts: int


class RemoteEngine(StopsOnExit):
    def __init__(
        self, route: Route, pool: UpstreamPool, client: httpx.AsyncClient, attempts: int
    ) -> None:
        self.route: Route = route
        self.pool = pool
        self._client = client
        self._attempts = attempts
        # No tokenizer at hand; the upstreams answer /tokenize and its kin.
        self.facts = EngineFacts(tokenizing=RemoteTokenizer(self), takes_prediction=False)

    @classmethod
    async def start(
        cls, config: RemoteConfig, route: Route, transport: httpx.AsyncBaseTransport | None = None
    ) -> RemoteEngine:
        """A pool over the route's upstreams, each checked once before this returns.

        `transport` replaces the network, for tests.
        """
        client = httpx.AsyncClient(
            transport=transport,
            # Upstreams started with vLLM's --api-key check it on /v1; it is never logged.
            headers={"Authorization": f"Bearer {config.api_key}"} if config.api_key else None,
            timeout=httpx.Timeout(config.read_timeout, connect=config.connect_timeout),
            # One connection per stream in flight; httpx's default cap of 100 would queue the
            # rest. Idle ones are all kept (until httpx's 5 s expiry): with fewer kept than
            # streams in flight, every request past the cap paid for a new connection.
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=None),
        )
        pool = UpstreamPool(
            route,
            config.urls,
            client,
            model=config.model,
            health_interval=config.health_interval,
            health_timeout=config.connect_timeout,
        )
        logger.info("serving the %s route from %s", route, ", ".join(config.urls))
        await pool.start()
        return cls(route, pool, client, config.attempts)

    def generate(self, request: GenerationRequest) -> AsyncIterator[GenerationStep]:
        return coalesced(self._generate(request))

    async def _generate(self, request: GenerationRequest) -> AsyncIterator[GenerationStep]:
        refused = self._not_forwarded(request.options)
        if refused is not None:
            raise InvalidRequestError(
                f"{refused.names}: {refused.why} (the {self.route} route)",
                param=refused.fields[0],
            )
        if request.prediction is not None:
            # vLLM's server would drop the field without a word (it ignores unknown fields).
            # The dispatcher routes such a request elsewhere (PREDICTION_REFUSAL); this guards
            # a caller that did not ask.
            raise InvalidRequestError(
                f"prediction: {PREDICTION_REFUSAL.why} (the {self.route} route): "
                "vLLM's server takes no prediction; send the request without it",
                param="prediction",
            )
        tried: list[Upstream] = []
        error: SpecgateError | None = None
        while len(tried) < self._attempts:
            upstream = self.pool.acquire(exclude=tried)
            if upstream is None:
                break
            tried.append(upstream)
            steps = self._stream(upstream, request)
            try:
                try:
                    first = await anext(steps)
                except _BeforeFirstByte as failure:
                    error = failure.error
                    logger.warning("%s, before its first byte: %s", request.request_id, error)
                    continue
                yield first
                async for step in steps:
                    yield step
                return
            finally:
                # Closing the stream early closes the connection: vLLM then aborts the request.
                await steps.aclose()
                self.pool.release(upstream)
        raise error or EngineUnavailableError(self._unavailable())

    def servable(self, options: SamplingOptions, draft_length: int | None = None) -> Refusal | None:
        # An upstream that drafts has vLLM's own limits on sampling fields.
        drafting = drafting_refusal(options) if self.route == "speculative" else None
        return combined(self._not_forwarded(options), drafting)

    @staticmethod
    def _not_forwarded(options: SamplingOptions) -> Refusal | None:
        return refusal_of(list(not_forwarded(options)), "not supported by remote upstreams")

    def unfinished_requests(self) -> int:
        return self.pool.outstanding()

    def is_alive(self) -> bool:
        return any(upstream.healthy for upstream in self.pool.upstreams)

    async def check_health(self) -> None:
        if not any(upstream.healthy for upstream in self.pool.upstreams):
            raise EngineUnavailableError(self._unavailable())

    def upstream_status(self) -> dict[str, str]:
        return self.pool.status()

    async def forward(self, method: str, path: str, body: dict[str, Any] | None) -> Any:
        """One upstream's JSON answer on a helper path (/tokenize, ...), as it gave it."""
        upstream = self.pool.acquire()
        if upstream is None:
            raise EngineUnavailableError(self._unavailable())
        try:
            response = await self._client.request(method, f"{upstream.base_url}{path}", json=body)
        except httpx.TransportError as exc:
            raise self._transport_failure(upstream, exc) from exc
        finally:
            self.pool.release(upstream)
        if response.status_code == 404:
            raise NotFoundError(f"the {self.route} upstream {upstream.base_url} has no {path}")
        if response.status_code >= 400:
            raise upstream_error(response.status_code, response.content)
        try:
            return response.json()
        except ValueError as exc:
            raise EngineFailureError(
                f"the {self.route} upstream {upstream.base_url} answered {path} without JSON"
            ) from exc

    async def aclose(self) -> None:
        await self.pool.aclose()
        await self._client.aclose()

    async def _stream(
        self, upstream: Upstream, request: GenerationRequest
    ) -> AsyncGenerator[GenerationStep, None]:
        assert upstream.model is not None  # the pool hands out only upstreams with a model
        path, body = request_body(request, upstream.model)
        call = self._client.build_request("POST", f"{upstream.base_url}{path}", json=body)
        try:
            response = await self._client.send(call, stream=True)
        except httpx.TransportError as exc:
            raise _BeforeFirstByte(self._transport_failure(upstream, exc)) from exc
        try:
            if response.status_code >= 400:
                await self._raise_for_status(upstream, response)
            decoder, parser = StreamDecoder(request.options.n), SSEParser()
            received = False
            try:
                async for chunk in response.aiter_bytes():
                    received = True
                    # Read on to the end of the body after [DONE]: the connection is reused.
                    for data in () if decoder.done else parser.feed(chunk):
                        for step in decoder.feed(data):
                            yield step
            except httpx.TransportError as exc:
                failure = self._transport_failure(upstream, exc)
                if not received:
                    raise _BeforeFirstByte(failure) from exc
                raise EngineFailureError(
                    f"the {self.route} upstream {upstream.base_url} failed mid-stream: "
                    f"{describe_error(exc)}"
                ) from exc
            if not decoder.done:
                # An OpenAI server always ends with [DONE]: without it, the upstream went away.
                self.pool.eject(upstream, "a stream ended without [DONE]")
                raise EngineFailureError(
                    f"the {self.route} upstream {upstream.base_url} ended a stream early"
                )
            for step in decoder.finish():
                yield step
        finally:
            await response.aclose()

    async def _raise_for_status(self, upstream: Upstream, response: httpx.Response) -> None:
        try:
            content = await response.aread()
        except httpx.TransportError as exc:
            raise _BeforeFirstByte(self._transport_failure(upstream, exc)) from exc
        error = upstream_error(response.status_code, content)
        if response.status_code >= 500:
            raise _BeforeFirstByte(error)
        # A 4xx is the request's fault: any upstream would refuse it the same way.
        raise error

    def _transport_failure(self, upstream: Upstream, exc: httpx.TransportError) -> SpecgateError:
        problem = f"{type(exc).__name__}: {describe_error(exc)}"
        if isinstance(exc, _CONNECTION_ERRORS):
            self.pool.eject(upstream, problem)
        return EngineUnavailableError(
            f"the {self.route} upstream {upstream.base_url} failed: {problem}"
        )

    def _unavailable(self) -> str:
        problems = "; ".join(f"{url}: {status}" for url, status in self.pool.status().items())
        return f"no healthy {self.route} upstream ({problems})"
