"""An ASGI middleware that refuses oversized (413) and non-JSON (415) request bodies.

It runs before routing, so a huge or foreign body is never parsed. The body is read here,
up to the limit, and replayed to the app.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.raw_errors import send_error

BODY_METHODS = {"POST", "PUT", "PATCH"}


class BodyGuard:
    def __init__(self, app: ASGIApp, max_body_bytes: int) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in BODY_METHODS:
            await self.app(scope, receive, send)
            return
        headers = {name.lower(): value for name, value in scope["headers"]}
        content_type = headers.get(b"content-type", b"").decode("latin-1")
        if not content_type:
            # A body sent with no type at all is read as JSON, the only type this API takes.
            scope = {
                **scope,
                "headers": [*scope["headers"], (b"content-type", b"application/json")],
            }
        elif not _is_json(content_type):
            await _refuse(
                send, 415, f"Content-Type must be application/json, not {content_type!r}."
            )
            return
        declared = headers.get(b"content-length", b"0")
        if declared.isdigit() and int(declared) > self.max_body_bytes:
            await _refuse(send, 413, self._too_large())
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                await _refuse(send, 413, self._too_large())
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        await self.app(scope, _replay(b"".join(chunks), receive), send)

    def _too_large(self) -> str:
        return (
            f"The request body is larger than this server's limit of {self.max_body_bytes} bytes."
        )


def _is_json(content_type: str) -> bool:
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or (
        media.startswith("application/") and media.endswith("+json")
    )


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        # After the body, the app only learns of a disconnect.
        return await receive()

    return replay


async def _refuse(send: Send, status: int, message: str) -> None:
    code = {413: "request_too_large", 415: "unsupported_media_type"}[status]
    # The rest of the body is unread; the client must not reuse the connection.
    await send_error(send, status, message, code, ((b"connection", b"close"),))
