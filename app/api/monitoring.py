"""GET /health and GET /metrics."""

from __future__ import annotations

import asyncio
import contextlib

from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST

from app.api.deps import EnginesDep, MetricsDep
from app.engine.protocol import ReplicaReporter, SuffixCacheReporter, UpstreamReporter
from app.errors import SpecgateError

router = APIRouter()

HEALTH_TIMEOUT_SECONDS = 5.0


@router.get("/health", summary="Engine health")
async def health(engines: EnginesDep) -> Response:
    """200 when every engine answers, 503 otherwise; remote pools list each upstream."""
    status: dict[str, str] = {}
    upstreams: dict[str, dict[str, str]] = {}
    healthy = True
    for route, engine in engines.items():
        try:
            await asyncio.wait_for(engine.check_health(), HEALTH_TIMEOUT_SECONDS)
            status[route] = "ok"
        except (SpecgateError, TimeoutError) as exc:
            healthy = False
            status[route] = str(exc) or "timed out"
        if isinstance(engine, UpstreamReporter):
            upstreams[route] = engine.upstream_status()
    body: dict[str, object] = {"status": "ok" if healthy else "unavailable", "engines": status}
    if upstreams:
        body["upstreams"] = upstreams
    return JSONResponse(body, status_code=200 if healthy else 503)


@router.get("/metrics", summary="Prometheus metrics")
async def metrics(registry: MetricsDep, engines: EnginesDep) -> Response:
    """Prometheus metrics: requests, latency and speculative counters by engine."""
    # One engine may serve both routes: ask each once.
    for engine in {id(engine): engine for engine in engines.values()}.values():
        if isinstance(engine, SuffixCacheReporter):
            with contextlib.suppress(SpecgateError, TimeoutError):
                counts = await asyncio.wait_for(
                    engine.suffix_cache_counts(), HEALTH_TIMEOUT_SECONDS
                )
                if counts is not None:
                    registry.suffix_cache.counts = counts
        if isinstance(engine, ReplicaReporter):
            with contextlib.suppress(SpecgateError, TimeoutError):
                registry.replicas.reports = await asyncio.wait_for(
                    engine.replica_reports(), HEALTH_TIMEOUT_SECONDS
                )
    return Response(registry.render(), media_type=CONTENT_TYPE_LATEST)
