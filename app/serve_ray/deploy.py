"""`specgate --ray-replicas N`: deploy specgate on Ray Serve and serve until stopped."""

from __future__ import annotations

import logging
import signal

import ray
from ray import serve

from app.serve_ray.app import application
from app.serve_ray.replica import EngineRecipe
from app.settings import Settings

logger = logging.getLogger("specgate.serve")

APP_NAME = "specgate"


class _Stopped(Exception):
    """SIGTERM: stop as Ctrl-C does."""


def _stop(signum: int, frame: object) -> None:
    raise _Stopped


def serve_on_ray(settings: Settings, recipe: EngineRecipe | None = None) -> int:
    """Join the cluster at --ray-address (or start a local one), deploy, and block until
    Ctrl-C or SIGTERM; the HTTP proxy listens on --host and --port. On the way out the
    application is deleted (its replicas stop their engines) and a local cluster this
    process started stops with it. `recipe` replaces the replicas' engine (the routing
    benchmark's paced fakes)."""
    signal.signal(signal.SIGTERM, _stop)
    ray.init(address=settings.ray_address, include_dashboard=False, ignore_reinit_error=True)
    try:
        serve.start(http_options={"host": settings.host, "port": settings.port})
        logger.info("deploying on Ray Serve: %s", ray.cluster_resources())  # type: ignore[no-untyped-call]
        serve.run(application(settings, recipe), name=APP_NAME, route_prefix="/", blocking=True)
    except (KeyboardInterrupt, _Stopped):
        return 130
    finally:
        serve.shutdown()  # type: ignore[no-untyped-call]
        ray.shutdown()
    return 0
