"""The model this server serves, as clients name it."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from app.errors import ModelNotFoundError


@dataclass(frozen=True)
class ServedModel:
    id: str
    # When the server started, in Unix seconds: the model's `created` in /v1/models.
    created: int = field(default_factory=lambda: int(time.time()))

    def check(self, name: str) -> None:
        """Raise unless a request's `model` names this one."""
        if name != self.id:
            raise ModelNotFoundError(
                f"The model '{name}' does not exist; this server serves '{self.id}'.",
                param="model",
            )
