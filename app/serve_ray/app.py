"""specgate as a Ray Serve application: engine replicas behind the gateway as Serve's ingress.

- `engine`: app/serve_ray/replica.py's EngineReplica, one engine each (the `one` layout),
  reserving --ray-replica-cpus and --ray-replica-gpus (with a placement group on one node when
  the engine spans several GPUs), a fixed count or Serve's autoscaling, Serve's health check
  calling the engine's, and specgate's request router (or one of Ray's, --ray-router).
- `gateway`: the whole API of app/main.py (chat, completions, responses, tokenizer, models,
  routing, metrics), its engine the replicas through a deployment handle
  (app/serve_ray/handle.py).

`specgate --ray-replicas N` deploys it on a local cluster (or --ray-address's); a Serve config
file deploys the same with `serve run` / `serve deploy` (import path `app.serve_ray.app:build`,
its args any of specgate's settings by field name: deploy/ray-serve.yaml).
"""

from __future__ import annotations

import logging
from contextlib import AsyncExitStack
from typing import Any

from ray import serve
from ray.serve.config import RequestRouterConfig
from ray.serve.deployment import Application

from app.engine.protocol import Engine
from app.main import create_app
from app.serve_ray.handle import HandleEngine
from app.serve_ray.replica import EngineRecipe, EngineReplica
from app.settings import Settings
from app.vocabulary import Route

logger = logging.getLogger("specgate.serve")

ROUTERS = {
    "specgate": "app.serve_ray.router:SpecgateRouter",
    "power-of-two": (
        "ray.serve._private.request_router.pow_2_router:PowerOfTwoChoicesRequestRouter"
    ),
    "prefix-affinity": "ray.serve.llm.request_router:PrefixCacheAffinityRouter",
}
# How often replicas report to the routers (seconds): stale reports send a burst to one
# replica; the router counts its own sends between them.
ROUTING_STATS_PERIOD_S = 2.0
# Serve's health check of each replica, and how long a replica's engine may take to start.
HEALTH_CHECK_PERIOD_S = 5.0
HEALTH_CHECK_TIMEOUT_S = 30.0
GRACEFUL_SHUTDOWN_S = 30.0


@serve.ingress()
class Gateway:
    """The gateway, its engine the replicas behind `engines`."""

    def __init__(self, engines: Any, settings: dict[str, Any]) -> None:
        self._engines = engines
        self._settings = Settings(**settings)

    def __serve_build_asgi_app__(self) -> Any:
        handle = self._engines

        async def start(settings: Settings, stack: AsyncExitStack) -> dict[Route, Engine]:
            engine = await stack.enter_async_context(await HandleEngine.connect(handle))
            return {"speculative": engine, "plain": engine}

        return create_app(self._settings, starter=start)


def _settings_fields(settings: Settings) -> dict[str, Any]:
    """The settings as the replicas and gateway rebuild them (secrets in the clear: they travel
    inside Ray's object store, as the process's own arguments do)."""
    fields = settings.model_dump(exclude_unset=True)
    for name, value in list(fields.items()):
        secret = getattr(value, "get_secret_value", None)
        if secret is not None:
            fields[name] = secret()
    return fields


def engine_options(settings: Settings) -> dict[str, Any]:
    """The engine deployment's options."""
    options: dict[str, Any] = {
        "name": "engine",
        "max_ongoing_requests": settings.ray_max_ongoing_requests,
        "health_check_period_s": HEALTH_CHECK_PERIOD_S,
        "health_check_timeout_s": HEALTH_CHECK_TIMEOUT_S,
        "graceful_shutdown_timeout_s": GRACEFUL_SHUTDOWN_S,
        "request_router_config": RequestRouterConfig.model_validate(
            {
                "request_router_class": ROUTERS[settings.ray_router],
                "request_routing_stats_period_s": ROUTING_STATS_PERIOD_S,
            }
        ),
    }
    if settings.ray_autoscaling is not None:
        options["autoscaling_config"] = settings.ray_autoscaling
    else:
        options["num_replicas"] = max(1, settings.ray_replicas)
    gpus = settings.ray_replica_gpus
    if gpus and settings.tensor_parallel_size > 1:
        # The replica's process, then one bundle per GPU its engine's workers use, packed on
        # one node (vLLM's Ray executor starts its workers in the replica's placement group).
        options["placement_group_bundles"] = [
            {"CPU": settings.ray_replica_cpus},
            *({"GPU": 1.0} for _ in range(settings.tensor_parallel_size)),
        ]
        options["placement_group_strategy"] = "STRICT_PACK"
    else:
        options["ray_actor_options"] = {"num_cpus": settings.ray_replica_cpus, "num_gpus": gpus}
    return options


def application(settings: Settings, recipe: EngineRecipe | None = None) -> Application:
    """The Serve application; `recipe` replaces the replicas' engine (tests: a fake one)."""
    fields = _settings_fields(settings)
    recipe = recipe or EngineRecipe(settings=fields)
    engines = serve.deployment(**engine_options(settings))(EngineReplica).bind(recipe)
    gateway = serve.deployment(name="gateway", ray_actor_options={"num_cpus": 0})(Gateway)
    bound: Application = gateway.bind(engines, fields)
    return bound


def build(args: dict[str, Any]) -> Application:
    """`serve run app.serve_ray.app:build` / a Serve config file: `args` are specgate's
    settings by field name (SPECGATE_* variables apply too)."""
    return application(Settings(**args))
