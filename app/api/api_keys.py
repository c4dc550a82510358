"""An ASGI middleware that requires `Authorization: Bearer <key>` on the API routes.

It runs first, so a stranger's request is refused before its body is read. A known key is
left for the handlers in the request's state (app/tenants/access.py), and the rate-limit
headers the dispatcher sets there are added to the response when it starts.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.raw_errors import send_error
from app.tenants.access import STATE_NAME, Access
from app.tenants.live_keys import LiveKeyRing

CHALLENGE = ((b"www-authenticate", b"Bearer"),)


class ApiKeyGuard:
    def __init__(self, app: ASGIApp, keys: LiveKeyRing, protect_metrics: bool) -> None:
        self.app = app
        self.keys = keys
        # vLLM's helpers (/tokenize, ...) sit beside /v1 and are guarded as it is.
        helpers = ("/tokenize", "/detokenize", "/tokenizer_info")
        self.prefixes = (*helpers, "/v1/", "/metrics") if protect_metrics else (*helpers, "/v1/")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        access = Access()
        scope.setdefault("state", {})[STATE_NAME] = access
        ring = self.keys.ring
        if ring and self._protected(scope["path"]):
            headers = dict(scope["headers"])
            scheme, _, presented = headers.get(b"authorization", b"").partition(b" ")
            if scheme.lower() != b"bearer" or not presented.strip():
                message = "Missing API key: send it as 'Authorization: Bearer <key>'."
                await send_error(send, 401, message, "missing_api_key", CHALLENGE)
                return
            access.key = ring.find(presented.strip())
            if access.key is None:
                message = "Incorrect API key provided."
                await send_error(send, 401, message, "invalid_api_key", CHALLENGE)
                return

        async def send_with_limits(message: Message) -> None:
            if message["type"] == "http.response.start" and access.headers:
                extra = [(k.encode(), v.encode()) for k, v in access.headers.items()]
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        await self.app(scope, receive, send_with_limits)

    def _protected(self, path: str) -> bool:
        return path.startswith(self.prefixes) or path == "/v1"
