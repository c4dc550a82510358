"""`specgate --ray-replicas N`: deploy specgate on Ray Serve and serve until stopped."""

from __future__ import annotations

import logging

import ray
from ray import serve

from app.serve_ray.app import application
from app.settings import Settings

logger = logging.getLogger("specgate.serve")

APP_NAME = "specgate"


def serve_on_ray(settings: Settings) -> int:
    """Join the cluster at --ray-address (or start a local one), deploy, and block until
    Ctrl-C; the HTTP proxy listens on --host and --port."""
    ray.init(address=settings.ray_address, include_dashboard=False, ignore_reinit_error=True)
    serve.start(http_options={"host": settings.host, "port": settings.port})
    logger.info("deploying on Ray Serve: %s", ray.cluster_resources())  # type: ignore[no-untyped-call]
    try:
        serve.run(application(settings), name=APP_NAME, route_prefix="/", blocking=True)
    except KeyboardInterrupt:
        return 130
    finally:
        serve.shutdown()  # type: ignore[no-untyped-call]
    return 0
