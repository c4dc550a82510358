"""Start the embedded vLLM engines for a set of settings, and stop them on exit: the
layout (one engine or two), their cores or devices, their memory plan, and the CPU runtime
their engine cores are spawned with. Which routes are embedded is app/engine/start.py's
choice.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Iterator
from contextlib import AsyncExitStack, contextmanager
from typing import Any

import psutil

from app.embedded_model import prepare_embedded_model
from app.engine.protocol import Engine
from app.engine.vllm.cpu_cores import bound_to, core_plan, keep_numba_off_the_cores, whole_machine
from app.engine.vllm.cpu_runtime import preloaded, recommended_preload
from app.engine.vllm.engine_config import LaunchConfig
from app.engine.vllm.memory_plan import DeviceFacts, Layout, check_plan, choose_layout, needs
from app.vocabulary import ROUTES, Route

logger = logging.getLogger("specgate.engine")

SPAWN_POLL_SECONDS = 0.05


async def resolve_model_path(config: LaunchConfig) -> str:
    if config.model:
        return config.model
    folder = await asyncio.to_thread(prepare_embedded_model, config.models_dir)
    return str(folder)


async def start_vllm_engines(
    config: LaunchConfig, stack: AsyncExitStack, routes: tuple[Route, ...] | list[Route] = ROUTES
) -> dict[Route, Engine]:
    # Imported here so that the HTTP layer, its fast tests and all-remote gateways never load vLLM.
    from app.engine.vllm.vllm_engine import VllmEngine, on_cpu

    model_path = await resolve_model_path(config)
    if on_cpu():
        keep_numba_off_the_cores()
    layout = await asyncio.to_thread(plan_layout, config, model_path, on_cpu())
    if layout == "one" and len(routes) == len(ROUTES):
        return await _start_shared_engine(config, stack, model_path)
    engines: dict[Route, Engine] = {}
    started = time.monotonic()
    # On a CPU the engines start together: their slow parts (imports in the spawned
    # processes, weights, warm-up) overlap. Each engine core takes its core binding from the
    # environment it is spawned with, so the next engine starts once that process exists.
    # On a GPU each engine sizes its memory from what is free when it starts, so they start
    # one after the other.
    together = on_cpu()
    cores = core_plan(config.engine_cpus, routes) if together else {}
    preload = cpu_preload(config, on_cpu())
    starting: dict[Route, asyncio.Task[VllmEngine]] = {}
    for route in routes:
        if route in cores:
            logger.info("the %s engine computes on CPU cores %s", route, cores[route])
        with bound_to(cores.get(route)), preloaded(preload), visible_devices(config, route):
            before = engine_core_children()
            task = asyncio.create_task(
                asyncio.to_thread(VllmEngine.start, config.engines[route], model_path, route)
            )
            starting[route] = task
            await (spawned(task, before) if together else asyncio.wait([task]))
        if task.done() and task.exception() is not None:
            break  # no point starting the next one
    outcomes = await asyncio.gather(*starting.values(), return_exceptions=True)
    for route, outcome in zip(starting, outcomes, strict=True):
        if isinstance(outcome, VllmEngine):
            engines[route] = await stack.enter_async_context(outcome)
    failure = next((o for o in outcomes if isinstance(o, BaseException)), None)
    if failure is not None:
        raise failure  # the stack stops the engines that did start
    logger.info("engines ready in %.1f s", time.monotonic() - started)
    return engines


def plan_layout(config: LaunchConfig, model_path: str, cpu: bool) -> Layout:
    """The layout to start (auto resolved), after checking that its engines fit: a plan that
    cannot fit is refused here, before minutes of loading."""
    if cpu:
        facts = DeviceFacts(gpu=False, memory_bytes=0)
        layout = choose_layout(config, facts, {})
    else:
        facts = gpu_facts()
        speculative = config.speculative_config
        draft = speculative.get("model") if speculative.get("method") != "ngram" else None
        need = needs(config, model_config(model_path), model_config(draft) if draft else None)
        layout = choose_layout(config, facts, need)
        check_plan(config, layout, facts, need)
    logger.info("engine layout: %s%s", layout, " (auto)" if config.layout == "auto" else "")
    return layout


def gpu_facts() -> DeviceFacts:
    from vllm.platforms import current_platform

    return DeviceFacts(gpu=True, memory_bytes=int(current_platform.get_device_total_memory(0)))


def model_config(model: str) -> dict[str, Any]:
    """A model's config.json (read from its folder, or only that file from the hub)."""
    from transformers import AutoConfig

    return dict(AutoConfig.from_pretrained(model).to_dict())


@contextmanager
def visible_devices(config: LaunchConfig, route: Route) -> Iterator[None]:
    """While a route's engine core is spawned, it sees only the route's own GPUs."""
    devices = config.devices(route)
    if not devices:
        yield
        return
    saved = os.environ.get("CUDA_VISIBLE_DEVICES")
    os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(str(device) for device in devices)
    logger.info("the %s engine runs on GPUs %s", route, os.environ["CUDA_VISIBLE_DEVICES"])
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("CUDA_VISIBLE_DEVICES", None)
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = saved


def engine_core_children() -> set[int]:
    """Our child processes that are spawned Python interpreters (vLLM's engine cores)."""
    found = set()
    for child in psutil.Process().children():
        with contextlib.suppress(psutil.Error):
            command = " ".join(child.cmdline())  # vLLM retitles its core "VLLM::EngineCore"
            if "spawn_main" in command or "EngineCore" in command:
                found.add(child.pid)
    return found


def cpu_preload(config: LaunchConfig, cpu: bool) -> str | None:
    """The LD_PRELOAD CPU engine cores are spawned with (None: the gateway's own)."""
    if not cpu:
        return None
    value = recommended_preload(config.recommended_cpu_runtime)
    if value is not None:
        logger.info("CPU engines start with LD_PRELOAD=%s", value)
    return value


async def spawned(task: asyncio.Task[object], before: set[int]) -> None:
    """Wait until an engine core process beyond `before` exists, or the start has ended."""
    while not task.done() and not engine_core_children() - before:
        await asyncio.sleep(SPAWN_POLL_SECONDS)


async def _start_shared_engine(
    config: LaunchConfig, stack: AsyncExitStack, model_path: str
) -> dict[Route, Engine]:
    """One speculative engine serving both routes; the plain route's requests draft nothing."""
    from app.engine.vllm.vllm_engine import VllmEngine, on_cpu

    started = time.monotonic()
    # On a CPU the one engine computes on every core (measured ahead of vLLM's default
    # binding, which reserves one: docs/engines.md, "One engine or two").
    cores = whole_machine() if on_cpu() else None
    if cores is not None:
        logger.info("the shared engine computes on CPU cores %s", cores)
    with bound_to(cores), preloaded(cpu_preload(config, on_cpu())):
        engine = await asyncio.to_thread(
            VllmEngine.start, config.engines["shared"], model_path, "speculative"
        )
    await stack.enter_async_context(engine)
    logger.info("shared engine ready in %.1f s", time.monotonic() - started)
    # Both routes are the one engine: the plain route's requests carry draft length 0
    # (app/engine/protocol.py, for_route).
    return {"speculative": engine, "plain": engine}
