"""An ASGI middleware that requires `Authorization: Bearer <key>` on the API routes.

It runs first, so a stranger's request is refused before its body is read.
"""

from __future__ import annotations

import hmac

from starlette.types import ASGIApp, Receive, Scope, Send

from app.api.raw_errors import send_error

CHALLENGE = ((b"www-authenticate", b"Bearer"),)


class ApiKeyGuard:
    def __init__(self, app: ASGIApp, keys: list[str], protect_metrics: bool) -> None:
        self.app = app
        self.keys = [key.encode() for key in keys]
        # vLLM's helpers (/tokenize, ...) sit beside /v1 and are guarded as it is.
        helpers = ("/tokenize", "/detokenize", "/tokenizer_info")
        self.prefixes = (*helpers, "/v1/", "/metrics") if protect_metrics else (*helpers, "/v1/")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self._protected(scope["path"]):
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        scheme, _, presented = headers.get(b"authorization", b"").partition(b" ")
        if scheme.lower() != b"bearer" or not presented.strip():
            message = "Missing API key: send it as 'Authorization: Bearer <key>'."
            await send_error(send, 401, message, "missing_api_key", CHALLENGE)
            return
        if not self._known(presented.strip()):
            await send_error(send, 401, "Incorrect API key provided.", "invalid_api_key", CHALLENGE)
            return
        await self.app(scope, receive, send)

    def _protected(self, path: str) -> bool:
        return bool(self.keys) and (path.startswith(self.prefixes) or path == "/v1")

    def _known(self, presented: bytes) -> bool:
        # Compare with every key, in constant time each, so timing reveals neither a key's
        # prefix nor which key matched.
        matched = False
        for key in self.keys:
            matched |= hmac.compare_digest(presented, key)
        return matched
