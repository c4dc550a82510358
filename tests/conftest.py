"""Fast tests: the HTTP layer over the fake engine, in-process (httpx ASGITransport)."""

from __future__ import annotations

import gc
import os
import tempfile
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack
from pathlib import Path

import httpx
import pytest

from app.drafters import NGRAM
from app.engine.fakes.scripted import FakeEngine
from app.main import create_app
from app.settings import Settings

MODEL = "SmolLM2-135M-Instruct"

# The real-engine tiers: each package starts real vLLM engines (or servers of them), so every
# test in it carries the `engine` marker; the rest of tests/ is the fast tier.
ENGINE_TIERS = (
    "draft_model",
    "engine",
    "engine_one",
    "engine_suffix",
    "faults",
    "gpu_check",
    "ray",
    "remote",
)
TESTS = Path(__file__).parent
# Set where the session made the ledger's folder itself (not the user's value).
_OWN_LEDGER = "SPECGATE_TESTS_OWN_LEDGER"


# There specgate runs in its own server process, out of these filters' reach; what leaks
# sockets in the test process are the SDK and httpx clients the tests make, which a failing
# assertion or a dropped stream leaves for the garbage collector. The fast tier, which runs
# specgate's own code in process, keeps every warning an error.
CLIENT_LEAKS = pytest.mark.filterwarnings("ignore::ResourceWarning")


def pytest_configure(config: pytest.Config) -> None:
    # Every server the tests start (in process or not) keeps its usage ledger in the session's
    # own folder, never in the user's cache; a test that reads a ledger names its own.
    # Each pytest-xdist worker (the fast tier runs on several) gets a ledger of its own: they
    # inherit the controller's environment, and one file for all would make their tests'
    # usage figures each other's.
    worker = getattr(config, "workerinput", {}).get("workerid")
    if "SPECGATE_USAGE_LEDGER_PATH" not in os.environ or (worker and _OWN_LEDGER in os.environ):
        folder = Path(tempfile.mkdtemp(prefix="specgate-tests-"))
        os.environ["SPECGATE_USAGE_LEDGER_PATH"] = str(folder / "usage.sqlite3")
        os.environ[_OWN_LEDGER] = "1"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.relative_to(TESTS).parts[0] in ENGINE_TIERS:
            item.add_marker(pytest.mark.engine)
            item.add_marker(CLIENT_LEAKS)


def pytest_sessionfinish(session: pytest.Session) -> None:
    # Clients leaked by the last engine-tier tests are collected at the session's end, outside
    # any test and its marks, where pytest would report each socket: collect them here first,
    # under the same exception. Nothing of the fast tier is left to collect by then.
    if any(item.get_closest_marker("engine") for item in session.items):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)
            for _ in range(3):  # a collection can free objects whose finalizers free others
                gc.collect()


ClientFactory = Callable[..., Awaitable[tuple[httpx.AsyncClient, dict[str, FakeEngine]]]]


@pytest.fixture
async def make_client() -> AsyncIterator[ClientFactory]:
    """Build an app over fake engines and a client for it; lifespan entered and exited."""
    async with AsyncExitStack() as stack:

        async def factory(
            settings: Settings | None = None, **engine_options: float
        ) -> tuple[httpx.AsyncClient, dict[str, FakeEngine]]:
            engines = {
                "speculative": FakeEngine("speculative", **engine_options),  # type: ignore[arg-type]
                "plain": FakeEngine("plain", **engine_options),  # type: ignore[arg-type]
            }
            # The fake engines stand for an n-gram engine (their drafts replay prompt lookup).
            settings = settings or Settings(routing_exploration=0, speculative_config=NGRAM)
            app = create_app(settings, engines)  # type: ignore[arg-type]
            # ASGITransport does not run the lifespan; enter it ourselves.
            await stack.enter_async_context(app.router.lifespan_context(app))
            client = httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app), base_url="http://specgate"
            )
            await stack.enter_async_context(client)
            return client, engines

        yield factory


@pytest.fixture
async def client(make_client: ClientFactory) -> httpx.AsyncClient:
    client, _ = await make_client()
    return client
