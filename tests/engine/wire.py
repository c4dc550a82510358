"""Raw HTTP calls to the real server that check every body against OpenAI's schema."""

from __future__ import annotations

import json
from typing import Any

import httpx

from tests.engine.server import ServerProcess
from tests.openai_schema import (
    CHAT,
    CHAT_CHUNK,
    COMPLETION,
    COMPLETION_CHUNK,
    ERROR,
    violations,
)

SCHEMAS = {
    "/v1/chat/completions": (CHAT, CHAT_CHUNK),
    "/v1/completions": (COMPLETION, COMPLETION_CHUNK),
}
TIMEOUT = 300


def call(server: ServerProcess, path: str, body: dict[str, Any], **headers: str) -> dict[str, Any]:
    """A non-streamed 200 response whose body conforms."""
    response = httpx.post(f"{server.base_url}{path}", json=body, headers=headers, timeout=TIMEOUT)
    assert response.status_code == 200, response.text
    data: dict[str, Any] = response.json()
    assert violations(data, SCHEMAS[path][0]) == [], data
    return data


def stream(
    server: ServerProcess, path: str, body: dict[str, Any], **headers: str
) -> list[dict[str, Any]]:
    """The chunks of a streamed 200 response, each one conforming, ended by [DONE]."""
    with httpx.stream(
        "POST",
        f"{server.base_url}{path}",
        json={**body, "stream": True},
        headers=headers,
        timeout=TIMEOUT,
    ) as response:
        assert response.status_code == 200, response.read().decode()
        # A comment line (": ping", on a stream quiet for 15 s on a busy machine) is no event.
        lines = [line for line in response.iter_lines() if line and not line.startswith(":")]
        events = [line.removeprefix("data: ") for line in lines]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(event) for event in events[:-1]]
    for chunk in chunks:
        assert "error" not in chunk, chunk
        assert violations(chunk, SCHEMAS[path][1]) == [], chunk
    return chunks


def refused(
    server: ServerProcess, path: str, body: Any, status: int = 400, **headers: str
) -> dict[str, Any]:
    """An error response with `status` whose body conforms to ErrorResponse."""
    response = httpx.post(f"{server.base_url}{path}", json=body, headers=headers, timeout=TIMEOUT)
    assert response.status_code == status, response.text
    data: dict[str, Any] = response.json()
    assert violations(data, ERROR) == [], data
    assert set(data["error"]) == {"message", "type", "param", "code"}
    error: dict[str, Any] = data["error"]
    return error


def streamed_texts(chunks: list[dict[str, Any]], chat: bool) -> dict[int, str]:
    """Each choice's text, joined from its chunks."""
    texts: dict[int, str] = {}
    for chunk in chunks:
        for choice in chunk["choices"]:
            piece = choice["delta"].get("content") if chat else choice["text"]
            texts[choice["index"]] = texts.get(choice["index"], "") + (piece or "")
    return texts


def finish_reasons(chunks: list[dict[str, Any]]) -> dict[int, str]:
    return {
        choice["index"]: choice["finish_reason"]
        for chunk in chunks
        for choice in chunk["choices"]
        if choice["finish_reason"] is not None
    }
