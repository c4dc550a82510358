"""One route's pool of upstream servers: which are healthy, and which takes the next request.

An upstream is ejected when a health check fails or a request cannot reach it, and is
admitted back by the next passing health check. Requests go to the healthy upstream with
the fewest outstanding requests, the one picked longest ago on a tie.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Collection
from dataclasses import dataclass

import httpx

from app.engine.remote.codec import UpstreamModel, model_from_list
from app.vocabulary import Route

logger = logging.getLogger("specgate.upstream")


@dataclass(eq=False)
class Upstream:
    base_url: str
    healthy: bool = False
    problem: str = "not checked yet"
    model: UpstreamModel | None = None
    outstanding: int = 0
    last_pick: int = 0

    def status(self) -> str:
        return "ok" if self.healthy else self.problem


class UpstreamPool:
    def __init__(
        self,
        route: Route,
        urls: Collection[str],
        client: httpx.AsyncClient,
        *,
        model: str | None,
        health_interval: float,
        health_timeout: float,
    ) -> None:
        self.route: Route = route
        self.upstreams = [Upstream(url) for url in urls]
        self._client = client
        self._wanted_model = model
        self._health_interval = health_interval
        self._health_timeout = health_timeout
        self._picks = itertools.count(1)
        self._watcher: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Check every upstream once, then keep checking in the background."""
        await self.check_all()
        if not any(upstream.healthy for upstream in self.upstreams):
            logger.warning("no %s upstream is healthy yet: %s", self.route, self.status())
        self._watcher = asyncio.create_task(self._watch(), name=f"{self.route}-upstream-health")

    async def aclose(self) -> None:
        if self._watcher is not None:
            self._watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watcher
            self._watcher = None

    def acquire(self, exclude: Collection[Upstream] = ()) -> Upstream | None:
        """The least busy healthy upstream, not in `exclude`, now counting one more request."""
        candidates = [
            upstream
            for upstream in self.upstreams
            if upstream.healthy and upstream.model is not None and upstream not in exclude
        ]
        if not candidates:
            return None
        chosen = min(candidates, key=lambda upstream: (upstream.outstanding, upstream.last_pick))
        chosen.outstanding += 1
        chosen.last_pick = next(self._picks)
        return chosen

    def release(self, upstream: Upstream) -> None:
        upstream.outstanding -= 1

    def eject(self, upstream: Upstream, problem: str) -> None:
        if upstream.healthy:
            logger.warning("ejecting %s upstream %s: %s", self.route, upstream.base_url, problem)
        upstream.healthy = False
        upstream.problem = problem

    def outstanding(self) -> int:
        return sum(upstream.outstanding for upstream in self.upstreams)

    def status(self) -> dict[str, str]:
        return {upstream.base_url: upstream.status() for upstream in self.upstreams}

    async def check_all(self) -> None:
        await asyncio.gather(*(self.check(upstream) for upstream in self.upstreams))

    async def check(self, upstream: Upstream) -> None:
        try:
            response = await self._client.get(
                f"{upstream.base_url}/health", timeout=self._health_timeout
            )
            if response.status_code != 200:
                self.eject(upstream, f"health check answered {response.status_code}")
                return
            if upstream.healthy and upstream.model is not None:
                return
            # Coming back may mean a restart with another model: ask again.
            model = await self._discover_model(upstream)
        except (httpx.HTTPError, ValueError) as exc:
            self.eject(upstream, f"health check failed: {describe_error(exc)}")
            return
        logger.info("admitting %s upstream %s (%s)", self.route, upstream.base_url, model.name)
        upstream.model = model
        upstream.healthy = True
        upstream.problem = ""

    async def _discover_model(self, upstream: Upstream) -> UpstreamModel:
        response = await self._client.get(
            f"{upstream.base_url}/v1/models", timeout=self._health_timeout
        )
        response.raise_for_status()
        return model_from_list(response.json(), self._wanted_model)

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(self._health_interval)
            try:
                await self.check_all()
            except Exception:  # a bug here must not stop health checking for good
                logger.exception("checking the %s upstreams failed", self.route)


def describe_error(exc: BaseException) -> str:
    # Some httpx errors (timeouts) have an empty message; the class name still says what.
    return str(exc) or type(exc).__name__
