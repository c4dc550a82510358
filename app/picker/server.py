"""The picker's gRPC server: Envoy's ExternalProcessor, and the standard health service.

Health answers for the names the endpoint-picker protocol lists: `liveness` (the process
answers), `readiness` and `envoy.service.ext_proc.v3.ExternalProcessor` (it has scraped
every endpoint once, so its first picks know their load), and "" for the server as a whole,
as Kubernetes' gRPC probes ask by default.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass

import grpc
import httpx
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as ext_proc_grpc
from envoy.service.ext_proc.v3.external_processor_pb2 import (
    ProcessingRequest,
    ProcessingResponse,
)
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import aio as health_aio

from app.drafting.length_rule import CPU_STEP_PRIOR, GPU_STEP_PRIOR
from app.picker.endpoints import load_endpoints
from app.picker.exchange import Exchange
from app.picker.kubernetes import PoolSource, in_cluster_client, own_namespace
from app.picker.load import LoadBook
from app.picker.picker import Picker
from app.picker.scraper import Scraper
from app.picker.settings import PickerSettings

logger = logging.getLogger("specgate.picker")

EXT_PROC_SERVICE = "envoy.service.ext_proc.v3.ExternalProcessor"
# In-flight streams get this long to finish when the picker is stopped.
STOP_GRACE_S = 5.0


class ExternalProcessor(ext_proc_grpc.ExternalProcessorServicer):  # type: ignore[misc]
    def __init__(self, picker: Picker) -> None:
        self.picker = picker

    async def Process(
        self, requests: AsyncIterator[ProcessingRequest], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[ProcessingResponse]:
        exchange = Exchange(self.picker)
        async for message in requests:
            for answer in exchange.on(message):
                yield answer


@dataclass
class RunningPicker:
    port: int
    health: health_aio.HealthServicer


@asynccontextmanager
async def running_picker(
    picker: Picker, host: str, port: int, scraper: Scraper | None = None
) -> AsyncIterator[RunningPicker]:
    """The gRPC server started on host:port (0: any free port); stopped on exit.

    Without a scraper the load book is the caller's to fill (the tests), and the picker is
    ready at once.
    """
    server = grpc.aio.server()
    ext_proc_grpc.add_ExternalProcessorServicer_to_server(ExternalProcessor(picker), server)
    health = health_aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health, server)
    bound = server.add_insecure_port(f"{host}:{port}")
    for service in ("", "liveness"):
        await health.set(service, health_pb2.HealthCheckResponse.SERVING)
    for service in ("readiness", EXT_PROC_SERVICE):
        await health.set(service, health_pb2.HealthCheckResponse.NOT_SERVING)
    await server.start()
    async with AsyncExitStack() as stack:
        tasks: list[asyncio.Task[None]] = []
        if scraper is not None:
            tasks = [
                asyncio.create_task(scraper.run()),
                asyncio.create_task(_ready_after(scraper, health)),
            ]
        else:
            await _ready(health)
        stack.push_async_callback(server.stop, STOP_GRACE_S)
        stack.push_async_callback(_cancelled, tasks)
        yield RunningPicker(bound, health)
        # Not ready before stopping: Envoy's health checks move traffic off first.
        await health.enter_graceful_shutdown()


async def _ready_after(scraper: Scraper, health: health_aio.HealthServicer) -> None:
    await scraper.first_round.wait()
    await _ready(health)
    logger.info("ready: every endpoint scraped once")


async def _ready(health: health_aio.HealthServicer) -> None:
    for service in ("readiness", EXT_PROC_SERVICE):
        await health.set(service, health_pb2.HealthCheckResponse.SERVING)


async def _cancelled(tasks: list[asyncio.Task[None]]) -> None:
    for task in tasks:
        task.cancel()
    for task in tasks:
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def serve(settings: PickerSettings) -> None:
    """Serve until SIGTERM or SIGINT."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    async with AsyncExitStack() as stack:
        source = None
        if settings.endpoints is not None:
            endpoints = load_endpoints(settings.endpoints)
        else:
            source = await stack.enter_async_context(_pool_source(settings))
            try:
                endpoints = await source.endpoints()
            except (httpx.HTTPError, ValueError, KeyError) as exc:
                logger.warning("listing the InferencePool failed: %s; trying again", exc)
                endpoints = []
        book = LoadBook(endpoint.address for endpoint in endpoints)
        line = GPU_STEP_PRIOR if settings.step_cost == "gpu" else CPU_STEP_PRIOR
        picker = Picker(
            endpoints,
            book,
            line,
            settings.queue_limit,
            settings.max_speculative_temperature,
            settings.fallbacks,
        )
        timeout = httpx.Timeout(settings.scrape_timeout_s)
        headers = _scrape_headers(settings)
        client = await stack.enter_async_context(
            httpx.AsyncClient(timeout=timeout, headers=headers)
        )
        scraper = Scraper(
            lambda: picker.endpoints.values(), book, client, settings.scrape_interval_s
        )
        running = await stack.enter_async_context(
            running_picker(picker, settings.host, settings.port, scraper)
        )
        if source is not None:
            listing = asyncio.create_task(source.run(picker.set_endpoints, settings.pool_poll_s))
            stack.push_async_callback(_cancelled, [listing])
        logger.info(
            "picking among %d endpoints on %s:%d", len(endpoints), settings.host, running.port
        )
        await stop.wait()


@asynccontextmanager
async def _pool_source(settings: PickerSettings) -> AsyncIterator[PoolSource]:
    assert settings.pool_name is not None  # the settings' validator: one source or the other
    try:
        client = in_cluster_client()
        namespace = settings.pool_namespace or own_namespace()
    except (OSError, KeyError) as exc:
        raise OSError(f"--pool-name needs to run in a Kubernetes pod ({exc!r})") from exc
    async with client:
        yield PoolSource(
            client,
            settings.pool_name,
            namespace,
            settings.pool_kind,
            settings.pool_label,
            settings.pool_max_draft,
        )


def _scrape_headers(settings: PickerSettings) -> dict[str, str]:
    key = settings.metrics_api_key
    return {} if key is None else {"authorization": f"Bearer {key.get_secret_value()}"}
