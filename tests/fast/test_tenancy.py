"""Whose earlier answers a request may draft from: its tenant, from the API key or the body's
cache_salt, carried to the engine (app/tenancy.py). Over HTTP on the fake engines."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from app.engine.fakes.scripted import FakeEngine
from app.engine.generation import SuffixCacheCounts
from app.main import create_app
from app.settings import Settings
from app.tenancy import Tenancy
from tests.conftest import ClientFactory
from tests.metrics_text import sample

BODIES: dict[str, tuple[str, dict[str, Any]]] = {
    "completions": ("/v1/completions", {"prompt": "a b c", "max_tokens": 2}),
    "chat": ("/v1/chat/completions", {"messages": [{"role": "user", "content": "a b c"}],
                                      "max_tokens": 2}),
    "responses": ("/v1/responses", {"input": "a b c", "max_output_tokens": 2}),
}  # fmt: skip


def test_a_salt_outranks_the_key_and_neither_is_kept_in_the_clear() -> None:
    keyed = Tenancy("tenant", "Bearer sk-one")
    assert keyed.tenant() == Tenancy("tenant", "Bearer sk-one").tenant()
    assert keyed.tenant() != Tenancy("tenant", "Bearer sk-two").tenant()
    assert keyed.tenant("team-a") == Tenancy("tenant", "Bearer sk-two").tenant("team-a")
    assert "sk-one" not in str(keyed.tenant()) and "team-a" not in str(keyed.tenant("team-a"))
    assert Tenancy("tenant", None).tenant() is None
    assert Tenancy("shared", "Bearer sk-one").tenant("team-a") is None


@pytest.mark.parametrize("endpoint", sorted(BODIES))
async def test_each_endpoint_hands_the_engine_its_tenant(
    make_client: ClientFactory, endpoint: str
) -> None:
    client, engines = await make_client()
    path, body = BODIES[endpoint]
    tenants = []
    for key, salt in (
        ("sk-one", None),
        ("sk-two", None),
        ("sk-one", "team-a"),
        ("sk-two", "team-a"),
    ):
        extra = {"cache_salt": salt} if salt else {}
        response = await client.post(
            path,
            json={"model": "SmolLM2-135M-Instruct", **body, **extra},
            headers={"Authorization": f"Bearer {key}", "X-Speculative": "on"},
        )
        assert response.status_code == 200, response.text
        tenants.append(engines["speculative"].requests[-1].tenant)
    one, two, salted_one, salted_two = tenants
    assert one is not None and one != two
    assert salted_one == salted_two != one


async def test_a_shared_tree_gives_no_tenant(make_client: ClientFactory) -> None:
    client, engines = await make_client(Settings(routing_exploration=0, suffix_tree_scope="shared"))
    path, body = BODIES["completions"]
    response = await client.post(
        path,
        json={"model": "SmolLM2-135M-Instruct", **body, "cache_salt": "team-a"},
        headers={"Authorization": "Bearer sk-one", "X-Speculative": "on"},
    )
    assert response.status_code == 200, response.text
    assert engines["speculative"].requests[-1].tenant is None


async def test_an_overlong_salt_is_refused_by_name(make_client: ClientFactory) -> None:
    client, _ = await make_client()
    path, body = BODIES["chat"]
    response = await client.post(
        path, json={"model": "SmolLM2-135M-Instruct", **body, "cache_salt": "x" * 257}
    )
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "cache_salt"


class SuffixDraftingEngine(FakeEngine):
    """A fake engine whose worker would hold suffix trees, as a VllmEngine with "suffix"."""

    def __init__(self) -> None:
        super().__init__("speculative", per_request_draft_length=True)
        self.asked = 0

    async def suffix_cache_counts(self) -> SuffixCacheCounts:
        self.asked += 1
        return SuffixCacheCounts(tenants=2, cached_answers=5, cached_tokens=640, hits=7)


async def test_metrics_report_the_trees_as_the_engine_counts_them() -> None:
    engine = SuffixDraftingEngine()
    # One engine serving both routes, as --engine-layout one: asked once per scrape.
    app = create_app(Settings(), {"speculative": engine, "plain": engine})  # type: ignore[dict-item]
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://specgate") as client:
            text = (await client.get("/metrics")).text
    assert engine.asked == 1
    assert sample(text, "specgate_suffix_cache_answers") == 5
    assert sample(text, "specgate_suffix_cache_tokens") == 640
    assert sample(text, "specgate_suffix_cache_hits_total") == 7
    assert sample(text, "specgate_suffix_cache_evictions_total") == 0


async def test_metrics_carry_no_tree_series_where_nothing_drafts_from_trees(
    make_client: ClientFactory,
) -> None:
    client, _ = await make_client()
    assert "specgate_suffix_cache" not in (await client.get("/metrics")).text
