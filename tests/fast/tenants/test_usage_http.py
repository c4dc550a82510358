"""Usage per key over HTTP (fake engines): what clients were told they used is what the
ledger holds, by key name; only an admin key reads it or reloads the keys; /metrics names
keys, never shows them; a restart keeps the budgets spent."""

from __future__ import annotations

import json
import time
from contextlib import AbstractAsyncContextManager
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from app.engine.fakes.scripted import FakeEngine
from app.main import create_app
from app.settings import Settings
from tests.conftest import MODEL
from tests.fast.tenants.keyed_app import as_key, keyed_app

KEYS = """
[[key]]
name = "ops"
key = "sk-ops"
admin = true

[[key]]
name = "alpha"
key = "sk-alpha"

[[key]]
name = "beta"
key = "sk-beta"
tokens_per_day = 60
"""


def server(folder: Path) -> AbstractAsyncContextManager[FastAPI]:
    return keyed_app(folder, KEYS)


def chat(max_tokens: int = 8, **extra: object) -> dict[str, object]:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
    return {**body, "max_tokens": max_tokens, **extra}


async def streamed_usage(client: httpx.AsyncClient) -> dict[str, int]:
    body = chat(stream=True, stream_options={"include_usage": True})
    async with client.stream("POST", "/v1/chat/completions", json=body) as answer:
        lines = [line async for line in answer.aiter_lines() if line.startswith("data: {")]
    return json.loads(lines[-1][6:])["usage"]  # type: ignore[no-any-return]


async def test_usage_by_key_as_the_clients_were_told_and_for_admins_only(tmp_path: Path) -> None:
    since = int(time.time()) - 5
    async with server(tmp_path) as app:
        told: dict[str, list[dict[str, int]]] = {"alpha": [], "beta": []}
        async with as_key(app, "sk-alpha") as alpha, as_key(app, "sk-beta") as beta:
            told["alpha"].append(
                (await alpha.post("/v1/chat/completions", json=chat())).json()["usage"]
            )
            told["alpha"].append(await streamed_usage(alpha))
            told["beta"].append(
                (await beta.post("/v1/chat/completions", json=chat())).json()["usage"]
            )
            spent = await beta.post("/v1/chat/completions", json=chat(max_tokens=50))
            assert spent.status_code == 429
            assert (await alpha.get(f"/v1/usage?start_time={since}")).status_code == 403
            assert (await alpha.post("/v1/keys/reload")).status_code == 403
        async with as_key(app, "sk-ops") as ops:
            page = (await ops.get(f"/v1/usage?start_time={since}&bucket_width=1h")).json()
            metrics = (await ops.get("/metrics")).text
    assert page["object"] == "page" and page["has_more"] is False
    results = {r["api_key_id"]: r for bucket in page["data"] for r in bucket["results"]}
    assert set(results) == {"alpha", "beta"}
    for name, usages in told.items():
        found = results[name]
        assert found["object"] == "organization.usage.completions.result"
        assert found["num_model_requests"] == len(usages)
        assert found["input_tokens"] == sum(u["prompt_tokens"] for u in usages)
        assert found["output_tokens"] == sum(u["completion_tokens"] for u in usages)
        assert found["model"] == MODEL
    assert (
        results["beta"]["rate_limited_requests"] == 1
        and results["alpha"]["rate_limited_requests"] == 0
    )
    assert 'specgate_key_requests_total{key="alpha",outcome="ok"} 2.0' in metrics
    assert 'specgate_key_refusals_total{code="insufficient_quota",key="beta"} 1.0' in metrics
    assert "sk-alpha" not in metrics and "sk-beta" not in metrics

    # A restart reads the day's usage back: beta's budget is still spent.
    async with server(tmp_path) as app, as_key(app, "sk-beta") as beta:
        again = await beta.post("/v1/chat/completions", json=chat(max_tokens=50))
        assert again.status_code == 429 and again.json()["error"]["code"] == "insufficient_quota"


async def test_an_admin_reloads_the_keys_and_a_bad_file_names_its_line(tmp_path: Path) -> None:
    async with server(tmp_path) as app, as_key(app, "sk-ops") as ops:
        keys = tmp_path / "keys.toml"
        keys.write_text(KEYS + '\n[[key]]\nname = "gamma"\nkey = "sk-gamma"\nweight = 0\n')
        refused = await ops.post("/v1/keys/reload")
        assert refused.status_code == 400 and "line 19" in refused.json()["error"]["message"]
        async with as_key(app, "sk-gamma") as gamma:
            assert (await gamma.post("/v1/chat/completions", json=chat())).status_code == 401
            keys.write_text(KEYS + '\n[[key]]\nname = "gamma"\nkey = "sk-gamma"\n')
            reloaded = await ops.post("/v1/keys/reload")
            assert reloaded.status_code == 200 and reloaded.json()["keys"] == 4
            assert (await gamma.post("/v1/chat/completions", json=chat())).status_code == 200


async def test_a_default_ledger_that_cannot_be_written_is_off_and_a_named_one_stops_the_start(
    tmp_path: Path,
) -> None:
    # A file where the cache folder should be: nothing can be written under it (as a
    # read-only cache in an image, for any user, root included).
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("")
    engines = {route: FakeEngine(route) for route in ("speculative", "plain")}
    settings = Settings(routing_exploration=0, cache_dir=blocked, usage_ledger_path=None)
    app = create_app(settings, engines)  # type: ignore[arg-type]
    async with app.router.lifespan_context(app):
        async with as_key(app, "-") as client:
            assert (await client.post("/v1/chat/completions", json=chat())).status_code == 200
            off = await client.get("/v1/usage?start_time=0")
            assert off.status_code == 404 and "ledger is off" in off.json()["error"]["message"]
    named = Settings(routing_exploration=0, usage_ledger_path=blocked / "usage.sqlite3")
    refused = create_app(named, engines)  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="--usage-ledger-path"):
        async with refused.router.lifespan_context(refused):
            pass
