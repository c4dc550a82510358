"""Which engine serves each route, and what an all-remote gateway loads."""

from __future__ import annotations

import subprocess
import sys
from contextlib import AsyncExitStack

import pytest

from app.engine.fakes.scripted import FakeEngine
from app.engine.protocol import Engine
from app.engine.remote.remote_engine import RemoteEngine
from app.engine.start import start_engines
from app.engine.vllm import launch
from app.settings import Settings
from app.vocabulary import Route
from tests.paths import REPO

# Port 9 (discard) refuses connections at once: the pools start with no healthy upstream.
ALL_REMOTE = """
import asyncio, sys
from contextlib import AsyncExitStack
from app.engine.start import start_engines
from app.engine.remote.remote_engine import RemoteEngine
from app.settings import Settings

async def main() -> None:
    settings = Settings(speculative_upstreams="http://127.0.0.1:9",
                        plain_upstreams="http://127.0.0.1:9/v1")
    async with AsyncExitStack() as stack:
        engines = await start_engines(settings, stack)
        assert sorted(engines) == ["plain", "speculative"], engines
        assert all(isinstance(engine, RemoteEngine) for engine in engines.values())
        assert all(engine.unfinished_requests() == 0 for engine in engines.values())

asyncio.run(main())
loaded = sorted(name for name in ("vllm", "torch", "transformers") if name in sys.modules)
assert not loaded, loaded
"""


def test_an_all_remote_gateway_starts_no_engine_and_never_imports_vllm() -> None:
    result = subprocess.run(
        [sys.executable, "-c", ALL_REMOTE], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr


async def test_a_route_without_upstreams_keeps_its_embedded_engine(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    embedded: list[list[Route]] = []

    async def fake_vllm(
        settings: Settings, stack: AsyncExitStack, routes: list[Route]
    ) -> dict[Route, Engine]:
        embedded.append(list(routes))
        return {route: FakeEngine(route) for route in routes}

    monkeypatch.setattr(launch, "start_vllm_engines", fake_vllm)
    settings = Settings(plain_upstreams="http://127.0.0.1:9")  # type: ignore[arg-type]
    async with AsyncExitStack() as stack:
        engines = await start_engines(settings, stack)
        assert embedded == [["speculative"]]
        assert isinstance(engines["plain"], RemoteEngine)
        assert isinstance(engines["speculative"], FakeEngine)


def _sleep(seconds: float) -> None:
    import time

    time.sleep(seconds)


async def test_the_next_engine_starts_once_a_core_process_exists() -> None:
    import asyncio
    import multiprocessing

    before = launch.engine_core_children()

    def start_core() -> multiprocessing.process.BaseProcess:
        # A spawned interpreter, as vLLM starts its engine core; the "start" then goes on.
        process = multiprocessing.get_context("spawn").Process(target=_sleep, args=(5,))
        process.start()
        _sleep(3)
        return process

    task = asyncio.create_task(asyncio.to_thread(start_core))
    await launch.spawned(task, before)
    assert not task.done(), "it waited for the whole start, not for the process"
    assert len(launch.engine_core_children() - before) == 1
    process = await task
    process.terminate()
    process.join()


async def test_a_start_that_never_spawns_ends_the_wait() -> None:
    import asyncio

    task = asyncio.create_task(asyncio.sleep(0.1))
    await asyncio.wait_for(launch.spawned(task, launch.engine_core_children()), timeout=5)
    assert task.done()
