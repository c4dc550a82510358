"""specgate over fake engines with a key file, for the tenants' HTTP tests: the app (its
lifespan entered), and a client that sends one key."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
from fastapi import FastAPI

from app.drafters import NGRAM
from app.engine.fakes.scripted import FakeEngine
from app.main import create_app
from app.settings import Settings


@asynccontextmanager
async def keyed_app(folder: Path, keys: str) -> AsyncIterator[FastAPI]:
    """The app with `keys` as its key file (written unless the folder has one already, so a
    test may change it) and its usage ledger in `folder`."""
    key_file = folder / "keys.toml"
    if not key_file.exists():
        key_file.write_text(keys)
    engines = {route: FakeEngine(route) for route in ("speculative", "plain")}
    settings = Settings(
        routing_exploration=0,
        speculative_config=NGRAM,
        api_key_file=key_file,
        usage_ledger_path=folder / "usage.sqlite3",
    )
    app = create_app(settings, engines)  # type: ignore[arg-type]
    async with app.router.lifespan_context(app):
        yield app


def as_key(app: FastAPI, key: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app),
        base_url="http://specgate",
        headers={"Authorization": f"Bearer {key}"},
    )
