"""Start each route's engine for a set of settings, and stop them all on exit.

A route with upstreams is served by a remote pool (`app.engine.remote.remote_engine`); any
other by an embedded vLLM engine (app/engine/vllm/launch.py). With both routes remote, vLLM
is never imported.
"""

from __future__ import annotations

from contextlib import AsyncExitStack

from app.engine.protocol import Engine
from app.engine.remote.remote_engine import RemoteConfig, RemoteEngine
from app.settings import Settings
from app.vocabulary import ROUTES, Route


async def start_engines(settings: Settings, stack: AsyncExitStack) -> dict[Route, Engine]:
    """Both routes' engines, each registered on `stack` for shutdown as soon as it exists."""
    engines: dict[Route, Engine] = {}
    for route in ROUTES:
        if settings.upstreams(route):
            engines[route] = await stack.enter_async_context(
                await RemoteEngine.start(remote_config(settings, route), route)
            )
    embedded = [route for route in ROUTES if route not in engines]
    if embedded:
        # Imported here: a gateway whose routes are all remote never loads the embedded
        # engine's modules.
        from app.engine.vllm import launch
        from app.engine.vllm.engine_config import launch_config

        config = launch_config(settings)  # the engines' part of the settings, cut here
        engines.update(await launch.start_vllm_engines(config, stack, embedded))
    return engines


def remote_config(settings: Settings, route: Route) -> RemoteConfig:
    """The route's pool's part of the settings."""
    return RemoteConfig(
        urls=settings.upstreams(route),
        api_key=settings.upstream_api_key(route),
        model=settings.upstream_model,
        connect_timeout=settings.upstream_connect_timeout,
        read_timeout=settings.upstream_read_timeout,
        health_interval=settings.upstream_health_interval,
        attempts=settings.upstream_attempts,
    )
