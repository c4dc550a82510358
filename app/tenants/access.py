"""What the key guard learned of a request's client, and what its response must say of its
limits: one mutable value per request, made by the guard, read by the dispatcher."""

from __future__ import annotations

from dataclasses import dataclass, field

from app.tenants.keys import ApiKey

# Where the guard leaves it in the ASGI scope's state (request.state.access).
STATE_NAME = "access"


@dataclass
class Access:
    # The key the request came with; None on an open server.
    key: ApiKey | None = None
    # OpenAI's x-ratelimit-* headers, set once the request is granted or refused; the guard
    # adds them to the response when it starts.
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def tenant(self) -> str:
        """The name fairness and usage know the client by ("" on an open server)."""
        return self.key.name if self.key is not None else ""

    @property
    def weight(self) -> float:
        return self.key.weight if self.key is not None else 1.0
