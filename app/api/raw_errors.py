"""OpenAI error responses sent straight from ASGI middleware, before any routing."""

from __future__ import annotations

import json

from starlette.types import Send

from app.errors import error_body


async def send_error(
    send: Send,
    status: int,
    message: str,
    code: str,
    headers: tuple[tuple[bytes, bytes], ...] = (),
) -> None:
    payload = json.dumps(error_body(message, "invalid_request_error", None, code)).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(payload)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload})
