"""API keys: every /v1 route needs one when keys are set; /health never does."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from app.settings import Settings
from tests.conftest import MODEL, ClientFactory
from tests.openai_schema import ERROR, violations

CHAT_BODY = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


async def keyed_client(make_client: ClientFactory, **settings: object) -> httpx.AsyncClient:
    client, _ = await make_client(Settings(routing_exploration=0, **settings))  # type: ignore[arg-type]
    return client


@pytest.mark.parametrize(
    ("authorization", "code"),
    [
        (None, "missing_api_key"),
        ("Bearer wrong", "invalid_api_key"),
        ("Bearer k1x", "invalid_api_key"),
        ("Basic k1", "missing_api_key"),
        ("Bearer ", "missing_api_key"),
    ],
)
async def test_missing_or_wrong_keys_get_401(
    make_client: ClientFactory, authorization: str | None, code: str
) -> None:
    client = await keyed_client(make_client, api_key=["k1", "k2"])
    headers = {} if authorization is None else {"Authorization": authorization}
    for method, path in [("POST", "/v1/chat/completions"), ("GET", "/v1/models"), ("GET", "/v1/x")]:
        response = await client.request(method, path, json=CHAT_BODY, headers=headers)
        assert response.status_code == 401, (path, response.text)
        assert response.headers["www-authenticate"] == "Bearer"
        assert violations(response.json(), ERROR) == []
        assert response.json()["error"]["code"] == code


async def test_any_configured_key_is_accepted(make_client: ClientFactory) -> None:
    client = await keyed_client(make_client, api_key=["k1", "k2"])
    for key in ("k1", "k2"):
        response = await client.post(
            "/v1/chat/completions", json=CHAT_BODY, headers={"Authorization": f"Bearer {key}"}
        )
        assert response.status_code == 200, response.text


async def test_health_stays_open_and_metrics_follow_the_setting(
    make_client: ClientFactory,
) -> None:
    open_metrics = await keyed_client(make_client, api_key=["k1"])
    assert (await open_metrics.get("/health")).status_code == 200
    assert (await open_metrics.get("/metrics")).status_code == 200
    closed = await keyed_client(make_client, api_key=["k1"], metrics_need_key=True)
    assert (await closed.get("/health")).status_code == 200
    assert (await closed.get("/metrics")).status_code == 401
    keyed = await closed.get("/metrics", headers={"Authorization": "Bearer k1"})
    assert keyed.status_code == 200


async def test_without_keys_the_api_is_open(client: httpx.AsyncClient) -> None:
    assert (await client.post("/v1/chat/completions", json=CHAT_BODY)).status_code == 200


def test_keys_come_from_flags_env_and_a_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key_file = tmp_path / "keys"
    key_file.write_text("# team keys\nfile-1\n\n  file-2  \n")
    monkeypatch.setenv("SPECGATE_API_KEY", "env-1,env-2")
    ring = Settings().key_ring()
    assert len(ring.keys) == 2 and ring.find(b"env-1") and ring.find(b"env-2")
    ring = Settings(api_key=["flag-1"], api_key_file=key_file).key_ring()
    assert len(ring.keys) == 3
    assert all(ring.find(key) for key in (b"flag-1", b"file-1", b"file-2"))
    assert ring.find(b"# team keys") is None and ring.find(b"env-1") is None


def test_an_unreadable_key_file_is_a_settings_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="api-key-file"):
        Settings(api_key_file=tmp_path / "missing")
